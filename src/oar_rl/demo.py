"""`oar-rl demo`: GRPO vs OAR-G vs OAR-P on the embedded arithmetic task, on a laptop CPU.

Builds (or loads from the cache) the warm-started tiny model (`oar_rl.tiny.load_default_model`), then
for every seed and method trains with `OARTrainer` from the same warm start, on the same prompts in the
same order (TRL's sampler is seeded by `seed`, which is the same for every method of one seed), with the
same budget. Each run is evaluated on the held-out split before and after training: accuracy of one
sample per problem at temperature 1.0 (averaged over `eval_samples` samples) and greedy accuracy.

Output in `--out`: `summary.json` (rewritten atomically after every finished run, `complete: false`
until the end), `reward.png`, `entropy.png`, `ess_ratio.png`, `top10_mass.png` and a self-contained
`report.html` with a token-importance heatmap of one trace.
The settings, presets and command line are in :mod:`oar_rl.demo_config`.

Resuming: `summary.json` records a hash of the whole configuration (settings + warm-start recipe). A rerun
with the same configuration skips the finished runs; with a different one it starts clean (the old
results are discarded, never mixed). `--fresh` always starts clean.

Departures from the paper's setup (§4.1), all for CPU budget: a tiny char-level model instead of
Qwen2.5; G and the batch are small; the learning rate is 5e-5 rather than 1e-6 (which does not move a
model this small in tens of steps); the reward is the exact integer checker of `oar_rl.data.arithmetic`
rather than math-verify (answers are plain integers; the checker is exact and fast). OAR-G and OAR-P
both use the AS-Mean probe (the paper recommends LT-Logits for OAR-P): every completion here ends in
the fixed text "</answer>" + EOS, so the LT-Logits distribution (what follows the last token) is moved
almost only by the last few tokens -- measured on the warm start, LT-Logits gives ~0 normalised
importance to every token but the final ">", which is no credit assignment at all. AS-Mean asks how
each token before the answer moves the model's prediction of the answer digits, which is the causal
structure the task is built on.

Tuning notes (GRPO from the default warm start, held-out accuracy sampled at T=1, 300 problems x 4
samples): with Adam, lr 1e-3 collapses accuracy to ~0 within 4 steps and lr 2e-4 for 30 steps lowers it
(0.50 -> 0.44); policy entropy rises as it does (0.098 -> 0.118 at lr 3e-4), so the likely cause is
the negative-advantage samples spreading probability mass faster than the positive ones sharpen it;
SGD (lr 1.0) collapses too, and lr 7e-5 is already neutral. At lr 5e-5 and 40 steps, 8 prompts x 8
completions per step gained +1.5..+1.8 points (2 seeds), 4 x 16 gained -2.0..+2.6, 16 x 8 gained
+4.2..+4.5 (greedy +6.3), so the default is 16 x 8; 60 steps of 8 x 8 gained less than 40. The gains
are a few points: expect the ordering of methods to vary with the seed at this budget.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from oar_rl.demo_config import METHODS, SUMMARY_FORMAT, DemoSettings, parse_args, settings_from_args
from oar_rl.io import ensure_writable_dir, write_text_atomic


def _phase(msg: str) -> None:
    print(f"[oar-rl demo {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def evaluate(model, tokenizer, settings: DemoSettings, problems) -> dict[str, float]:
    """Held-out accuracy: mean over `eval_samples` samples at the settings' temperature, and greedy."""
    from oar_rl.sampling import accuracy

    prompts = [p.prompt for p in problems]
    answers = [str(p.answer) for p in problems]
    common = {"max_new_tokens": settings.max_completion_length, "seed": settings.eval_seed, "progress": True}
    sampled = accuracy(
        model,
        tokenizer,
        prompts,
        answers,
        temperature=settings.temperature,
        samples=settings.eval_samples,
        **common,
    )
    greedy = accuracy(model, tokenizer, prompts, answers, temperature=0.0, **common)
    return {"sampled": sampled, "greedy": greedy}


def train_one(
    method: str,
    seed: int,
    settings: DemoSettings,
    model_path: Path,
    workdir: Path,
    *,
    report_to: str | list[str] = "none",
    log_dir: Path | None = None,
    verbose: bool = False,
) -> tuple[Any, list[dict[str, Any]], float]:
    """Train one (method, seed) run from the warm start; returns (trained model, log history, seconds).

    The terminal shows a progress bar (TRL's log dicts with `verbose`); with `log_dir` every log also
    goes to `log_dir/logs.jsonl` and TensorBoard (if in `report_to`) writes under `log_dir/tensorboard`.
    """
    from oar_rl.answer_span import ANSWER_TAG_PATTERN
    from oar_rl.study.training import train_policy
    from oar_rl.tasks import get_task

    task = get_task(settings.task)
    return train_policy(
        model_path,
        task.load("train", settings.prompts_per_step * settings.steps * 2),
        task.reward,  # tasks.exact_reward for both embedded tasks
        credit=METHODS[method],
        seed=seed,
        steps=settings.steps,
        prompts_per_step=settings.prompts_per_step,
        num_generations=settings.num_generations,
        learning_rate=settings.learning_rate,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        workdir=workdir,
        probe=settings.probe,
        tau=settings.tau,
        oar_beta=settings.oar_beta,
        answer_pattern=ANSWER_TAG_PATTERN,  # the tasks' format; pinned since the default became 'rewarded'
        report_to=report_to,
        run_name=f"oar-rl-demo-{method}-seed{seed}",
        log_dir=log_dir,
        verbose=verbose,
        desc=method,
        trainer_kwargs={"token_roles": task.token_roles} if task.token_roles is not None else None,
    )


def token_heatmap(model, tokenizer, problems, settings: DemoSettings) -> str | None:
    """Heatmap HTML of OAR-P and OAR-G importance on the warm start's greedy solution of one problem.

    Picks the first problem the warm start solves greedily (else the first problem).
    """
    import torch

    from oar_rl.analysis.heatmap import heatmap_html
    from oar_rl.answer_span import ANSWER_TAG_PATTERN, answer_span_mask, scored_positions
    from oar_rl.data.arithmetic import check
    from oar_rl.importance import gradient_importance, perturbation_importance
    from oar_rl.reshape import normalize_importance
    from oar_rl.sampling import generate_completions

    candidates = problems[:16]
    comps = generate_completions(
        model,
        tokenizer,
        [p.prompt for p in candidates],
        temperature=0.0,
        max_new_tokens=settings.max_completion_length,
    )
    pick = next((i for i, c in enumerate(comps) if check(c, candidates[i].answer)), 0)
    prompt, completion = candidates[pick].prompt, comps[pick]
    if not completion:
        return None
    p_ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])  # (1, P)
    c_ids = torch.tensor([tokenizer(completion, add_special_tokens=False)["input_ids"]])  # (1, C)
    p_mask, c_mask = torch.ones_like(p_ids), torch.ones_like(c_ids)
    tokens = [tokenizer.decode([int(t)]) for t in c_ids[0]]
    kw: dict[str, Any] = {"probe": settings.probe}
    scored = c_mask.bool()  # (1, C)
    if settings.probe != "lt-logits":
        kw["answer_mask"] = answer_span_mask(c_ids, c_mask, tokenizer, pattern=ANSWER_TAG_PATTERN)  # (1, C)
        if kw["answer_mask"].any():
            scored = scored_positions(c_mask, kw["answer_mask"]).bool()

    def row(raw: torch.Tensor) -> list[float | None]:
        norm = normalize_importance(raw, scored.float())[0]  # (C,)
        return [float(v) if s else None for v, s in zip(norm.tolist(), scored[0].tolist(), strict=True)]

    rows = [("OAR-P", tokens, row(perturbation_importance(model, p_ids, p_mask, c_ids, c_mask, **kw)))]
    gen = torch.Generator().manual_seed(0)
    g_raw = gradient_importance(model, p_ids, p_mask, c_ids, c_mask, generator=gen, **kw)  # (1, C)
    rows.append(("OAR-G", tokens, row(g_raw)))
    return heatmap_html(f"{prompt}   (probe: {settings.probe})", rows)


class Summary:
    """`summary.json` in memory, persisted atomically on every `save()`."""

    def __init__(self, path: Path, settings: DemoSettings, fresh: bool) -> None:
        self.path = path
        self.settings = settings
        chash = settings.config_hash()
        old: dict[str, Any] | None = None
        if path.exists() and not fresh:
            try:
                old = json.loads(path.read_text())
            except (OSError, ValueError):
                _phase(f"{path} is unreadable; starting clean")
        if old is not None and old.get("config_hash") != chash:
            _phase(f"{path} holds results of a different configuration; starting clean")
            old = None
        self.data: dict[str, Any] = {
            "format": SUMMARY_FORMAT,
            "complete": False,
            "config_hash": chash,
            "config": settings.to_dict(),
            "warm_start": (old or {}).get("warm_start", {}),
            "runs": (old or {}).get("runs", {}),
        }
        if old and "task" in old:
            self.data["task"] = old["task"]
        if old:
            _phase(f"resuming: {len(self.data['runs'])} finished run(s) in {path}")

    @staticmethod
    def key(method: str, seed: int) -> str:
        return f"{method}/seed{seed}"

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps(self.data, indent=1, sort_keys=True))


def run_demo(
    settings: DemoSettings,
    out: Path,
    *,
    cache_dir: str | None = None,
    fresh: bool = False,
    report_to: str | list[str] = "none",
    verbose: bool = False,
) -> dict:
    """Run the demo end to end; returns the final summary dict. See the module docstring."""
    from oar_rl import tiny
    from oar_rl.analysis.plots import CURVES, plot_curves
    from oar_rl.analysis.report import write_report
    from oar_rl.tasks import get_task

    t_start = time.perf_counter()
    ensure_writable_dir(out)
    summary = Summary(out / "summary.json", settings, fresh)
    summary.save()
    # The report and plots are regenerated from summary.json at the end; remove old ones now so that an
    # interrupted or reconfigured run never leaves a report that disagrees with summary.json.
    for stale in [out / "report.html", *(out / f"{key.split('/')[-1]}.png" for key, _, _ in CURVES)]:
        stale.unlink(missing_ok=True)
    recipe = settings.recipe_obj()
    _phase(f"warm start: recipe {recipe.hash()} (built on first use, then cached)")
    task = get_task(settings.task)
    if settings.task == "arithmetic":
        model, tokenizer, model_path = tiny.load_default_model(recipe, cache_dir=cache_dir, progress=True)
    else:
        model, tokenizer, model_path = task.load_model()
    problems = task.split_problems(settings.eval_split, settings.eval_problems)
    ws = summary.data["warm_start"]
    if ws.get("recipe_hash") != recipe.hash() or "accuracy" not in ws:
        _phase(f"evaluating the warm start on {len(problems)} held-out '{settings.eval_split}' problems")
        summary.data["warm_start"] = ws = {
            "recipe_hash": recipe.hash(),
            "recipe": recipe.to_dict(),
            "accuracy": evaluate(model, tokenizer, settings, problems),
        }
        summary.save()
    if task.token_roles is not None and "task" not in summary.data:
        from oar_rl.roles import role_statistics

        _phase("measuring token roles and policy entropy on the warm start's own samples")
        summary.data["task"] = role_statistics(
            model,
            tokenizer,
            [p.prompt for p in problems],
            task.token_roles,
            temperature=settings.temperature,
            max_new_tokens=settings.max_completion_length,
            seed=settings.eval_seed,
        )
        summary.save()
    _phase(
        f"warm start accuracy: sampled {ws['accuracy']['sampled']:.3f}, greedy {ws['accuracy']['greedy']:.3f}"
    )
    runs = summary.data["runs"]
    todo = [(seed, m) for seed in range(settings.seeds) for m in settings.methods]
    with tempfile.TemporaryDirectory(prefix="oar-rl-demo-") as work:
        for i, (seed, method) in enumerate(todo, 1):
            key = Summary.key(method, seed)
            if key in runs:
                _phase(f"[{i}/{len(todo)}] {key}: already done, skipping")
                continue
            _phase(f"[{i}/{len(todo)}] {key}: training {settings.steps} steps (credit={METHODS[method]})")
            trained, history, seconds = train_one(
                method,
                seed,
                settings,
                model_path,
                Path(work) / key,
                report_to=report_to,
                log_dir=out / "runs" / key.replace("/", "-"),
                verbose=verbose,
            )
            from oar_rl.console import summary as log_summary

            _phase(f"[{i}/{len(todo)}] {key}: {'; '.join(log_summary(history))}")
            _phase(f"[{i}/{len(todo)}] {key}: evaluating after {seconds:.0f} s of training")
            after = evaluate(trained, tokenizer, settings, problems)
            runs[key] = {
                "method": method,
                "seed": seed,
                "credit": METHODS[method],
                "before": ws["accuracy"],
                "after": after,
                "train_seconds": seconds,
                "history": history,
            }
            summary.save()
            _phase(
                f"[{i}/{len(todo)}] {key}: accuracy sampled {ws['accuracy']['sampled']:.3f} -> "
                f"{after['sampled']:.3f}, greedy {ws['accuracy']['greedy']:.3f} -> {after['greedy']:.3f}"
            )
            del trained
            shutil.rmtree(Path(work) / key, ignore_errors=True)
    _phase("plotting and writing the report")
    histories: dict[str, list] = {m: [] for m in settings.methods}
    for seed in range(settings.seeds):
        for m in settings.methods:
            histories[m].append(runs[Summary.key(m, seed)]["history"])
    plots = plot_curves(histories, out, smooth=5 if settings.steps >= 20 else 1)
    heatmap = None
    try:
        heatmap = token_heatmap(model, tokenizer, problems, settings)
    except Exception as e:  # the heatmap is an illustration: never lose the results over it
        _phase(f"token heatmap skipped: {e!r}")
    summary.data["complete"] = True
    summary.data["wall_seconds_this_invocation"] = time.perf_counter() - t_start
    summary.save()
    write_report(out / "report.html", summary.data, {k: str(v) for k, v in plots.items()}, heatmap)
    return summary.data


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        settings = settings_from_args(args)
        from oar_rl.console import check_trackers

        report_to = check_trackers(args.report_to) or "none"  # a list of names, as TRL takes it
        out = Path(args.out).expanduser()
        ensure_writable_dir(out)
    except ValueError as e:
        print(f"oar-rl demo: {e}", file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    _phase(
        f"methods {','.join(settings.methods)} x {settings.seeds} seed(s), {settings.steps} steps of "
        f"{settings.prompts_per_step}x{settings.num_generations} completions; output in {out}"
    )
    t0 = time.perf_counter()
    try:
        data = run_demo(
            settings,
            out,
            cache_dir=args.cache_dir,
            fresh=args.fresh,
            report_to=report_to,
            verbose=args.verbose,
        )
    except KeyboardInterrupt:
        _phase(
            f"interrupted: finished runs are in {out / 'summary.json'} (complete: false); rerun to continue"
        )
        return 130
    _phase(f"done in {time.perf_counter() - t0:.0f} s: {out / 'report.html'}")
    for key, run in sorted(data["runs"].items()):
        b, a = run["before"], run["after"]
        sampled = f"sampled {b['sampled']:.3f} -> {a['sampled']:.3f}"
        print(f"{key:<18} {sampled}   greedy {b['greedy']:.3f} -> {a['greedy']:.3f}")
    return 0
