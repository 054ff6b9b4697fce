"""The long-chain regime's credit screen and confirmation (issue 33), as pre-registered in
`results/credit-long/PREREGISTRATION.md` (committed before the first run file).

The same engine and recipe as the short regime's screen (`oar_rl.study.screen`): 30 generation batches
of 16 prompts × 8, τ 0.4, β 2, AS-Mean, learning rate 4e-4 for every arm (the short screen's, so the two
regimes differ in the task only), scored on the **validation** split (300 problems × 4 samples at
T = 1). The task is `wordproblems-long` (6-8 events, ~185 reasoning tokens, trap events the warm start
misreads). Exact OAR-P is not screened: its cost grows with the square of the reasoning length (Σ suffix
lengths ≈ L²/2 token-forwards per row), about 20× a GRPO run here, 13 CPU-hours for 5 seeds;
span-level OAR-P is its cheap stand-in.

    python -m experiments.credit_long run          # two processes at once, resumable
    python -m experiments.credit_long report
    python -m experiments.credit_long confirm      # the winners, oar-g and position
"""

from __future__ import annotations

from oar_rl.study.screen_plan import Arm, ScreenPlan

LONG_ARMS: tuple[Arm, ...] = (
    Arm("grpo", "grpo", baseline=None),
    Arm("oar-g", "oar-g", cost=1.1),
    Arm("first-error", "first-error", cost=3.0),
    Arm("position", "position", cost=1.0),
    Arm("oar-p-span", "oar-p-span", cost=1.3),
    Arm("entropy-80-20", "entropy-80-20", cost=1.0),
    Arm("entropy", "entropy", cost=1.05),
    Arm("random", "random", cost=1.0),
    # stage 2 (the exploratory addendum in PREREGISTRATION.md, outside the decision): half the step size
    Arm("grpo[lr=2e-4]", "grpo", (("learning_rate", 2e-4),), baseline=None, stage=2),
    Arm("oar-g[lr=2e-4]", "oar-g", (("learning_rate", 2e-4),), "grpo[lr=2e-4]", 2, 1.1),
    Arm("position[lr=2e-4]", "position", (("learning_rate", 2e-4),), "grpo[lr=2e-4]", 2, 1.0),
)
"""Every arm is paired by seed with plain GRPO at the same step size; costs (GRPO = 1) break ties."""

RULE_CONTRASTS: tuple[tuple[str, str, str], ...] = (
    ("oar-g", "position", "is OAR-G more than 'weight later tokens'?"),
    ("oar-p-span", "oar-g", "span-level masking vs OAR-G"),
    ("entropy-80-20", "entropy", "80/20 (top-20% entropy tokens only) vs entropy shaping"),
    ("position", "random", "position vs random weights"),
)
"""The contrasts between issue 33's rules, made in both regimes (the short screen's plan takes them)."""

LONG_CONTRASTS: tuple[tuple[str, str, str], ...] = (
    RULE_CONTRASTS[0],
    ("first-error", "oar-g", "blame the first error vs OAR-G"),
    *RULE_CONTRASTS[1:],
    ("oar-g[lr=2e-4]", "oar-g", "OAR-G's gap to GRPO at 2e-4 vs at 4e-4"),
    ("oar-g[lr=2e-4]", "position[lr=2e-4]", "OAR-G vs position at 2e-4"),
)

CREDIT_LONG = ScreenPlan(
    name="credit-long",
    task="wordproblems-long",
    arms=LONG_ARMS,
    screen_seeds=(3000, 3001, 3002, 3003, 3004),
    confirm_seeds=tuple(range(300, 310)),
    learning_rate=4e-4,
    lr_source="the short regime's screen rate (4e-4, the v2 sweep's choice), kept so the regimes differ "
    "in the task only",
    eval={"screen": ("validation", 300), "confirm": ("test", 500)},
    confirm_curve=(150, 2),
    screen_format=2,
    contrasts=LONG_CONTRASTS,
    confirm_also=("oar-g", "position"),
    decision_stages=(1,),  # stage 2 is the exploratory addendum, reported only
)

PLAN = CREDIT_LONG
"""What `python -m oar_rl.study.screen --plan experiments/credit_long/plan.py` runs."""
