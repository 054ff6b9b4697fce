"""`python -m experiments.credit_long {run,report,confirm,pilot} [--out results/credit-long] ...`:
`oar_rl.study.screen` on this experiment's plan (`plan.py`); `python -m experiments.credit_long regimes`:
the pre-registered short-vs-long comparison of the rules' gaps to GRPO (`regimes.py`)."""

from __future__ import annotations

import sys

from experiments.credit_long.plan import CREDIT_LONG
from oar_rl.study.screen import main as screen_main


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["regimes"]:
        from experiments.credit_long.regimes import main as regimes_main

        return regimes_main(args[1:])
    return screen_main(args, plan=CREDIT_LONG, prog="python -m experiments.credit_long")


if __name__ == "__main__":
    raise SystemExit(main())
