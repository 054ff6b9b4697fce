"""Issue 26's pre-registered credit-rule screen on the short regime (results/credit-screen,
PREREGISTRATION.md there): its arms, seeds, step size and evaluation. `oar_rl.study.screen` runs it
(`python -m experiments.credit_screen`); its stages 3 and 4 are issue 33's addenda."""

from __future__ import annotations

from experiments.credit_long.plan import RULE_CONTRASTS
from oar_rl.study.screen_plan import Arm, ScreenPlan

SCREEN_SEEDS: tuple[int, ...] = (2000, 2001, 2002, 2003, 2004)
CONFIRM_SEEDS: tuple[int, ...] = tuple(range(100, 110))
LEARNING_RATE = 4e-4  # every method's choice in the v2 study's sweep (results/study-wordproblems-v2)
VALIDATION_PROBLEMS = 300
SCREEN_FORMAT = 1

_TR = (("steps_per_generation", 2), ("learning_rate", 2e-4))  # trust region: 2 clipped steps per batch

ARMS: tuple[Arm, ...] = (
    # stage 1: the scored set, which rows, the floor, the new rule, OAR-P
    Arm("grpo", "grpo", baseline=None),
    Arm("oar-g[before-answer]", "oar-g", (("scored_tokens", "before-answer"),), cost=1.1),
    Arm("oar-g", "oar-g", cost=1.1),
    Arm("oar-g[positive]", "oar-g", (("reshape_rows", "positive"),), cost=1.1),
    Arm("oar-g[negative]", "oar-g", (("reshape_rows", "negative"),), cost=1.1),
    Arm("oar-g[floor=0.1]", "oar-g", (("floor", 0.1),), cost=1.1),
    Arm("first-error", "first-error", cost=2.5),
    Arm("oar-p", "oar-p", cost=4.0),
    # stage 2: step size (finer learning-rate grid, a trust region) and OAR-G's noise draws
    Arm("grpo[lr=2e-4]", "grpo", (("learning_rate", 2e-4),), baseline=None, stage=2),
    Arm("grpo[lr=2.8e-4]", "grpo", (("learning_rate", 2.83e-4),), baseline=None, stage=2),
    Arm("oar-g[lr=2e-4]", "oar-g", (("learning_rate", 2e-4),), "grpo[lr=2e-4]", 2, 1.1),
    Arm("oar-g[lr=2.8e-4]", "oar-g", (("learning_rate", 2.83e-4),), "grpo[lr=2.8e-4]", 2, 1.1),
    Arm("grpo[tr]", "grpo", _TR, baseline=None, stage=2),
    Arm("oar-g[tr]", "oar-g", _TR, "grpo[tr]", 2, 1.1),
    Arm("oar-g[draws=4]", "oar-g", (("oar_noise_draws", 4),), stage=2, cost=1.5),
    # stage 3 (issue 33's addendum, outside the decided winners' rule): the long regime's new rules
    Arm("position", "position", stage=3, cost=1.0),
    Arm("oar-p-span", "oar-p-span", stage=3, cost=1.3),
    Arm("entropy-80-20", "entropy-80-20", stage=3, cost=1.0),
    # stage 4 (addendum 2, issue 33's comparison of regimes): the two baselines of the long screen
    Arm("entropy", "entropy", stage=4, cost=1.05),
    Arm("random", "random", stage=4, cost=1.0),
)
ARM_BY_NAME = {a.name: a for a in ARMS}


EVAL: dict[str, tuple[str, int]] = {"screen": ("validation", VALIDATION_PROBLEMS), "confirm": ("test", 500)}
"""Per kind of run: (split it is scored on, problems); 4 samples each at T = 1."""


CONFIRM_CURVE = (150, 2)
"""The confirmation's accuracy curve every 5 steps: the first 150 test problems × 2 samples, as the v2
study's (its final accuracy is on all 500 × 4). Screen runs have no curve (final accuracy only)."""

CONTRASTS: tuple[tuple[str, str, str], ...] = (
    ("oar-g", "oar-g[before-answer]", "2: reasoning only vs the v2 scored set"),
    ("oar-g[positive]", "oar-g[negative]", "1: reshape correct rows only vs wrong rows only"),
    ("first-error", "oar-g", "1: blame the first error vs OAR-G"),
    ("oar-g[lr=2.8e-4]", "oar-g", "3: OAR-G's gap to GRPO at 2.8e-4 vs at 4e-4"),
    ("oar-g[lr=2e-4]", "oar-g", "3: OAR-G's gap to GRPO at 2e-4 vs at 4e-4"),
    ("oar-g[tr]", "oar-g", "3: OAR-G's gap to GRPO with a trust region vs without"),
    ("oar-g[draws=4]", "oar-g", "4: 4 noise draws vs 1"),
    ("oar-g[floor=0.1]", "oar-g", "5: floor 0.1 vs none"),
    ("oar-p", "oar-g", "OAR-P vs OAR-G"),
    # issue 33's, the long regime's plan's (stages 3-4 against stage 1; first-error vs OAR-G is above)
    *RULE_CONTRASTS,
)
"""Which hypothesis each pair of arms speaks to (issue 26). Descriptive, not part of the pre-registered
decision: per seed, (arm − its baseline) − (other − its baseline), so arms trained at different step
sizes are compared by their gaps to GRPO at their own step size."""


CREDIT_SCREEN = ScreenPlan(
    name="credit-screen",
    task="wordproblems",
    arms=ARMS,
    screen_seeds=SCREEN_SEEDS,
    confirm_seeds=CONFIRM_SEEDS,
    learning_rate=LEARNING_RATE,
    lr_source="the v2 study's sweep chose 4e-4 for every method (results/study-wordproblems-v2)",
    eval=EVAL,
    confirm_curve=CONFIRM_CURVE,
    screen_format=SCREEN_FORMAT,
    contrasts=CONTRASTS,
    drop_from_protocol=("scored_tokens",),
)
"""Issue 26's screen on the short regime (results/credit-screen; stages 3 and 4: issue 33's addenda)."""

PLAN = CREDIT_SCREEN
"""What `python -m oar_rl.study.screen --plan experiments/credit_screen/plan.py` runs."""
