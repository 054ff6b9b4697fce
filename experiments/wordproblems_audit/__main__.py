"""`python -m experiments.wordproblems_audit ...`: runs `report.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.wordproblems_audit.report import main

if __name__ == "__main__":
    raise SystemExit(main())
