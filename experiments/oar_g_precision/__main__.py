"""`python -m experiments.oar_g_precision ...`: runs `oar_g_precision.py` (`--help` for its options)."""

from __future__ import annotations

from experiments.oar_g_precision.oar_g_precision import main

if __name__ == "__main__":
    raise SystemExit(main())
