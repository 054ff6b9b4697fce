"""How sharp is a warm start along its own policy gradient? (README.md; the code: `sharpness.py`)."""
