"""`python -m experiments.hybrid_recall ...`: runs `hybrid_recall.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.hybrid_recall.hybrid_recall import main

if __name__ == "__main__":
    raise SystemExit(main())
