"""first-error's search with and without reusing greedy runs, on a warm start's own rollouts.

For each sampling seed: `--prompts` train problems × `--samples` rollouts of the task's shipped warm start
at T = 1 (one screen step's batch: 16 × 8), the wrong ones searched twice, with
`first_error_positions(..., reuse_greedy=True)` and `False`. Reports per seed whether the located tokens
are identical (every row: its token or None), the rounds, continuations, reused cuts, generated tokens and
seconds of each. `--train-steps N` also trains first-error N steps on the long screen's recipe
(`experiments.credit_long.plan`, screen settings, seed `--train-seed`) with and without the reuse and
compares a sha256 of the weights and the per-step metrics. Writes OUT/compare.json (write, then rename).
The seconds are wall-clock on whatever else the machine runs; the counts and hashes are not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.first_error_reuse", description=__doc__.split("\n")[0]
    )
    p.add_argument("--task", default="wordproblems-long", help="task (default wordproblems-long)")
    p.add_argument("--seeds", default="11,12,13", help="sampling seeds, comma-separated (default 11,12,13)")
    p.add_argument("--prompts", type=int, default=16, help="train problems per seed (default 16)")
    p.add_argument("--samples", type=int, default=8, help="rollouts per problem (default 8)")
    p.add_argument("--out", default="results/first-error-reuse", help="output directory")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--train-steps", type=int, default=0, help="also train N steps each way (default 0)")
    p.add_argument("--train-seed", type=int, default=3001, help="the training check's seed (default 3001)")
    return p


def train_check(steps: int, seed: int, reuse: bool) -> dict:
    """first-error trained `steps` steps on the long screen's recipe (the study's own training path):
    weights' sha256 and per-step metrics."""
    import hashlib
    import tempfile
    from dataclasses import replace

    from oar_rl.study.config import Variant
    from oar_rl.study.runner import train_variant
    from oar_rl.study.screen import settings
    from oar_rl.study.screen_plan import load_plan
    from oar_rl.tasks import get_task

    plan = load_plan("experiments.credit_long.plan:CREDIT_LONG")
    task = get_task(plan.task)
    s = replace(settings("screen", plan), max_completion_length=task.max_completion_length, probe=task.probe,
                steps=steps)  # fmt: skip
    variant = Variant("first-error", "first-error", (("first_error_reuse_greedy", reuse),))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        model, history, _, _ = train_variant(
            task, task.load_warm_start("default", None), s, variant, seed,
            task.prompts("train", s.n_train_prompts), Path(work), [], learning_rate=s.learning_rate,
        )  # fmt: skip
    h = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().numpy().tobytes())
    keys = ("reward", "oar/ess_ratio", "oar/boosted_frac", "oar/pivot_recall@10", "oar/importance_seconds")
    return {"weights_sha256": h.hexdigest(), "seconds": round(time.perf_counter() - t0, 1),
            "steps": [{k: r[k] for k in keys if k in r} for r in history][:steps]}  # fmt: skip


def compare(task, ws, seed: int, prompts: int, samples: int) -> dict:
    """One seed's batch of the warm start `ws` on `task`, searched with and without the reuse."""
    import torch

    from oar_rl.analysis.blame import batch_of, sample_rollouts
    from oar_rl.data.wordproblems import split_problems
    from oar_rl.importance import first_error as fe
    from oar_rl.model_parts import eval_mode
    from oar_rl.probes import prepare_batch

    problems = split_problems("train", prompts, task.name)
    trajs = sample_rollouts(ws.model, ws.tokenizer, problems, samples, seed=seed,
                            max_new_tokens=task.max_completion_length)  # fmt: skip
    (p_ids, p_mask, c_ids, c_mask), answer, reasoning, _ = batch_of(
        trajs, ws.tokenizer, task.answer_pattern, "reasoning"
    )
    batch = prepare_batch(ws.model, p_ids, p_mask, c_ids, c_mask, answer, reasoning)
    rows = [i for i, t in enumerate(trajs) if not task.check(t.completion, t.answer)]
    rec: dict = {"seed": seed, "rollouts": len(trajs), "wrong": len(rows)}
    for reuse in (True, False):
        stats = fe.SearchStats()
        t0 = time.perf_counter()
        with torch.no_grad(), eval_mode(ws.model):
            found = fe.first_error_positions(
                ws.model, batch, tokenizer=ws.tokenizer, gold=[t.answer for t in trajs], check=task.check,
                rows=rows, max_new_tokens=task.max_completion_length, stats=stats, reuse_greedy=reuse,
            )  # fmt: skip
        rec["reuse" if reuse else "plain"] = {
            "seconds": round(time.perf_counter() - t0, 1), "rounds": stats.rounds,
            "continuations": stats.continuations, "reused": stats.reused, "tokens": stats.generated_tokens,
            "found": {str(k): v for k, v in found.items()},
        }  # fmt: skip
    rec["identical"] = rec["reuse"]["found"] == rec["plain"]["found"]
    rec["located"] = sum(v is not None for v in rec["plain"]["found"].values())
    return rec


def main(argv: list[str] | None = None) -> int:
    from oar_rl.io import ensure_writable_dir, write_text_atomic
    from oar_rl.machine import machine_info, machine_line
    from oar_rl.options import apply_threads
    from oar_rl.tasks import get_task

    a = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
        if not seeds or a.prompts < 1 or a.samples < 1:
            raise ValueError(f"need >= 1 seed, prompt and sample; got {a.seeds!r}, {a.prompts}, {a.samples}")
        out = ensure_writable_dir(a.out)
    except ValueError as exc:
        print(f"first_error_reuse: {exc}", file=sys.stderr)
        return 2
    apply_threads(a.threads)
    task = get_task(a.task)
    ws = task.load_warm_start("default", None)
    runs = []
    for seed in seeds:
        rec = compare(task, ws, seed, a.prompts, a.samples)
        r, p = rec["reuse"], rec["plain"]
        print(
            f"seed {seed}: {rec['wrong']} wrong rows, {rec['located']} located; identical "
            f"{rec['identical']}; continuations {p['continuations']} -> {r['continuations']} "
            f"({r['reused']} reused), tokens {p['tokens']} -> {r['tokens']}, "
            f"{p['seconds']:.0f} s -> {r['seconds']:.0f} s",
            flush=True,
        )
        runs.append(rec)
    train = {}
    if a.train_steps > 0:
        for reuse in (True, False):
            train["reuse" if reuse else "plain"] = train_check(a.train_steps, a.train_seed, reuse)
        same = train["reuse"]["weights_sha256"] == train["plain"]["weights_sha256"]
        train["identical_weights"] = same
        print(f"training check, {a.train_steps} steps, seed {a.train_seed}: identical weights {same}; "
              f"{train['plain']['seconds']:.0f} s -> {train['reuse']['seconds']:.0f} s")  # fmt: skip
    info = machine_info()
    args = " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": f"python -m experiments.first_error_reuse {args}", "settings": vars(a),
              "runs": runs, "train": train, "machine_info": info, "machine": machine_line(info)}  # fmt: skip
    write_text_atomic(Path(out) / "compare.json", json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}/compare.json")
    return 0 if all(r["identical"] for r in runs) and train.get("identical_weights", True) else 1
