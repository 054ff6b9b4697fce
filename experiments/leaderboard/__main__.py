"""`python -m experiments.leaderboard [--check]`: rewrite (or check) docs/results/leaderboard.md."""

from __future__ import annotations

from experiments.leaderboard.leaderboard import main

if __name__ == "__main__":
    raise SystemExit(main())
