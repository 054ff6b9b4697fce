"""Is first-error's win credit assignment, or a steadier step? (issue 48), as pre-registered in
`results/credit-why/PREREGISTRATION.md` (committed before the first run file).

Two parts, on the long-chain regime (`wordproblems-long`) with the screen engine's recipe (30 generation
batches of 16 prompts × 8, τ 0.4, β 2, AS-Mean, scored reasoning tokens):

1. **The rate grid** (`RATES`, kind "screen", **validation** split, 300 problems × 4 samples at T = 1 and
   greedy): GRPO and first-error at 5e-5, 1e-4 and 2e-4 on seeds 4000-4002. The rate of each is chosen
   by :func:`experiments.credit_why.rates.choose` (the pre-registered rule).
2. **The confirmation** (:func:`confirm_plan`, kind "confirm", **test** split, 500 problems × 4 samples
   and greedy, fresh seeds 400-409): GRPO and GRPO given first-error's generated tokens (more prompts
   per step) at GRPO's chosen rate, entropy shaping at GRPO's rate, and first-error, lowest-prob,
   random-departure and save-prefix at first-error's chosen rate; every arm paired by seed.
3. **Amendment 3** (:data:`AMENDMENT3_ARMS`, the same confirmation's seeds and samples, issue 56): each
   rule at the other's rate (first-error at GRPO's 2e-4, GRPO at first-error's 1e-4: rule × rate, 2 × 2,
   with the runs already in), GRPO on first-error's measured training seconds (:data:`SECONDS_PROMPTS`
   prompts per step) and GRPO on `grpo-compute`'s generated tokens through more completions per prompt
   instead of more prompts (16 × :data:`SAMPLES_COMPLETIONS`); derived from the committed run files by
   `experiments/credit_why/amend3.py` (`python -m experiments.credit_why amend3`).

    python -m experiments.credit_why warm-start   # the warm start on the exact evaluation samples
    python -m experiments.credit_why run          # the grid (two processes at once, resumable)
    python -m experiments.credit_why rates        # the chosen rates and the compute multiplier
    python -m experiments.credit_why confirm      # the confirmation (two processes, resumable)
    python -m experiments.credit_why confirm --dry-run   # its runs, done or not, and their settings
"""

from __future__ import annotations

from dataclasses import replace

from oar_rl.study.screen_plan import Arm, ScreenPlan

GRID: tuple[float, ...] = (5e-5, 1e-4, 2e-4)
"""The learning rates of the grid (4e-4, the earlier confirmation's, degrades GRPO's greedy accuracy by
15 points on this regime: issue 48)."""
GRID_RULES: tuple[str, ...] = ("grpo", "first-error")


def _lr(rate: float) -> str:
    return f"{rate:.0e}".replace("e-0", "e-")


def grid_arms() -> tuple[Arm, ...]:
    """GRPO and first-error at every rate of the grid, each first-error arm paired with GRPO at its rate."""
    arms: list[Arm] = []
    for rate in GRID:
        base = f"grpo[lr={_lr(rate)}]"
        arms.append(Arm(base, "grpo", (("learning_rate", rate),), baseline=None))
        arms.append(
            Arm(f"first-error[lr={_lr(rate)}]", "first-error", (("learning_rate", rate),), base, 1, 2.5)
        )
    return tuple(arms)


RATES = ScreenPlan(
    name="credit-why",
    task="wordproblems-long",
    arms=grid_arms(),
    screen_seeds=(4000, 4001, 4002),
    confirm_seeds=tuple(range(400, 410)),
    learning_rate=GRID[1],
    lr_source="the grid of issue 48 (5e-5, 1e-4, 2e-4; each arm names its rate), chosen on validation by "
    "experiments/credit_why/rates.py's pre-registered rule",
    eval={"screen": ("validation", 300), "confirm": ("test", 500)},
    confirm_curve=(150, 2),
    screen_format=2,
    screen_curve=True,  # greedy accuracy and a curve on validation too: the rate rule reads both
    decision_stages=(1,),
    k_winners=0,  # no winners: the grid chooses rates (rates.py), the arms of the confirmation are fixed
)

CONFIRM_ARMS: tuple[tuple[str, str, str], ...] = (
    # (arm, credit rule, whose chosen rate it trains at)
    ("grpo", "grpo", "grpo"),
    ("grpo-compute", "grpo", "grpo"),
    ("entropy", "entropy", "grpo"),
    ("first-error", "first-error", "first-error"),
    ("lowest-prob", "lowest-prob", "first-error"),
    ("random-departure", "random-departure", "first-error"),
    ("save-prefix", "save-prefix", "first-error"),
)
"""The confirmation's arms, fixed by the question (issue 48), and whose rate each takes."""


SECONDS_PROMPTS = 21
"""Amendment 3: `grpo-seconds`' prompts per step (8 completions each), at which GRPO's training seconds
are first-error's, on the line through GRPO's two measured arms (`amend3.seconds_matched`)."""
SAMPLES_COMPLETIONS = 15
"""Amendment 3: `grpo-samples`' completions per prompt (16 prompts per step), which give `grpo-compute`'s
generated tokens per step (`amend3.samples_matched`)."""
AMENDMENT3_STAGE = 3
"""The stage of Amendment 3's arms (the confirmation's own are stage 1)."""


def amendment3_arms(grpo_rate: float, first_error_rate: float) -> tuple[Arm, ...]:
    """Amendment 3's arms (issue 56), each paired with `grpo` by seed: first-error at GRPO's chosen rate,
    GRPO at first-error's (rule × rate), GRPO on first-error's seconds, GRPO with more completions per
    prompt instead of more prompts; the last two at GRPO's chosen rate, as `grpo-compute`."""
    return (
        Arm(f"first-error[lr={_lr(grpo_rate)}]", "first-error", (("learning_rate", grpo_rate),)),
        Arm(f"grpo[lr={_lr(first_error_rate)}]", "grpo", (("learning_rate", first_error_rate),)),
        Arm("grpo-seconds", "grpo", (("learning_rate", grpo_rate), ("prompts_per_step", SECONDS_PROMPTS))),
        Arm("grpo-samples", "grpo", (("learning_rate", grpo_rate), ("num_generations", SAMPLES_COMPLETIONS))),
    )


def amendment3_names(grpo_rate: float, first_error_rate: float) -> tuple[str, ...]:
    return tuple(a.name for a in amendment3_arms(grpo_rate, first_error_rate))


def confirm_plan(
    grpo_rate: float, first_error_rate: float, prompts_per_step: int, amendment3: bool = True
) -> ScreenPlan:
    """The confirmation at the chosen rates; `prompts_per_step`: the GRPO-at-first-error's-compute arm's
    prompts per step (rates.py's `multiplier`); `amendment3`: with Amendment 3's arms (stage 3). Every
    arm is paired with `grpo`. The arms are not part of the protocol: adding them changes no hash."""
    rate = {"grpo": grpo_rate, "first-error": first_error_rate}
    arms = []
    for name, rule, whose in CONFIRM_ARMS:
        over: tuple[tuple[str, object], ...] = (("learning_rate", rate[whose]),)
        if name == "grpo-compute":
            over += (("prompts_per_step", prompts_per_step),)
        arms.append(Arm(name, rule, over, baseline=None if name == "grpo" else "grpo", stage=1))
    if amendment3:
        arms += [replace(a, stage=AMENDMENT3_STAGE) for a in amendment3_arms(grpo_rate, first_error_rate)]
    return ScreenPlan(
        name="credit-why",
        task=RATES.task,
        arms=tuple(arms),
        screen_seeds=RATES.screen_seeds,
        confirm_seeds=RATES.confirm_seeds,
        learning_rate=grpo_rate,
        lr_source=RATES.lr_source,
        eval=RATES.eval,
        confirm_curve=RATES.confirm_curve,
        screen_format=RATES.screen_format,
        screen_curve=True,
        contrasts=(
            ("first-error", "grpo-compute", "first-error vs GRPO at its compute"),
            ("first-error", "random-departure", "location: the located error vs a random departure"),
            ("first-error", "lowest-prob", "the located error vs the least likely token"),
            ("save-prefix", "first-error", "VPPO's saved prefix vs first-error's reshaping"),
            ("first-error", "entropy", "first-error vs entropy shaping"),
        ),
        decision_stages=(1,),
        k_winners=0,
    )


PLAN = RATES
"""What `python -m oar_rl.study.screen --plan experiments/credit_why/plan.py` runs (the grid)."""
