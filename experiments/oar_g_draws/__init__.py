"""How many OAR-G noise draws? Stability, agreement with OAR-P and cost for K = 1-8 (README.md)."""
