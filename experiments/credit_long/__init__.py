"""Issue 33's pre-registered credit-rule screen on the long-chain regime (README.md; the plan: `plan.py`)."""
