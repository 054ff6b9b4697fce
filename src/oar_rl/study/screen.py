"""A pre-registered credit-rule screen and its confirmation, for any plan (:class:`ScreenPlan`).

- **Screen** (`python -m oar_rl.study.screen run --plan PLAN --out DIR`): every arm of the plan trains
  from the task's shipped warm start with the v2 study's recipe (30 generation batches of 16 prompts × 8,
  τ 0.4, β 2, AS-Mean) at the plan's learning rate unless the arm says otherwise, on the plan's screen
  seeds, and is scored on the plan's screen split (validation). Each arm is paired by seed with its GRPO
  baseline arm (the same learning rate and trust region).
- **Decision** (`... report`, which also tabulates the confirmation's runs so far): the `k_winners`
  non-GRPO arms of the decision stages with the highest mean paired difference to their baseline (ties:
  the cheaper) are the winners (:func:`winners`).
- **Confirmation** (`... confirm`): the winners, the plan's always-confirmed arms and their GRPO
  baselines on the plan's fresh confirmation seeds on the **test** split, paired by seed.
- **All of it** (`... all`): the screen, then the confirmation, then the later (exploratory) stages, in
  as many processes as the machine has room for; a process whose next runs are all another's trains a
  later stage's run meanwhile (:func:`run_all`).
- **Pilot** (`... pilot`): GRPO on one seed outside the plan's, and the warm start's accuracy, before
  the plan is pre-registered.

`PLAN` is `module:ATTR` or a .py file defining `PLAN` (:func:`oar_rl.study.screen_plan.load_plan`); the
project's own screens are `experiments/credit_screen` and `experiments/credit_long`, which call
:func:`main` with their plan (`python -m experiments.credit_long run`). Runs are resumable and several
processes may share an output directory (the study's claim files); each run file records the protocol,
and a changed protocol is refused. This module holds the arithmetic; training is the study's
(`oar_rl.study.runner.train_and_evaluate`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from oar_rl.io import write_text_atomic
from oar_rl.study import screen_plot
from oar_rl.study.screen_plan import Arm, ScreenPlan, load_plan, protocol, run_inputs, settings
from oar_rl.study.screen_report import (
    DIAGNOSTIC_LABELS,
    contrasts_markdown,
    diagnostics_markdown,
    markdown,
    progress_markdown,
)

__all__ = [
    "Arm", "ScreenPlan", "confirm_arms", "load_plan", "main", "protocol", "run_all", "run_inputs", "settings",
    "write_report",
]  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# training


def train_arms(
    out: Path,
    arms: list[Arm],
    seeds: tuple[int, ...],
    kind: str,
    cache_dir: str | None,
    plan: ScreenPlan,
    *,
    idle: Callable[[], bool] | None = None,
    wait: bool = True,
) -> None:
    """Train every (arm, seed) not stored under `out/<kind>/runs`, seed-major, sharing work with other
    processes on the same directory (`idle` and `wait`: :func:`oar_rl.study.claims.run_claimed`)."""
    from oar_rl.numerics import check
    from oar_rl.study.claims import run_claimed
    from oar_rl.study.runner import Progress, RunStore, train_and_evaluate

    check(plan.numerics)  # the plan's CPU kernels, or no run (the environment is read when torch loads)
    task, s, ws, train_rows = run_inputs(kind, plan, cache_dir)
    store = RunStore(out / kind / "runs", protocol(kind, plan))
    store.check_all()
    eval_rows = task.prompts(plan.eval[kind][0], s.test_problems)
    todo = [(a, seed) for seed in seeds for a in arms]
    progress = Progress(sum(s.steps * int(dict(a.overrides).get("steps_per_generation", 1)) for a, _ in todo))
    try:
        with tempfile.TemporaryDirectory(prefix="oar-rl-screen-") as work:

            def train(item: tuple[int, Arm, int]) -> dict[str, Any]:
                i, arm, seed = item
                progress.describe(f"[{i}/{len(todo)}] {arm.name} seed {seed}")
                rec = train_and_evaluate(
                    task, ws, s, arm.variant(), seed, train_rows, eval_rows, Path(work) / f"run{i}",
                    progress, learning_rate=s.learning_rate, curve=kind == "confirm" or plan.screen_curve,
                )  # fmt: skip
                progress.write(
                    f"[{i}/{len(todo)}] {arm.name} seed {seed}: {kind} accuracy "
                    f"{rec['final']['sampled']:.3f}, {rec['wall_seconds']:.0f} s"
                )
                return rec

            items = [(a.name, seed, (i, a, seed)) for i, (a, seed) in enumerate(todo, 1)]
            run_claimed(store, items, train, progress, s.steps, idle=idle, wait=wait)
    finally:
        progress.close()


def _train_one(
    out: Path, arms: list[Arm], seeds: tuple[int, ...], cache_dir: str | None, plan: ScreenPlan
) -> bool:
    """Train the first screen run of `arms` (seed-major) that no file holds and no other process has
    claimed; False if there is none. What a process does while it waits on another's run."""
    from oar_rl.study.claims import claimable
    from oar_rl.study.runner import RunStore

    store = RunStore(out / "screen" / "runs", protocol("screen", plan))
    for seed in seeds:
        for arm in arms:
            if claimable(store, arm.name, seed):
                train_arms(out, [arm], (seed,), "screen", cache_dir, plan, wait=False)
                return True
    return False


def run_all(out: Path, plan: ScreenPlan, cache_dir: str | None) -> None:
    """The whole plan, in its order, resumably and shared with other processes like `run`: the decision
    stages' screen runs, then (the decision complete) the confirmation of the winners, then the later
    stages' runs (addenda, reported only). While every run it still needs is another process's, it
    trains a later stage's run instead of waiting idle; the order of runs changes no run's result."""
    later = [a for a in plan.arms if a.stage not in plan.decision_stages]
    decision = [a for a in plan.arms if a.stage in plan.decision_stages]

    def fill() -> bool:
        return _train_one(out, later, plan.screen_seeds, cache_dir, plan)

    train_arms(out, decision, plan.screen_seeds, "screen", cache_dir, plan, idle=fill)
    if write_report(out, "screen", plan)["winners"] and plan.confirm_seeds:
        train_arms(out, confirm_arms(out, plan), plan.confirm_seeds, "confirm", cache_dir, plan, idle=fill)
    if later:
        train_arms(out, later, plan.screen_seeds, "screen", cache_dir, plan)


# ----------------------------------------------------------------------------------------------------
# aggregation and the decision rule


def load_runs(out: Path, kind: str, plan: ScreenPlan) -> dict[str, dict[int, dict[str, Any]]]:
    """{arm: {seed: run record}} of every finished run under `out/<kind>/runs` (protocol checked). A run
    on a seed outside the plan's seeds for `kind` is an error naming it: the decision rule and the
    tables count the plan's seeds only, never a stray one in place of a missing one."""
    from oar_rl.study.runner import RunStore, StudyError

    seeds = set(plan.confirm_seeds if kind == "confirm" else plan.screen_seeds)
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for rec in RunStore(out / kind / "runs", protocol(kind, plan)).check_all().values():
        if int(rec["seed"]) not in seeds:
            raise StudyError(
                f"{out / kind / 'runs'}: the run {rec['key']!r} is on seed {rec['seed']}, not one of the "
                f"plan's {kind} seeds {sorted(seeds)}; move it out of the folder"
            )
        runs.setdefault(rec["variant"], {})[int(rec["seed"])] = rec
    return runs


def blinded(
    runs: dict[str, dict[int, dict[str, Any]]], arms: list[str], seeds
) -> dict[str, list[int]] | None:
    """{arm: its landed seeds} while some arm of a confirmation lacks one of `seeds` (its figures are then
    withheld: the pre-registered criterion is read once, on the complete set); None once it is complete."""
    landed = {a: sorted(runs.get(a, {})) for a in arms}
    return landed if any(len(got) < len(seeds) for got in landed.values()) else None


def _accuracies(runs_of: dict[int, dict[str, Any]], key: str) -> dict[int, float]:
    """{seed: final accuracy in %} of one arm's runs, "sampled" or "greedy" (runs without it left out)."""
    return {s: 100 * r["final"][key] for s, r in runs_of.items() if r["final"].get(key) is not None}


def summarize(runs: dict[str, dict[int, dict[str, Any]]], arms: list[Arm]) -> list[dict[str, Any]]:
    """One row per arm: accuracy and greedy accuracy (mean, t-interval over seeds) and their paired
    differences to its baseline."""
    from oar_rl.study.stats import mean_ci, paired_difference

    rows = []
    for arm in arms:
        got = runs.get(arm.name, {})
        acc, greedy = _accuracies(got, "sampled"), _accuracies(got, "greedy")
        row: dict[str, Any] = {
            "arm": arm.name,
            "method": arm.method,
            "overrides": dict(arm.overrides),
            "baseline": arm.baseline,
            "stage": arm.stage,
            "seeds": sorted(acc),
            "accuracy": mean_ci(list(acc.values()), bounds=(0, 100)) if acc else None,
            "greedy": mean_ci(list(greedy.values()), bounds=(0, 100)) if greedy else None,
            "train_seconds": (sum(r["train_seconds"] for r in got.values()) / len(got)) if got else None,
        }
        if arm.baseline is not None:
            base = runs.get(arm.baseline, {})
            for name, mine, ref in (
                ("paired", acc, _accuracies(base, "sampled")),
                ("paired_greedy", greedy, _accuracies(base, "greedy")),
            ):
                row[name] = paired_difference(mine, ref) if set(mine) & set(ref) else None
        rows.append(row)
    return rows


def winners(
    rows: list[dict[str, Any]], plan: ScreenPlan, seeds: int | None = None, k: int | None = None
) -> list[str]:
    """The pre-registered rule: among non-GRPO arms of the plan's decision stages with all `seeds` paired
    seeds (default: the plan's screen seeds), the `k` (default: the plan's `k_winners`) highest mean
    paired differences to their baselines; ties go to the cheaper arm. ValueError while arms are missing."""
    seeds = len(plan.screen_seeds) if seeds is None else seeds
    k = plan.k_winners if k is None else k
    rows = [r for r in rows if r["stage"] in plan.decision_stages]
    missing = [
        r["arm"]
        for r in rows
        if r["baseline"] is not None and len((r.get("paired") or {}).get("seeds", [])) < seeds
    ]
    if missing:
        raise ValueError(
            f"the screen is not complete: {', '.join(missing)} lack paired runs on {seeds} seeds"
        )
    cand = [r for r in rows if r["baseline"] is not None]
    # means rounded below float noise: equal totals are a tie, and the tie goes to the cheaper arm
    cand.sort(key=lambda r: (-round(r["paired"]["mean"], 9), plan.arm(r["arm"]).cost))
    return [r["arm"] for r in cand[:k]]


def gaps(runs: dict[str, dict[int, dict[str, Any]]], arm: str, baseline: str | None) -> dict[int, float]:
    """{seed: the arm's final sampled accuracy minus its baseline's on the same seed}, in points; seeds
    the baseline lacks are left out (no baseline: none)."""
    base = runs.get(baseline, {}) if baseline else {}
    return {
        s: 100 * (r["final"]["sampled"] - base[s]["final"]["sampled"])
        for s, r in runs.get(arm, {}).items()
        if s in base
    }


def contrasts(runs: dict[str, dict[int, dict[str, Any]]], plan: ScreenPlan) -> list[dict[str, Any]]:
    """One row per contrast of the plan with runs on common seeds: the paired difference of the two
    arms' gaps to their baselines (percentage points)."""
    from oar_rl.study.stats import paired_difference

    rows = []
    for a, b, what in plan.contrasts:
        ga, gb = gaps(runs, a, plan.arm(a).baseline), gaps(runs, b, plan.arm(b).baseline)
        if len(set(ga) & set(gb)) >= 2:
            rows.append({"arm": a, "versus": b, "hypothesis": what, "paired": paired_difference(ga, gb)})
    return rows


DIAGNOSTICS = DIAGNOSTIC_LABELS


def diagnostics(runs: dict[str, dict[int, dict[str, Any]]], arms: list[Arm]) -> list[dict[str, Any]]:
    """Per arm: the gradient norm against its baseline's on the same seed (mean of per-seed ratios of
    per-run mean norms) and the :data:`DIAGNOSTICS` metrics."""

    def mean_of(rec: dict[str, Any], key: str) -> float | None:
        vals = [h[key] for h in rec.get("history", []) if h.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    def seed_mean(vals: list[float | None]) -> float | None:
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    rows = []
    for arm in arms:
        got = runs.get(arm.name, {})
        base = runs.get(arm.baseline or arm.name, {})
        ratios = []
        for seed, rec in got.items():
            g, b = mean_of(rec, "grad_norm"), mean_of(base.get(seed, {}), "grad_norm")
            if g is not None and b:
                ratios.append(g / b)
        row = {"arm": arm.name, "grad_norm_ratio": seed_mean(ratios)}
        row.update({k: seed_mean([mean_of(r, k) for r in got.values()]) for k, _ in DIAGNOSTICS})
        rows.append(row)
    return rows


PILOT_SEED = 999
"""The GRPO pilot's seed (outside every screen's and confirmation's seeds)."""


def pilot(out: Path, plan: ScreenPlan, cache_dir: str | None) -> dict[str, Any]:
    """GRPO on `PILOT_SEED` with the screen's protocol, stored under `out/pilot` (not a screen run), and
    the warm start's accuracy on the same validation sample: what the regime's GRPO gain is, checked
    before the plan is pre-registered. Writes `out/pilot/pilot.json`."""
    from oar_rl.study.runner import _accuracy
    from oar_rl.tasks import get_task

    arm = plan.arm("grpo")
    train_arms(out / "pilot", [arm], (PILOT_SEED,), "screen", cache_dir, plan)
    run = load_runs(out / "pilot", "screen", plan)["grpo"][PILOT_SEED]
    task = get_task(plan.task)
    s = replace(settings("screen", plan), max_completion_length=task.max_completion_length)
    ws = task.load_warm_start("default", cache_dir)
    rows = task.prompts(plan.eval["screen"][0], s.test_problems)
    t0 = time.perf_counter()
    start = {
        "sampled": _accuracy(task, ws.model, ws.tokenizer, rows, s, greedy=False),
        "greedy": _accuracy(task, ws.model, ws.tokenizer, rows, s, greedy=True),
    }
    rec = {
        "plan": plan.name,
        "seed": PILOT_SEED,
        "protocol": protocol("screen", plan),
        "warm_start": start,
        "grpo": run["final"],
        "gain_points": 100 * (run["final"]["sampled"] - start["sampled"]),
        "grpo_train_seconds": run["train_seconds"],
        "warm_start_eval_seconds": time.perf_counter() - t0,
    }
    write_text_atomic(out / "pilot" / "pilot.json", json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def _seed_range(seeds: tuple[int, ...]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) else str(seeds)


def write_report(out: Path, kind: str, plan: ScreenPlan) -> dict[str, Any]:
    """`out/<kind>/study.json` (beside the runs) and `out/<kind>.md`: the table of every arm with runs (and,
    for the screen, the winners once it is complete), the contrasts and the diagnostics; `out/<kind>.png`:
    its figure (`screen_plot`), none for a blinded confirmation (:func:`blinded`), which shows progress."""
    runs = load_runs(out, kind, plan)
    arms = [a for a in plan.arms if a.name in runs] if kind == "screen" else confirm_arms(out, plan)
    seeds = plan.screen_seeds if kind == "screen" else plan.confirm_seeds
    record: dict[str, Any] = {"kind": kind, "protocol": protocol(kind, plan), "seeds": list(seeds)}
    landed = blinded(runs, [a.name for a in arms], seeds) if kind == "confirm" else None
    if landed is not None:
        record.update(rows=[], blinded=True, landed=landed)
        (out / f"{kind}.png").unlink(missing_ok=True)  # no figure while blinded (not even an old one)
        write_text_atomic(out / kind / "study.json", json.dumps(record, indent=1, sort_keys=True))
        write_text_atomic(out / f"{kind}.md", progress_markdown(landed, list(seeds), f"Credit {kind}"))
        return record
    rows = record["rows"] = summarize(runs, arms)
    problems = plan.eval[kind][1]
    note = (
        f"Validation split, {problems} problems × 4 samples at T = 1 per run; seeds {_seed_range(seeds)}; "
        "differences paired by seed against the arm's GRPO baseline (same learning rate and trust region). "
        "Student-t intervals over seeds; * marks an end clipped to [0, 100]."
        if kind == "screen"
        else f"Test split, {problems} problems × 4 samples at T = 1 per run ({problems * 4}), fresh seeds "
        f"{_seed_range(seeds)}; differences paired by seed against the arm's GRPO baseline."
    )
    if kind == "screen" and plan.k_winners:  # a plan with no winners (a rate grid) decides elsewhere
        try:
            record["winners"] = winners(summarize(runs, list(plan.arms)), plan, len(seeds), plan.k_winners)
            note += f" **Winners (pre-registered rule): {', '.join(record['winners'])}.**"
        except ValueError as e:
            record["winners"] = None
            note += f" Winners not decided yet: {e}."
        later = sorted({a.stage for a in arms} - set(plan.decision_stages))
        if later:
            what = "an addendum" if len(later) == 1 else "addenda"
            note += (
                f" Stage{'s' * (len(later) > 1)} {', '.join(map(str, later))}: {what} screened after the "
                "decision, outside the winners' rule."
            )
    figure = screen_plot.write_figure(out / f"{kind}.png", rows, kind, plan, record["protocol"])
    text = markdown(rows, f"Credit {kind}", note, figure=figure)
    record["contrasts"] = contrasts(runs, plan)  # the confirmation's: those between its arms
    if record["contrasts"]:
        text += "\n" + contrasts_markdown(record["contrasts"])
    record["diagnostics"] = diagnostics(runs, arms)
    text += "\n" + diagnostics_markdown(record["diagnostics"])
    write_text_atomic(out / kind / "study.json", json.dumps(record, indent=1, sort_keys=True))
    write_text_atomic(out / f"{kind}.md", text)
    return record


def confirm_arms(out: Path, plan: ScreenPlan) -> list[Arm]:
    """The screen's recorded winners and the plan's always-confirmed arms, each after its baseline."""
    path = out / "screen" / "study.json"
    if not path.exists():
        raise ValueError(f"{path} does not exist: run the screen and `report` first")
    screen = json.loads(path.read_text())
    chosen = screen.get("winners")
    if not chosen:
        raise ValueError(f"{path} names no winners yet: finish the screen first")
    arms: list[Arm] = []
    for name in [*chosen, *(c for c in plan.confirm_also if c not in chosen)]:
        arm = plan.arm(name)
        base = plan.arm(arm.baseline) if arm.baseline else arm
        arms += [a for a in (base, arm) if a not in arms]
    return arms


def main(argv: list[str] | None = None, plan: ScreenPlan | None = None, prog: str | None = None) -> int:
    """The command line: `python -m oar_rl.study.screen ACTION --plan PLAN`, or, given `plan` (an
    experiment's `__main__`), `prog ACTION` without `--plan`."""
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog=prog or "python -m oar_rl.study.screen",
        description=__doc__.split("\n\n")[0] if plan is None else f"The pre-registered screen {plan.name!r}.",
    )
    p.add_argument(
        "action",
        choices=("pilot", "run", "report", "confirm", "all"),
        help="run: the screen's runs (--stages); report: its tables and winners; confirm: the winners on "
        "fresh seeds; all: the screen, then the confirmation, then the later stages, a waiting process "
        "training later-stage runs",
    )
    if plan is None:
        p.add_argument("--plan", required=True, help="the pre-registered plan: module:ATTR (e.g. experiments."
                       "credit_long.plan:CREDIT_LONG) or a .py file that defines PLAN")  # fmt: skip
    p.add_argument("--out", default=None, help="output directory (default: results/<plan's name>)")
    p.add_argument("--stages", default=None, help="screen stages to train (default: the decision's)")
    p.add_argument("--arms", default=None, help="only these arms (comma-separated; default: every arm)")
    p.add_argument("--cache-dir", "--cache_dir", dest="cache_dir", default=None)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    a = p.parse_args(argv)
    uses = {"run": ("stages", "arms", "cache_dir"), "report": ()}.get(a.action, ("cache_dir",))
    unused = [f"--{f}" for f in ("stages", "arms", "cache_dir") if getattr(a, f) and f not in uses]
    if unused:  # refused, not ignored: --stages and --arms choose the runs of `run` only
        p.error(f"`{a.action}` does not use {', '.join(unused)}; --stages and --arms are for `run`")
    import torch

    if plan is None:
        try:
            plan = load_plan(a.plan)
        except ValueError as e:
            p.error(str(e))
    from oar_rl.numerics import apply

    if plan.numerics is not None and a.threads != 1:
        p.error(f"the plan's CPU numerics profile {plan.numerics!r} holds at one torch thread (--threads 1)")
    apply(plan.numerics)  # re-runs this command under the plan's CPU numerics profile, if it has one
    torch.set_num_threads(a.threads)
    out = Path(a.out or f"results/{plan.name}")
    t0 = time.perf_counter()
    if a.action == "pilot":
        rec = pilot(out, plan, a.cache_dir)
        print(f"pilot: warm start {100 * rec['warm_start']['sampled']:.1f}% -> GRPO "
              f"{100 * rec['grpo']['sampled']:.1f}% ({rec['gain_points']:+.1f} points), "
              f"{rec['grpo_train_seconds']:.0f} s of training; wrote {out}/pilot/pilot.json",
              file=sys.stderr)  # fmt: skip
        return 0
    if a.action == "run":
        stages = {int(x) for x in a.stages.split(",")} if a.stages else set(plan.decision_stages)
        arms = [x for x in plan.arms if x.stage in stages]
        if a.arms:
            wanted = a.arms.split(",")
            for name in wanted:
                plan.arm(name)  # names a bad arm with the valid ones
            arms = [x for x in arms if x.name in wanted]
        if not arms:
            raise SystemExit(f"no arm of plan {plan.name!r} is in stages {sorted(stages)}")
        train_arms(out, arms, plan.screen_seeds, "screen", a.cache_dir, plan)
    if a.action == "confirm":
        write_report(out, "screen", plan)
        train_arms(out, confirm_arms(out, plan), plan.confirm_seeds, "confirm", a.cache_dir, plan)
    if a.action == "all":
        run_all(out, plan, a.cache_dir)
    kinds = ["confirm"] if a.action == "confirm" else ["screen"]
    if a.action in ("report", "all") and any((out / "confirm" / "runs").glob("*.json")):
        kinds.append("confirm")  # the confirmation so far (it resumes where it stopped)
    for kind in kinds:
        rec = write_report(out, kind, plan)
        if rec.get("blinded"):
            print(progress_markdown(rec["landed"], rec["seeds"], f"Credit {kind}"), file=sys.stderr)
        else:
            print(markdown(rec["rows"], f"Credit {kind}", ""), file=sys.stderr)
        wrote = f"{out}/{kind}.md" + ("" if rec.get("blinded") else f" and {out}/{kind}.png")
        print(f"{kind}: {time.perf_counter() - t0:.0f} s; wrote {wrote}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
