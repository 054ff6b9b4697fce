"""`python -m experiments.credit_long {run,report,confirm,all,pilot} [--out results/credit-long] ...`:
`oar_rl.study.screen` on this experiment's plan (`plan.py`)."""

from __future__ import annotations

from experiments.credit_long.plan import CREDIT_LONG
from oar_rl.study.screen import main as screen_main


def main(argv: list[str] | None = None) -> int:
    return screen_main(argv, plan=CREDIT_LONG, prog="python -m experiments.credit_long")


if __name__ == "__main__":
    raise SystemExit(main())
