"""Which CPU settings change a run's first steps, and what they cost (issue 49; README.md, `sweep.py`)."""
