"""`python -m experiments.cpu_numerics {sweep,time} ...` (README.md; the code: `sweep.py`)."""

from __future__ import annotations

from experiments.cpu_numerics.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
