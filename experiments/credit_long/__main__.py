"""`python -m experiments.credit_long {run,report,confirm,all,pilot} [--out results/credit-long] ...`:
`oar_rl.study.screen` on this experiment's plan (`plan.py`); `... fingerprint --arm grpo --seed 300`: a
run's first steps to full precision (`oar_rl.study.fingerprint`)."""

from __future__ import annotations

import sys

from experiments.credit_long.plan import CREDIT_LONG
from oar_rl.study.fingerprint import main as fingerprint_main
from oar_rl.study.screen import main as screen_main

PROG = "python -m experiments.credit_long"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fingerprint"]:
        return fingerprint_main(argv[1:], plan=CREDIT_LONG, prog=f"{PROG} fingerprint")
    return screen_main(argv, plan=CREDIT_LONG, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
