"""The pretrained regime's pre-registered layouts (`results/pretrained-regime/PREREGISTRATION.md`): where
each plan's runs live, how many steps each arm trains, which seeds decide. Read by its answers
(`answers.py`) and by the leaderboard's regime (`experiments/leaderboard/regimes.py`)."""

from __future__ import annotations

from dataclasses import dataclass

STAGE2 = ("entropy", "lowest-prob")


@dataclass(frozen=True)
class Plan:
    """One pre-registered layout: where its runs live, how many steps each arm trains, which seeds decide."""

    name: str
    confirm: str  # folder under --out of grpo, oar-g (and stage 2), at `steps`
    steps: int
    compute_steps: int  # GRPO given OAR-G's compute, in the folder `grpo-steps{compute_steps}`
    seeds: tuple[int, ...]
    seed0_reference: str  # GRPO's bar test run under the same protocol, seed 0 (under --out)
    answers: str  # stem of the answers files under --out
    stage2: bool  # whether the plan runs entropy and lowest-prob beside grpo

    @property
    def compute_arm(self) -> str:
        return f"grpo-steps{self.compute_steps}"

    def contrasts(self) -> tuple[tuple[str, str, str, str], ...]:
        stage2 = tuple(("S", arm, "grpo", "stage 2") for arm in STAGE2) if self.stage2 else ()
        return (
            ("P1", "oar-g", "grpo", "the paper's claim"),
            ("P2", "oar-g", self.compute_arm, "at equal compute"),
            *stage2,
        )


PLANS = {
    "steps20": Plan(
        "steps20", "confirm", 20, 26, tuple(range(10)), "rates/runs/grpo.seed0.json", "answers", True
    ),
    "steps30": Plan(
        "steps30", "confirm30", 30, 39, tuple(range(6)), "steps30/runs/grpo.seed0.json", "answers30", False
    ),
}
