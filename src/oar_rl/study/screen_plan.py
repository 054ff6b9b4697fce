"""A pre-registered screen's plan, as types: :class:`Arm` (one screened configuration) and
:class:`ScreenPlan` (the task, arms, seeds, step size and evaluation), :func:`load_plan`, which finds a
plan named on the command line, and what a plan's runs share (:func:`settings`, :func:`protocol`,
:func:`run_inputs`: the screen's runs and their fingerprints both start there). `oar_rl.study.screen`
runs any plan; the project's own plans live beside their results (`experiments/credit_screen/plan.py`,
`experiments/credit_long/plan.py`)."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from oar_rl.study.config import PRESETS, Variant


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
    numerics: str | None = None
    """The CPU numerics profile its runs train under (`oar_rl.numerics`, e.g. "portable-x86": the same
    bits on every x86-64 CPU), part of the protocol when set; None (native) leaves the protocol as it
    was before issue 49, so the committed plans keep their hashes."""

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ValueError(
            f"no arm {name!r} in the plan {self.name!r}; arms: {', '.join(a.name for a in self.arms)}"
        )


def settings(kind: str, plan: ScreenPlan):
    """The v2 study's full recipe at the plan's learning rate, scored on the split of `kind`."""
    curve = plan.confirm_curve if kind == "confirm" or plan.screen_curve else (None, None)
    return replace(
        PRESETS["full"],
        task=plan.task,
        learning_rate=plan.learning_rate,
        lr_source=plan.lr_source,
        test_problems=plan.eval[kind][1],
        eval_samples=4,
        curve_problems=curve[0],
        curve_samples=curve[1],
        recall_trajectories=0,
    )


def protocol(kind: str, plan: ScreenPlan) -> dict[str, Any]:
    """What every run of the screen (kind "screen") or the confirmation ("confirm") shares."""
    d = settings(kind, plan).protocol()
    # the first screen (format 1) has scored the reasoning only (the default) since its first run, and its
    # files record no scored_tokens key; the oar-g[before-answer] arm names its own in its overrides
    for key in plan.drop_from_protocol:
        d.pop(key)
    if plan.screen_format >= 2:  # since the long regime: the warm start's recipe is part of the protocol
        from oar_rl.shipped import TASK_RECIPES

        d["warm_start_recipe"] = TASK_RECIPES[plan.task].hash()
    if plan.numerics is not None:  # since issue 49, a plan may pin its CPU kernels (absent: native)
        from oar_rl.numerics import record

        d["cpu_numerics"] = record(plan.numerics)
    return {**d, "split": plan.eval[kind][0], "screen_format": plan.screen_format}


def run_inputs(kind: str, plan: ScreenPlan, cache_dir: str | None = None):
    """What every run of `kind` ("screen" or "confirm") trains from: (task, settings with the task's
    completion length and probe, warm start, training prompts)."""
    from oar_rl.tasks import get_task

    task = get_task(plan.task)
    s = replace(settings(kind, plan), max_completion_length=task.max_completion_length, probe=task.probe)
    return task, s, task.load_warm_start("default", cache_dir), task.prompts("train", s.n_train_prompts)


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
