"""`python -m experiments.oar_g_draws ...`: runs `oar_g_draws.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.oar_g_draws.oar_g_draws import main

if __name__ == "__main__":
    raise SystemExit(main())
