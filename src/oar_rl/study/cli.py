"""`oar-rl study`: the command line and the study's top-level flow.

Flow: load the task's warm start; fix the learning rate (the `--tune-lr` sweep, an earlier sweep in the
same `--out`, `--lr`, or the task's default, in that order, said in study.json); refuse a protocol that
differs from the one the stored runs were made under; measure the warm start; train every missing
(variant, seed) run, seed-major, writing each run's file as it finishes; run the recall analysis; then
aggregate everything into study.json, the plots and report.html.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from oar_rl.io import ensure_writable_dir
from oar_rl.machine import machine_info
from oar_rl.study.args import build_parser, preset_name, settings_from_args
from oar_rl.study.claims import run_claimed
from oar_rl.study.config import STUDY_FORMAT, StudySettings, protocol_hash
from oar_rl.study.lr_frozen import method_lrs, resolve_learning_rate
from oar_rl.study.runner import (
    Progress,
    RunStore,
    StudyError,
    _check_same,
    _read_json,
    _write_json,
    curve_separate,
    phase,
    train_and_evaluate,
    tune_learning_rate,
)
from oar_rl.study.screen_report import signed_text
from oar_rl.study.stats import wins_text
from oar_rl.tasks import get_task

__all__ = ["build_parser", "main", "role_figures", "run_study", "settings_from_args"]


def run_study(
    settings: StudySettings,
    out: Path,
    *,
    cache_dir: str | None = None,
    fresh: bool = False,
    tune_lr: bool = False,
    lr: float | None = None,
) -> dict[str, Any]:
    """Run (or resume) a study end to end; returns the study.json data. StudyError on a protocol clash.

    The phases, in order: resolve the task and settings; clear `out` (`fresh`); check the stored runs'
    protocol before anything heavy; load the warm start; choose the learning rate; measure the warm start;
    train every missing run; the recall analysis; assemble and write study.json and the report.
    """
    from oar_rl.numerics import check
    from oar_rl.study.report import write_outputs

    check(settings.cpu_numerics)  # the protocol's CPU kernels, or no run (read when torch loads)
    t_start = time.perf_counter()
    task, settings = _resolve(settings)
    if fresh:
        _clear_outputs(out)
    if lr is None and not tune_lr:
        _check_stored_protocol(settings, task, out)
    phase(f"task {task.name}: loading warm start {settings.warm_start!r}")
    ws = task.load_warm_start(settings.warm_start, cache_dir)
    progress = Progress(_total_steps(settings, tune_lr))
    try:
        with tempfile.TemporaryDirectory(prefix="oar-rl-study-") as work:
            settings, tuning = _choose_learning_rate(
                task, ws, settings, out, progress, Path(work), tune_lr, lr
            )
            protocol = settings.protocol()
            store = RunStore(out / "runs", protocol, settings.module_records())
            stored = store.check_all()
            test_rows = task.prompts("test", settings.test_problems)
            ws_rec = _measure_warm_start(task, ws, settings, test_rows, out, protocol)
            stored.update(_train_runs(task, ws, settings, store, ws_rec, test_rows, progress, Path(work)))
    finally:
        progress.close()
    recall = _recall(task, ws, settings, protocol, out)
    study = _study_record(task, settings, tuning, ws_rec, stored, recall, out, t_start)
    write_outputs(study, out)
    if study["task"]["figures"] is not None:  # what `make demo` reports: summary.json["task"]
        _write_json(out / "summary.json", {"task": study["task"]["figures"], "study": "study.json"})
    return study


# the phases of run_study, top to bottom


def _resolve(settings: StudySettings) -> tuple[Any, StudySettings]:
    """The task, and the settings with the task's defaults filled in; StudyError on a bad warm start."""
    task = get_task(settings.task)
    if settings.warm_start not in task.warm_starts:
        raise StudyError(
            f"warm start {settings.warm_start!r} is not valid for task {task.name!r}; "
            f"valid: {', '.join(task.warm_starts)}"
        )
    return task, settings.resolved(task)


def _clear_outputs(out: Path) -> None:
    """--fresh: remove the stored runs, sweeps and records (the report files are rewritten anyway)."""
    for name in ("runs", "lr", ".checkpoints"):
        shutil.rmtree(out / name, ignore_errors=True)
    for name in ("lr_tuning.json", "lr_warm_start.json", "warm_start.json", "recall.json", "study.json"):
        (out / name).unlink(missing_ok=True)


def _check_stored_protocol(settings: StudySettings, task: Any, out: Path) -> None:
    """Fail on a changed protocol, or a method with no learning rate chosen, before loading anything
    heavy (only when the learning rate is not being chosen now)."""
    lr_value, lr_source, tuning = resolve_learning_rate(settings, task, out, lr=None)
    method_lrs(settings, tuning)
    resolved = replace(settings, learning_rate=lr_value, lr_source=lr_source)
    RunStore(out / "runs", resolved.protocol(), resolved.module_records()).check_all()


def _total_steps(settings: StudySettings, tune_lr: bool) -> int:
    """Optimizer steps this invocation may run (the progress bar's total)."""
    sweep = len(settings.method_list) * len(settings.lr_grid) * settings.tune_seeds * settings.steps
    return len(settings.runs()) * settings.steps + (sweep if tune_lr else 0)


def _choose_learning_rate(
    task: Any,
    ws: Any,
    settings: StudySettings,
    out: Path,
    progress: Progress,
    work: Path,
    tune_lr: bool,
    lr: float | None,
) -> tuple[StudySettings, dict[str, Any] | None]:
    """(settings with the learning rate, its source and the per-method rates, the sweep record or None):
    the `--tune-lr` sweep now, else an earlier sweep in `out`, `--lr`, or the task's default."""
    if tune_lr:
        phase(f"learning-rate sweep of every method on the validation split: {list(settings.lr_grid)}")
        tuning = tune_learning_rate(task, ws, settings, out, progress, work)
        lr_value = tuning["chosen"]
        lr_source = "tuned on the validation split (--tune-lr, lr_tuning.json)"
        progress.write(f"learning rate chosen: {lr_value:g}")
    else:
        lr_value, lr_source, tuning = resolve_learning_rate(settings, task, out, lr=lr)
    settings = replace(
        settings, learning_rate=lr_value, lr_source=lr_source, method_lrs=method_lrs(settings, tuning)
    )
    if tuning is None:
        phase(f"learning rate {lr_value:g}: {lr_source}")
    return settings, tuning


def _measure_warm_start(
    task: Any, ws: Any, settings: StudySettings, test_rows: list, out: Path, protocol: dict[str, Any]
) -> dict[str, Any]:
    """warm_start.json: the warm start's test accuracy (read back when stored under the same protocol)
    and, for a task with a role labeller, its token-role figures."""
    ws_rec = _read_json(out / "warm_start.json")
    if ws_rec is not None:
        _check_same(out / "warm_start.json", ws_rec, protocol)
    else:
        from oar_rl.study.runner import _accuracy

        phase(f"evaluating the warm start on {len(test_rows)} test problems")
        acc = {
            g: _accuracy(task, ws.model, ws.tokenizer, test_rows, settings, greedy=g == "greedy")
            for g in ("sampled", "greedy")
        }
        if curve_separate(settings):  # step 0 of the curves, on the curve's own sample
            n, k = settings.n_curve
            acc["curve"] = _accuracy(task, ws.model, ws.tokenizer, test_rows[:n], settings,
                                     greedy=False, samples=k)  # fmt: skip
        ws_rec = {"protocol": protocol, "recipe_hash": ws.recipe_hash, "recipe": ws.recipe, "accuracy": acc}
        _write_json(out / "warm_start.json", ws_rec)
    if "task_figures" not in ws_rec:
        figures = role_figures(
            task, ws.model, ws.tokenizer, test_rows, temperature=settings.temperature,
            max_new_tokens=settings.max_completion_length, seed=settings.eval_seed,
        )  # fmt: skip
        if figures is not None:
            ws_rec["task_figures"] = figures
            _write_json(out / "warm_start.json", ws_rec)
    return ws_rec


def role_figures(
    task: Any, model: Any, tokenizer: Any, rows: list, *, temperature: float, max_new_tokens: int, seed: int
) -> dict[str, Any] | None:
    """warm_start.json's `task_figures`: token roles and policy entropy on the model's own samples of the
    prompts of `rows` (`oar_rl.roles.role_statistics`); None for a task without a role labeller."""
    labeller = (task.trainer_kwargs() if task.trainer_kwargs else {}).get("token_roles")
    if labeller is None:
        return None
    from oar_rl.roles import role_statistics

    phase("measuring token roles and policy entropy on the warm start's own samples")
    return role_statistics(
        model, tokenizer, [r["prompt"] for r in rows], labeller,
        temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
    )  # fmt: skip


def _train_runs(
    task: Any,
    ws: Any,
    settings: StudySettings,
    store: RunStore,
    ws_rec: dict[str, Any],
    test_rows: list,
    progress: Progress,
    work: Path,
) -> dict[str, Any]:
    """Train and evaluate every (variant, seed) run not stored yet, seed-major; the new run records."""
    from oar_rl.study.checkpoints import run_folder

    train_rows = task.prompts("train", settings.n_train_prompts)
    plan = settings.runs()
    step0 = ws_rec["accuracy"].get("curve", ws_rec["accuracy"]["sampled"])

    def train(item: tuple[int, Any, int]) -> dict[str, Any]:
        i, variant, seed = item
        progress.describe(f"[{i}/{len(plan)}] {variant.name} seed {seed}")
        rec = train_and_evaluate(
            task, ws, settings, variant, seed, train_rows, test_rows,
            work / f"run{i}", progress,
            learning_rate=dict(variant.overrides).get("learning_rate", settings.learning_rate),
            checkpoint_dir=run_folder(store.root, store.filename(variant.name, seed)),
        )  # fmt: skip
        rec["curve"] = {"0": step0, **rec["curve"]}
        progress.write(
            f"[{i}/{len(plan)}] {variant.name} seed {seed}: accuracy "
            f"{ws_rec['accuracy']['sampled']:.3f} -> {rec['final']['sampled']:.3f} "
            f"(greedy {rec['final']['greedy']:.3f}), "
            f"{rec['train_seconds']:.0f} s training"
        )
        return rec

    def check(rec: dict[str, Any], item: tuple[int, Any, int]) -> None:  # a run's name carries neither
        _, variant, seed = item
        want = {
            "method": variant.method,
            "learning_rate": dict(variant.overrides).get("learning_rate", settings.learning_rate),
        }  # fields a run file lacks (older than the field) are not compared
        diff = [
            f"{k}: stored {rec[k]!r}, this study {v!r}" for k, v in want.items() if k in rec and rec[k] != v
        ]
        if diff:
            raise StudyError(
                f"{store.root / store.filename(variant.name, seed)} is not the run this study asks for ("
                + "; ".join(diff)
                + "): e.g. a new --tune-lr sweep chose another learning rate for the method. Use a new "
                "--out, or --fresh to discard these results."
            )

    items = [(v.name, seed, (i, v, seed)) for i, (v, seed) in enumerate(plan, 1)]
    return run_claimed(store, items, train, progress, settings.steps, check=check)


def _recall(
    task: Any, ws: Any, settings: StudySettings, protocol: dict[str, Any], out: Path
) -> dict[str, Any] | None:
    """recall.json: recall@K% of every signal on the warm start (read back under the same protocol and
    signals): the built-in scorers and every other method of the study with a standalone scorer
    (`study_signals`)."""
    from oar_rl.study.recall import recall_analysis, recall_key, study_signals

    if not settings.recall_trajectories:
        return None
    methods = study_signals(settings)
    recall_protocol = recall_key(settings, protocol)
    cached = _read_json(out / "recall.json")
    if cached is not None and cached.get("protocol_hash") == protocol_hash(recall_protocol):
        return cached["result"]
    phase(f"recall@K%: oracle on {settings.recall_trajectories} correct warm-start trajectories")
    t0 = time.perf_counter()
    recall = recall_analysis(
        task, ws.model, ws.tokenizer, n=settings.recall_trajectories,
        max_new_tokens=settings.max_completion_length, seed=settings.eval_seed, probe=settings.probe,
        scored_tokens=settings.scored_tokens, methods=methods,
    )  # fmt: skip
    recall["seconds"] = time.perf_counter() - t0
    _write_json(out / "recall.json", {"protocol_hash": protocol_hash(recall_protocol), "result": recall})
    return recall


def _study_record(
    task: Any,
    settings: StudySettings,
    tuning: dict[str, Any] | None,
    ws_rec: dict[str, Any],
    stored: dict[str, Any],
    recall: dict[str, Any] | None,
    out: Path,
    t_start: float,
) -> dict[str, Any]:
    """study.json's data: the protocol, scope, task, learning rate, warm start, groups, recall and runs."""
    from oar_rl.study.report import aggregate

    protocol = settings.protocol()
    groups = {g: [v.name for v in vs] for g, vs in settings.variants().items()}
    in_scope = {f"{v.name}/seed{s}" for v, s in settings.runs()}
    runs = {k: r for k, r in stored.items() if k in in_scope}
    run_wall = sum(r["wall_seconds"] for r in runs.values())
    tuning_wall = (
        sum(r["wall_seconds"] for r in RunStore(out / "lr", settings.tuning_protocol()).check_all().values())
        if tuning
        else 0.0
    )
    study = {
        "format": STUDY_FORMAT,
        "complete": len(runs) == len(in_scope),
        "protocol": protocol,
        "protocol_hash": protocol_hash(protocol),
        "scope": {
            "methods": list(settings.method_list),
            "seeds": settings.seeds,
            "method_seeds": dict(settings.method_seeds),
            "ablations": list(settings.ablations),
        },
        **_credit_modules(settings),
        "task": {
            "name": task.name,
            "description": task.description,
            "roles": task.label_roles is not None,
            # pivot_fraction, entropy_by_role, mean_reasoning_tokens of the warm start's own samples
            "figures": ws_rec.get("task_figures"),
        },
        "learning_rate": {
            "value": settings.learning_rate,
            "source": settings.lr_source,
            "per_method": {m: settings.lr_for(m) for m in settings.method_list},
            "tuning": tuning,
        },
        "warm_start": {k: ws_rec[k] for k in ("recipe_hash", "recipe", "accuracy")},
        "groups": aggregate(groups, runs),
        "recall": recall,
        "runs": runs,
        "runs_outside_scope": sorted(set(stored) - in_scope),  # made earlier, kept in runs/, not aggregated
        "wall": {
            "this_invocation_seconds": time.perf_counter() - t_start,
            "runs_seconds_total": run_wall,
            "lr_sweep_seconds_total": tuning_wall,
            "recall_seconds": (recall or {}).get("seconds"),
            "note": "runs/lr sweep totals add up the wall time of every stored run (train + evaluation), "
            "across invocations; this_invocation excludes earlier invocations",
            "machine": machine_info(),  # this invocation's; each run file records its own
        },
    }
    return study


def _credit_modules(settings: StudySettings) -> dict[str, Any]:
    """study.json's `credit_modules`: each `--credit-module` file, its code's sha256 and its rules (each
    rule's runs record their own module); absent without any (the studies made before it)."""
    if not settings.credit_modules:
        return {}
    mods = [{"module": m, "sha256": h, "rules": list(r)} for m, h, r in settings.credit_modules]
    return {"credit_modules": mods}


def _summary_lines(study: dict[str, Any]) -> list[str]:
    lines = []
    for group, results in study["groups"].items():
        for name, r in results.items():
            f = r["final_sampled"]
            if f["mean"] is None:
                continue
            ci = f" [{100 * f['low']:.1f}, {100 * f['high']:.1f}]" if f["low"] is not None else ""
            d = r.get("diff_to_grpo")
            diff = ""
            if d and d["mean"] is not None:
                dci = (
                    f" [{signed_text(100 * d['low'])}, {signed_text(100 * d['high'])}]"
                    if d["low"] is not None
                    else ""
                )
                mde = f", MDE {100 * d['mde80']:.1f}" if d.get("mde80") is not None else ""
                wins = f"{wins_text(d)} seeds better"
                diff = f"   vs GRPO {signed_text(100 * d['mean'])}{dci} ({wins}{mde})"
            lines.append(f"{group:<6} {name:<20} {100 * f['mean']:5.1f}%{ci}{diff}")
    return lines


def main(argv: list[str] | None = None) -> int:
    from oar_rl.options import apply_threads
    from oar_rl.study.plan import plan_lines, refusal

    a = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        settings = settings_from_args(a)
        get_task(settings.task)
        out = Path(a.out).expanduser()
        plan = plan_lines(settings, preset=preset_name(a), out=out, tune_lr=a.tune_lr, lr=a.lr)
        print("\n".join(plan), file=sys.stderr, flush=True)
        if a.dry_run:
            return 0
        why = refusal(
            settings, preset=preset_name(a), tune_lr=a.tune_lr, full=a.full, yes=a.yes,
            command=" ".join(sys.argv[1:] if argv is None else argv),
        )  # fmt: skip
        if why:
            raise ValueError(why)
        out = ensure_writable_dir(out)
    except ValueError as e:
        print(f"oar-rl study: {e}", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from oar_rl.numerics import apply

    apply(settings.cpu_numerics)  # re-runs this command under the protocol's CPU numerics profile
    hf_logging.disable_progress_bar()  # one progress bar: the study's (not one per weight load)
    apply_threads(a.threads)
    try:
        study = run_study(settings, out, cache_dir=a.cache_dir, fresh=a.fresh, tune_lr=a.tune_lr, lr=a.lr)
    except StudyError as e:
        print(f"oar-rl study: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        phase(f"interrupted: finished runs are in {out / 'runs'}; rerun the same command to continue")
        return 130
    w = study["wall"]
    phase(f"done in {w['this_invocation_seconds']:.0f} s (all stored runs: {w['runs_seconds_total']:.0f} s)")
    for line in _summary_lines(study):
        print(line)
    print(f"report: {out / 'report.html'}   data: {out / 'study.json'}")
    return 0 if study["complete"] else 1
