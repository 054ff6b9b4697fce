"""`python -m experiments.sharpness ...`: runs `sharpness.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.sharpness.sharpness import main

if __name__ == "__main__":
    raise SystemExit(main())
