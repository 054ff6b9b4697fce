"""`python -m experiments.credit_screen {run,report,confirm,all,pilot} [--out results/credit-screen] ...`:
`oar_rl.study.screen` on this experiment's plan (`plan.py`)."""

from __future__ import annotations

from experiments.credit_screen.plan import CREDIT_SCREEN
from oar_rl.study.screen import main as screen_main


def main(argv: list[str] | None = None) -> int:
    return screen_main(argv, plan=CREDIT_SCREEN, prog="python -m experiments.credit_screen")


if __name__ == "__main__":
    raise SystemExit(main())
