"""`python -m experiments.credit_screen {run,report,confirm,all,pilot} [--out results/credit-screen] ...`:
`oar_rl.study.screen` on this experiment's plan (`plan.py`); `... fingerprint --kind screen --arm grpo
--seed 2000`: a run's first steps to full precision (`oar_rl.study.fingerprint`)."""

from __future__ import annotations

import sys

from experiments.credit_screen.plan import CREDIT_SCREEN
from oar_rl.study.fingerprint import main as fingerprint_main
from oar_rl.study.screen import main as screen_main

PROG = "python -m experiments.credit_screen"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fingerprint"]:
        return fingerprint_main(argv[1:], plan=CREDIT_SCREEN, prog=f"{PROG} fingerprint")
    return screen_main(argv, plan=CREDIT_SCREEN, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
