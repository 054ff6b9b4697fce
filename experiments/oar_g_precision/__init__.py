"""Where OAR-G loses precision in bf16, against float64 (README.md; the code: `oar_g_precision.py`)."""
