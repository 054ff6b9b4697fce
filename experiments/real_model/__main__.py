"""`python -m experiments.real_model [--design reuse] [--n 64] [--out results/real-model] ...`: the
real-model recall experiment (`recall.py`)."""

from __future__ import annotations

from experiments.real_model.recall import main

if __name__ == "__main__":
    raise SystemExit(main())
