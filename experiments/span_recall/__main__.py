"""`python -m experiments.span_recall ...`: runs `span_recall.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.span_recall.span_recall import main

if __name__ == "__main__":
    raise SystemExit(main())
