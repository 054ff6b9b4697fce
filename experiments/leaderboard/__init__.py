"""The leaderboard: docs/results/leaderboard.md, one row per credit rule, generated from the committed run
files and records under results/ (README.md). The code: `leaderboard.py`, the page and its command line;
`regimes.py`, the regimes it reads and their run files; `sources.py`, a user's study added with
`--source`."""
