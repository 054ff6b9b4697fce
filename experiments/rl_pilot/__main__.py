"""`python -m experiments.rl_pilot ...`: runs `rl_pilot.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.rl_pilot.rl_pilot import main

if __name__ == "__main__":
    raise SystemExit(main())
