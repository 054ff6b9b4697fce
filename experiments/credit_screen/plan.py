"""The pre-registered screens' plans (`oar_rl.study.screen` runs them): arms, seeds, step size and
evaluation. `CREDIT_SCREEN` is issue 26's screen on the short regime (results/credit-screen,
PREREGISTRATION.md there); `CREDIT_LONG` issue 33's on the long-chain regime (results/credit-long)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oar_rl.study.config import Variant

SCREEN_SEEDS: tuple[int, ...] = (2000, 2001, 2002, 2003, 2004)
CONFIRM_SEEDS: tuple[int, ...] = tuple(range(100, 110))
LEARNING_RATE = 4e-4  # every method's choice in the v2 study's sweep (results/study-wordproblems-v2)
VALIDATION_PROBLEMS = 300
SCREEN_FORMAT = 1


@dataclass(frozen=True)
class Arm:
    """One screened configuration: a method, its OARConfig overrides and the GRPO arm it is paired with."""

    name: str
    method: str
    overrides: tuple[tuple[str, Any], ...] = ()
    baseline: str | None = "grpo"
    stage: int = 1
    cost: float = 1.0
    """Relative CPU cost (GRPO = 1), from the v2 study's per-run seconds; breaks ties between winners."""

    def variant(self) -> Variant:
        return Variant(self.name, self.method, self.overrides)


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
)
"""Which hypothesis each pair of arms speaks to (issue 26). Descriptive, not part of the pre-registered
decision: per seed, (arm − its baseline) − (other − its baseline), so arms trained at different step
sizes are compared by their gaps to GRPO at their own step size."""


@dataclass(frozen=True)
class ScreenPlan:
    """One pre-registered screen and its confirmation: the task, the arms, the seeds, the step size and
    the evaluation. Everything here is fixed by the plan's PREREGISTRATION.md before its first run."""

    name: str
    task: str
    arms: tuple[Arm, ...]
    screen_seeds: tuple[int, ...]
    confirm_seeds: tuple[int, ...]
    learning_rate: float
    lr_source: str
    eval: dict[str, tuple[str, int]]
    """Per kind of run ("screen", "confirm"): (split it is scored on, problems); 4 samples each at T = 1."""
    confirm_curve: tuple[int, int]
    screen_format: int
    contrasts: tuple[tuple[str, str, str], ...] = ()
    decision_stages: tuple[int, ...] = (1, 2)
    """The stages whose arms compete for the winners (a later stage is an addendum, reported only)."""
    confirm_also: tuple[str, ...] = ()
    """Arms confirmed whatever the screen says (with their baselines)."""
    k_winners: int = 2
    drop_from_protocol: tuple[str, ...] = ()
    """Settings left out of the recorded protocol (the first screen's files predate `scored_tokens`)."""

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ValueError(
            f"no arm {name!r} in the plan {self.name!r}; arms: {', '.join(a.name for a in self.arms)}"
        )


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
"""Issue 26's screen on the short regime (results/credit-screen; its stage 3 is issue 33's addendum)."""

# ----------------------------------------------------------------------------------------------------
# The long-chain regime's screen (issue 33), pre-registered in results/credit-long/PREREGISTRATION.md.
#
# The long-chain regime's credit screen and confirmation (issue 33), as pre-registered in
# `results/credit-long/PREREGISTRATION.md` (committed before the first run file).
#
# The same engine and recipe as the short regime's screen (`oar_rl.study.screen`): 30 generation batches
# of 16 prompts × 8, τ 0.4, β 2, AS-Mean, learning rate 4e-4 for every arm (the short screen's, so the two
# regimes differ in the task only), scored on the **validation** split (300 problems × 4 samples at
# T = 1). The task is `wordproblems-long` (6-8 events, ~185 reasoning tokens, trap events the warm start
# misreads). Exact OAR-P is not screened: its cost grows with the square of the reasoning length (Σ suffix
# lengths ≈ L²/2 token-forwards per row), about 20× a GRPO run here, 13 CPU-hours for 5 seeds;
# span-level OAR-P is its cheap stand-in.
#
#     python -m oar_rl.study.screen run --plan credit-long          # two processes at once, resumable
#     python -m oar_rl.study.screen report --plan credit-long
#     python -m oar_rl.study.screen confirm --plan credit-long      # the winners, oar-g and position
# ----------------------------------------------------------------------------------------------------

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


PLANS: dict[str, ScreenPlan] = {CREDIT_SCREEN.name: CREDIT_SCREEN, CREDIT_LONG.name: CREDIT_LONG}
"""The screens `python -m oar_rl.study.screen --plan` knows."""


def get_plan(name: str) -> ScreenPlan:
    if name not in PLANS:
        raise ValueError(f"unknown screen plan {name!r}; valid: {', '.join(sorted(PLANS))}")
    return PLANS[name]
