"""Running a study: the run store (resumable), the learning-rate sweep, and the training loop.

Files in the output directory:

- `runs/<variant>.seed<k>.json`: one finished run each, written atomically when the run ends. A rerun
  skips every run whose file exists; each file records the full protocol, and a file whose protocol
  differs from the current one stops the study with a diff (results of two protocols never mix). Each
  also records the machine it ran on (`machine`, `oar_rl.machine`): descriptive, not protocol, so a
  file made before the key existed, or on another machine, still loads and verifies. A run of a rule
  from a `--credit-module` file records that module (`credit_module`: spec and sha256 of its code); a
  stored run of a rule in scope whose module differs from the one loaded now stops the study (its code
  changed: the run is not reused).
- `lr/lr<value>.seed<k>.json`: the runs of the learning-rate sweep, same rules (the sweep's protocol is
  the study's minus the learning rate); `lr_tuning.json`: the choice and how it was made.
- `warm_start.json`: the warm start's held-out accuracy (step 0 of every curve).

The learning rate is chosen once, for GRPO, on the validation split (never the test split), by the
mean final validation accuracy over `tune_seeds` seeds (seeds 1000, 1001, ... so they share nothing
with the study's seeds 0, 1, ...); ties go to the smaller rate. The choice is then part of the
protocol: changing it later is refused like any other protocol change.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from oar_rl.io import write_text_atomic
from oar_rl.machine import machine_info
from oar_rl.study.claims import run_claimed
from oar_rl.study.config import StudySettings, Variant, protocol_diff, protocol_hash
from oar_rl.study.lr_choice import NoRateQualifies, choose_rate, greedy_clause
from oar_rl.study.provenance import code_version, effective_protocol, study_protocol
from oar_rl.tasks import Task, WarmStart

TUNE_SEED_BASE = 1000


class StudyError(ValueError):
    """A study that cannot go on as asked (changed protocol, conflicting options): a message for the user."""


def phase(msg: str) -> None:
    print(f"[oar-rl study {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StudyError(f"{path} is unreadable ({e}); delete it to redo that part") from e


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def _check_same(path: Path, record: dict[str, Any], protocol: dict[str, Any]) -> None:
    """StudyError unless the run file was made under the study protocol `protocol` and (a file written
    since issue 56) its `protocol` block is that protocol with the run's own overrides and learning rate
    put in (`oar_rl.study.provenance`)."""
    old = study_protocol(record)
    if protocol_hash(old) != protocol_hash(protocol):
        diff = "\n".join(protocol_diff(old, protocol))
        legacy = (
            "\n(credit_modules: made when the protocol of every run recorded the --credit-module files; "
            "each rule's runs now record their own module instead)"
            if "credit_modules" in old and "credit_modules" not in protocol
            else ""
        )
        raise StudyError(
            f"{path} was made under a different configuration:\n{diff}{legacy}\n"
            "The protocol is fixed once results exist. Use a new --out, or --fresh to discard these results."
        )
    if "protocol_changes" in record:
        want, _ = effective_protocol(protocol, record.get("overrides"), record.get("learning_rate"))
        if protocol_hash(record["protocol"]) != protocol_hash(want):
            diff = "\n".join(protocol_diff(record["protocol"], want))
            raise StudyError(
                f"{path}: its protocol block is not the study protocol with the run's own overrides and "
                f"learning rate put in (block -> what they give):\n{diff}\nThe file was edited or is damaged."
            )


def _module_text(record: dict[str, str] | None) -> str:
    if record is None:
        return "no --credit-module"
    return f"--credit-module {record.get('module')} (sha256 {str(record.get('sha256'))[:12]}…)"


class RunStore:
    """One JSON file per finished run under `root`, each stamped with its protocol; `modules`: the credit
    module of each method in scope (`StudySettings.module_records`), which that method's runs record
    (`credit_module`) and must match to be reused."""

    def __init__(
        self,
        root: Path,
        protocol: dict[str, Any],
        modules: dict[str, dict[str, str] | None] | None = None,
    ) -> None:
        self.root = root
        self.protocol = protocol
        self.hash = protocol_hash(protocol)
        self.modules = dict(modules or {})

    def _check_module(self, path: Path, record: dict[str, Any]) -> None:
        """StudyError when `record` is a run of a method in scope made by another credit module (or by
        one where none is loaded now, or the other way round): its rule's code is not this study's."""
        method = record.get("method")
        if method not in self.modules:  # out of scope (kept, not aggregated), or no module check here
            return
        want, got = self.modules[method], record.get("credit_module")
        if (want or {}).get("sha256") != (got or {}).get("sha256"):
            raise StudyError(
                f"{path} is a run of {method!r} made by {_module_text(got)}, but this study loads "
                f"{_module_text(want)}: the rule's code changed since, so the run is not reused. Restore "
                f"the module, delete the runs of {method!r} (and its lr/ sweep runs) to retrain them with "
                "the new code, or use a new --out."
            )

    @staticmethod
    def filename(name: str, seed: int) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", name) + f".seed{seed}.json"

    def check_all(self) -> dict[str, dict[str, Any]]:
        """Every stored run by key; StudyError naming the differences if one has another protocol, and
        naming the file if it is not where its key puts it (a copied or renamed run would otherwise
        replace another, or count twice)."""
        out: dict[str, dict[str, Any]] = {}
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            rec = _read_json(path)
            assert rec is not None
            _check_same(path, rec, self.protocol)
            self._check_module(path, rec)
            name, _, seed = str(rec.get("key", "")).rpartition("/seed")
            home = self.filename(name, int(seed)) if name and seed.isdigit() else None
            if path.name != home:
                raise StudyError(
                    f"{path} holds the run {rec.get('key')!r}, whose file is {home or 'unknown'}: a copied "
                    "or renamed run file; move it back or delete it"
                )
            out[rec["key"]] = rec
        return out

    def get(self, name: str, seed: int) -> dict[str, Any] | None:
        path = self.root / self.filename(name, seed)
        rec = _read_json(path)
        if rec is not None:
            _check_same(path, rec, self.protocol)
            self._check_module(path, rec)
        return rec

    def put(self, name: str, seed: int, record: dict[str, Any]) -> dict[str, Any]:
        """Write the run's file atomically; returns the record as stored (with key, protocol and, for a
        rule of a credit module, the module). `protocol`: the run's effective protocol (the study's with
        the run's overrides and learning rate put in), `protocol_changes` what they changed, and
        `protocol_hash` the study protocol's, one per folder (`oar_rl.study.provenance`)."""
        module = self.modules.get(str(record.get("method")))
        effective, changes = effective_protocol(
            self.protocol, record.get("overrides"), record.get("learning_rate")
        )
        record = {
            **record,
            **({"credit_module": module} if module is not None else {}),
            "key": f"{name}/seed{seed}",
            "protocol": effective,
            "protocol_changes": changes,
            "protocol_hash": self.hash,
        }
        _write_json(self.root / self.filename(name, seed), record)
        return record


class Progress:
    """One tqdm bar over every optimizer step the invocation still has to run."""

    def __init__(self, total: int) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, unit="step", desc="study", dynamic_ncols=True, mininterval=1.0)

    def tick(self) -> None:
        self.bar.update(1)

    def describe(self, text: str) -> None:
        self.bar.set_description_str(text)

    def write(self, text: str) -> None:
        self.bar.write(text, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def _accuracy(
    task: Task,
    model,
    tokenizer,
    rows,
    settings: StudySettings,
    *,
    greedy: bool,
    samples: int | None = None,
    per_row: list[int] | None = None,
) -> float:
    """Held-out accuracy on `rows`: greedy, or `samples` (default `eval_samples`) per row at T;
    `per_row` gets each row's correct count (`heldout_accuracy`)."""
    from oar_rl.study.training import heldout_accuracy

    return heldout_accuracy(
        model,
        tokenizer,
        rows,
        task.check,
        temperature=0.0 if greedy else settings.temperature,
        samples=1 if greedy else samples or settings.eval_samples,
        seed=settings.eval_seed,
        max_new_tokens=settings.max_completion_length,
        per_row=per_row,
    )


def curve_separate(settings: StudySettings) -> bool:
    """Whether the curve is measured on a smaller sample than the final accuracy."""
    return settings.n_curve != (settings.test_problems, settings.eval_samples)


def train_variant(
    task: Task,
    ws: WarmStart,
    settings: StudySettings,
    variant: Variant,
    seed: int,
    train_rows: list[dict[str, Any]],
    workdir: Path,
    callbacks: list[Any],
    *,
    learning_rate: float,
    checkpoints: Any = None,
):
    """Train one run of `variant` from the warm start on the study's recipe: (model, history, seconds,
    the learning rate used: a `learning_rate` override of the variant wins over `learning_rate`);
    `checkpoints` as `train_policy` takes them."""
    from datasets import Dataset

    from oar_rl.study.training import train_policy

    kw = {"probe": settings.probe, "tau": settings.tau, "oar_beta": settings.oar_beta,
          "scored_tokens": settings.scored_tokens}  # fmt: skip
    kw.update(dict(variant.overrides))
    learning_rate = kw.pop("learning_rate", learning_rate)  # a method's own sweep choice
    # an arm may train on more rollouts per step (e.g. GRPO given another rule's compute)
    prompts_per_step = int(kw.pop("prompts_per_step", settings.prompts_per_step))
    num_generations = int(kw.pop("num_generations", settings.num_generations))
    if task.answer_pattern is not None:
        kw["answer_pattern"] = task.answer_pattern
    trainer_kwargs = task.trainer_kwargs() if task.trainer_kwargs else {}
    # every rule's ScoringContext.check: the task's own check (as held-out accuracy is scored)
    trainer_kwargs.setdefault("answer_check", task.check)
    model, history, seconds = train_policy(
        ws.path,
        Dataset.from_list(train_rows),
        task.reward,
        credit=variant.credit,
        seed=seed,
        steps=settings.steps,
        prompts_per_step=prompts_per_step,
        num_generations=num_generations,
        learning_rate=learning_rate,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        workdir=workdir,
        callbacks=callbacks,
        trainer_kwargs=trainer_kwargs or None,
        show_progress=False,
        micro_batch=settings.micro_batch,
        checkpoints=checkpoints,
        **kw,
    )
    return model, history, seconds, learning_rate


def train_and_evaluate(
    task: Task,
    ws: WarmStart,
    settings: StudySettings,
    variant: Variant,
    seed: int,
    train_rows: list[dict[str, Any]],
    eval_rows: list[dict[str, Any]],
    workdir: Path,
    progress: Progress | None,
    *,
    learning_rate: float,
    curve: bool = True,
    greedy: bool | None = None,
    checkpoint_dir: Path | None = None,
) -> dict[str, Any]:
    """Train one run and measure held-out accuracy (a curve every `eval_every` steps, or only at the end;
    greedy too when `greedy`, by default with the curve). With `settings.checkpoint_every`, the run is
    checkpointed into `checkpoint_dir` and resumed from there (`oar_rl.study.checkpoints`)."""
    import shutil

    from oar_rl.study.checkpoints import RunCheckpoints
    from oar_rl.study.training import HeldOutEval, StepProgress

    n_curve, curve_samples = settings.n_curve if curve else (len(eval_rows), settings.eval_samples)
    separate = curve and curve_separate(settings)

    def evaluate(model) -> float:
        return _accuracy(task, model, ws.tokenizer, eval_rows[:n_curve], settings, greedy=False,
                         samples=curve_samples)  # fmt: skip

    overrides = dict(variant.overrides)
    spg = int(overrides.get("steps_per_generation", 1))  # a trust region: optimizer steps per batch
    every = (settings.eval_every if curve else settings.steps) * spg
    heldout = HeldOutEval(evaluate, every, settings.steps * spg)
    ticks = StepProgress(progress.tick if progress is not None else lambda: None)
    callbacks: list[Any] = [heldout, ticks]
    checkpoints = None
    if settings.checkpoint_every is not None:
        if checkpoint_dir is None:
            raise ValueError("checkpoint_every is set, so the run needs a checkpoint_dir that outlives it")
        run = {"protocol": protocol_hash(settings.protocol()), "variant": variant.name,
               "learning_rate": learning_rate, "seed": seed}  # fmt: skip
        checkpoints = RunCheckpoints(checkpoint_dir, settings.checkpoint_every, [heldout, ticks], run)
    code = code_version()  # read when the process's first run starts: the code it imported
    t0 = time.perf_counter()
    model, history, seconds, learning_rate = train_variant(
        task, ws, settings, variant, seed, train_rows, workdir, callbacks, learning_rate=learning_rate,
        checkpoints=checkpoints,
    )  # fmt: skip
    per_problem: dict[str, list[int]] = {"greedy": [], "sampled": []}  # correct counts, problem order
    greedy = (
        _accuracy(task, model, ws.tokenizer, eval_rows, settings, greedy=True, per_row=per_problem["greedy"])
        if (curve if greedy is None else greedy)
        else None
    )
    final_step = max(heldout.curve) if heldout.curve else None
    final_sampled = heldout.curve[final_step] if final_step is not None else None
    t_final = time.perf_counter()
    if separate:  # the final accuracy on the whole test sample (the curve used a smaller one)
        final_sampled = _accuracy(
            task, model, ws.tokenizer, eval_rows, settings, greedy=False, per_row=per_problem["sampled"]
        )
    final_seconds = time.perf_counter() - t_final
    shutil.rmtree(workdir, ignore_errors=True)
    resumed = {"resumed_at": checkpoints.resumed_at} if checkpoints and checkpoints.resumed_at else {}
    if checkpoint_dir is not None:  # the record is made: its checkpoints have served
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return {
        "variant": variant.name,
        "method": variant.method,
        "credit": variant.credit,
        "overrides": overrides,
        "seed": seed,
        "learning_rate": learning_rate,
        "curve": {str(k): v for k, v in sorted(heldout.curve.items())},
        "final": {
            "sampled": final_sampled,
            "greedy": greedy,
            "step": final_step,
            "samples": len(eval_rows) * settings.eval_samples,
            **({"per_problem": per_problem} if per_problem["sampled"] else {}),
        },
        "curve_samples": n_curve * curve_samples,
        "train_seconds": seconds - heldout.seconds,
        "eval_seconds": heldout.seconds + final_seconds,
        "wall_seconds": time.perf_counter() - t0,
        "machine": machine_info(),  # where it ran (not protocol: oar_rl.machine says why it matters)
        "code": code,  # the commit that ran (not protocol either: oar_rl.study.provenance)
        **resumed,  # the steps it resumed at, when a process stopped mid-run (oar_rl.study.checkpoints)
        "history": history,
    }


def tune_learning_rate(
    task: Task, ws: WarmStart, settings: StudySettings, out: Path, progress: Progress, work: Path
) -> dict[str, Any]:
    """The learning-rate sweep on the validation split, for every method in scope with the same grid,
    seeds and budget (resumable; several processes may share `out`); returns the lr_tuning record."""
    import statistics

    from oar_rl.study.checkpoints import run_folder

    protocol = settings.tuning_protocol()
    modules = settings.module_records()
    store = RunStore(out / "lr", protocol, modules)
    store.check_all()
    rows_train = task.prompts("train", settings.n_train_prompts)
    rows_val = task.prompts("validation", settings.validation_problems)
    seeds = [TUNE_SEED_BASE + i for i in range(settings.tune_seeds)]
    tolerance = settings.greedy_tolerance  # greedy joins the choice (oar_rl.study.lr_choice)
    warm_greedy = None
    if tolerance is not None:  # the warm start's greedy accuracy on the same validation problems
        warm = _read_json(out / "lr_warm_start.json")
        if warm is None or (warm.get("protocol"), warm.get("recipe_hash")) != (protocol, ws.recipe_hash):
            phase(f"the warm start's greedy accuracy on {len(rows_val)} validation problems")
            acc = _accuracy(task, ws.model, ws.tokenizer, rows_val, settings, greedy=True)
            warm = {"protocol": protocol, "recipe_hash": ws.recipe_hash, "greedy": acc}
            _write_json(out / "lr_warm_start.json", warm)
        warm_greedy = warm["greedy"]
    plan = [(m, lr, seed) for m in settings.method_list for lr in settings.lr_grid for seed in seeds]

    def train(item: tuple[str, float, int]) -> dict[str, Any]:
        method, lr, seed = item
        name = f"{method}-lr{lr:g}"
        progress.describe(f"lr sweep {method} {lr:g} seed {seed}")
        rec = train_and_evaluate(
            task, ws, settings, Variant(name, method), seed, rows_train, rows_val, work / name / str(seed),
            progress, learning_rate=lr, curve=False, greedy=tolerance is not None,
            checkpoint_dir=run_folder(store.root, store.filename(name, seed)),
        )  # fmt: skip
        progress.write(
            f"lr sweep {method} {lr:g} seed {seed}: validation accuracy {rec['final']['sampled']:.3f}"
        )
        return rec

    items = [(f"{m}-lr{lr:g}", seed, (m, lr, seed)) for m, lr, seed in plan]
    done = run_claimed(store, items, train, progress, settings.steps)
    per_method: dict[str, dict[str, Any]] = {}
    chosen: dict[str, float] = {}
    for method in settings.method_list:
        results = {}
        for lr in settings.lr_grid:
            finals = [done[f"{method}-lr{lr:g}/seed{seed}"]["final"] for seed in seeds]
            accs = [f["sampled"] for f in finals]
            results[f"{lr:g}"] = {"learning_rate": lr, "seeds": seeds, "accuracy": accs,
                                  "mean": statistics.fmean(accs)}  # fmt: skip
            if tolerance is not None:
                greedy = [f["greedy"] for f in finals]
                results[f"{lr:g}"].update(greedy=greedy, greedy_mean=statistics.fmean(greedy))
        try:  # every sweep run is stored: nothing is lost when no rate qualifies
            chosen[method] = choose_rate(results, warm_greedy=warm_greedy, greedy_tolerance=tolerance)
        except NoRateQualifies as e:
            raise StudyError(f"{method}: {e}") from None
        per_method[method] = results
    grid = sorted(settings.lr_grid)
    at_edge = sorted(m for m, lr in chosen.items() if len(grid) > 1 and lr in (grid[0], grid[-1]))
    if at_edge:
        progress.write(
            f"WARNING: the learning rate chosen for {', '.join(at_edge)} is at an edge of the grid {grid}: "
            "the optimum is not bracketed; widen --lr-grid"
        )
    record = {
        "protocol": protocol,
        "protocol_hash": protocol_hash(protocol),
        "chosen": chosen.get("grpo", chosen[settings.method_list[0]]),
        "chosen_per_method": chosen,
        "at_edge": at_edge,
        "rule": (
            f"every method trained {settings.steps} steps from the warm start at each learning rate of the "
            f"grid, seeds {seeds} (disjoint from the study's), Adam, constant schedule; chosen per method: "
            f"the highest mean accuracy on {settings.validation_problems} validation problems "
            f"({settings.eval_samples} sample(s) each at T={settings.temperature:g}; the validation split is "
            "disjoint from the test split), ties to the smaller rate"
            + greedy_clause(warm_greedy, tolerance)
            + ". Then frozen: the main table trains each method at its own choice, and a second group "
            "trains every method at GRPO's."
        ),
        **({"warm_start_greedy": warm_greedy} if tolerance is not None else {}),
        "grid": list(settings.lr_grid),
        "results": per_method,
    }
    swept_modules = {m: modules[m] for m in settings.method_list if modules.get(m) is not None}
    if swept_modules:  # the code each user rule was swept with (`method_lrs` checks it)
        record["credit_modules"] = swept_modules
    _write_json(out / "lr_tuning.json", record)
    return record
