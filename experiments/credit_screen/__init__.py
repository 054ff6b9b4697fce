"""Issue 26's pre-registered credit-rule screen on the short regime (README.md; the plan: `plan.py`)."""
