"""The leaderboard: docs/results/leaderboard.md, one row per credit rule, generated from the committed run
files and records under results/ (README.md; the code: `leaderboard.py`)."""
