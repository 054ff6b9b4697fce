"""`python -m experiments.first_error_reuse ...`: runs `first_error_reuse.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.first_error_reuse.first_error_reuse import main

if __name__ == "__main__":
    raise SystemExit(main())
