"""Where the pretrained regime's confirmation stands (`PREREGISTRATION.md`, Amendment 2), without reading
a single accuracy: which run files are in, how far each unfinished run's newest checkpoint got, and the
machine-hours left in `confirm30.sh`'s order (`--fit`: Amendment 4's, the confirmation folder's GRPO
runs first).

    python -m experiments.pretrained_regime.progress --out results/pretrained-regime [--fit]

A run's pace is its own checkpoint's (training seconds over its steps, held-out curve included) when it
has one; otherwise the amendment's figures for the AMD EPYC (`--grpo-step`, `--oar-g-ratio`, `--eval`),
said as such. Estimates, not measurements: the runs' own files hold those.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.pretrained_regime.plan import PLANS, Plan
from oar_rl.study.runner import RunStore


@dataclass(frozen=True)
class Run:
    folder: str
    variant: str
    seed: int
    steps: int


def queue(plan: Plan, fit: bool = False) -> list[Run]:
    """Every run of the plan in `confirm30.sh`'s order: seed by seed, the confirmation folder's arms
    (grpo, then oar-g), then the compute arm. `fit` (`confirm30.sh --fit`, Amendment 4): the
    confirmation folder's GRPO runs of every seed first, then the rest in that order."""
    out = []
    for seed in plan.seeds:
        out += [Run(plan.confirm, v, seed, plan.steps) for v in ("grpo", "oar-g")]
        out.append(Run(plan.compute_arm, "grpo", seed, plan.compute_steps))
    if fit:
        first = [r for r in out if r.folder == plan.confirm and r.variant == "grpo"]
        out = first + [r for r in out if r not in first]
    return out


def checkpoint(out: Path, run: Run) -> tuple[int, float] | None:
    """(step, training seconds) of the run's newest complete checkpoint, where the study keeps it
    (`<folder>/.checkpoints/runs/<run>`, `oar_rl.study.checkpoints.latest_checkpoint`), or None."""
    from oar_rl.study.checkpoints import latest_checkpoint, run_folder

    found = latest_checkpoint(run_folder(out / run.folder / "runs", RunStore.filename(run.variant, run.seed)))
    return None if found is None else (int(found[1]["step"]), float(found[1]["seconds"]))


def progress(
    out: Path, plan: Plan, grpo_step: float, oar_g_ratio: float, eval_s: float, fit: bool = False
) -> dict:
    rows, left = [], 0.0
    for run in queue(plan, fit):
        if (out / run.folder / "runs" / RunStore.filename(run.variant, run.seed)).is_file():
            rows.append((run, "in", None))
            continue
        step = grpo_step * (oar_g_ratio if run.variant == "oar-g" else 1.0)
        found = checkpoint(out, run)
        if found is not None and found[0] > 0:
            done, seconds = found
            pace = seconds / done
            what = f"checkpoint at step {done} of {run.steps} ({seconds:,.0f} s, {pace:,.0f} s a step)"
            rows.append((run, what, pace))
            left += (run.steps - done) * pace + eval_s
        else:
            rows.append((run, "no checkpoint", None))
            left += run.steps * step + eval_s
    return {"rows": rows, "hours_left": left / 3600}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.pretrained_regime.progress", allow_abbrev=False)
    p.add_argument("--out", default="results/pretrained-regime", help="the regime's results folder")
    p.add_argument("--plan", choices=sorted(PLANS), default="steps30")
    p.add_argument(
        "--grpo-step", type=float, default=282.0,
        help="seconds of a GRPO step where a run has no checkpoint (the AMD EPYC's, 2 threads)",
    )  # fmt: skip
    p.add_argument("--oar-g-ratio", type=float, default=1.30, help="OAR-G's step as a multiple of GRPO's")
    p.add_argument("--eval", type=float, default=1110.0, help="seconds of a run's final evaluation")
    p.add_argument("--fit", action="store_true", help="confirm30.sh --fit's order (Amendment 4)")
    a = p.parse_args(argv)
    for name in ("grpo_step", "oar_g_ratio", "eval"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} {getattr(a, name)}: must be a positive number")
    out, plan = Path(a.out), PLANS[a.plan]
    if not (out / plan.confirm).is_dir():
        p.error(f"--out {a.out!r}: no {plan.confirm}/ there (the regime's results folder holds it)")
    res = progress(out, plan, a.grpo_step, a.oar_g_ratio, a.eval, a.fit)
    done = sum(1 for _, what, _ in res["rows"] if what == "in")
    waiting = [run for run, what, _ in res["rows"] if what == "no checkpoint"]
    for run, what, _ in res["rows"]:
        if what not in ("in", "no checkpoint"):
            print(f"  {run.folder}/{run.variant} seed {run.seed}: {what}")
    if waiting:
        first = waiting[0]
        print(
            f"  {len(waiting)} runs without a checkpoint, the first "
            f"{first.folder}/{first.variant} seed {first.seed}"
        )
    print(f"{done} of {len(res['rows'])} run files in; about {res['hours_left']:.1f} machine-hours left "
          f"(unstarted runs at {a.grpo_step:.0f} s a GRPO step, OAR-G {a.oar_g_ratio:.2f}x, "
          f"{a.eval:.0f} s of evaluation a run)")  # fmt: skip
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
