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
)
"""Every arm is paired by seed with plain GRPO at the same step size; costs (GRPO = 1) break ties."""

LONG_CONTRASTS: tuple[tuple[str, str, str], ...] = (
    ("oar-g", "position", "is OAR-G more than 'weight later tokens'?"),
    ("first-error", "oar-g", "blame the first error vs OAR-G"),
    ("oar-p-span", "oar-g", "span-level masking vs OAR-G"),
    ("entropy-80-20", "entropy", "80/20 (top-20% entropy tokens only) vs entropy shaping"),
    ("position", "random", "position vs random weights"),
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
)

PLAN = CREDIT_LONG
"""What `python -m oar_rl.study.screen --plan experiments/credit_long/plan.py` runs."""
