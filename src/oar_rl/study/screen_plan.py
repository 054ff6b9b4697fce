"""A pre-registered screen's plan, as types: :class:`Arm` (one screened configuration) and
:class:`ScreenPlan` (the task, arms, seeds, step size and evaluation), and :func:`load_plan`, which finds a
plan named on the command line. `oar_rl.study.screen` runs any plan; the project's own plans live beside
their results (`experiments/credit_screen/plan.py`, `experiments/credit_long/plan.py`)."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oar_rl.study.config import Variant


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
    screen_curve: bool = False
    """Screen runs are scored as confirmation runs are (a curve on `confirm_curve`'s sample, greedy
    accuracy, per-problem counts), on the screen's split; False: the final sampled accuracy only."""
    drop_from_protocol: tuple[str, ...] = ()
    """Settings left out of the recorded protocol (the first screen's files predate `scored_tokens`)."""

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ValueError(
            f"no arm {name!r} in the plan {self.name!r}; arms: {', '.join(a.name for a in self.arms)}"
        )


PLAN_FORMS = "`module:ATTR` (e.g. experiments.credit_long.plan:CREDIT_LONG) or a .py file that defines PLAN"


def load_plan(spec: str) -> ScreenPlan:
    """The plan `spec` names: `module:ATTR` (an importable module and its ScreenPlan attribute) or the
    path of a .py file that defines `PLAN`. ValueError names the bad value and the valid forms."""
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.is_file():
            raise ValueError(f"--plan {spec!r}: no such file; give {PLAN_FORMS}")
        loader_spec = importlib.util.spec_from_file_location(f"_oar_rl_plan_{path.stem}", path)
        module = importlib.util.module_from_spec(loader_spec)
        loader_spec.loader.exec_module(module)
        attr, where = "PLAN", str(path)
    elif ":" in spec:
        name, attr = spec.rsplit(":", 1)
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"--plan {spec!r}: cannot import {name!r} ({e}); give {PLAN_FORMS}") from e
        where = name
    else:
        raise ValueError(f"--plan {spec!r} is neither module:ATTR nor a .py file; give {PLAN_FORMS}")
    plan = getattr(module, attr, None)
    if not isinstance(plan, ScreenPlan):
        found = "nothing" if plan is None else type(plan).__name__
        raise ValueError(
            f"--plan {spec!r}: {where} has {found} as {attr}, not a ScreenPlan; give {PLAN_FORMS}"
        )
    return plan
