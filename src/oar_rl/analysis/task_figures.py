"""`oar-rl task-figures`: the figures that say what regime a word-problem task's warm start is in.

One command prints (and writes as JSON) every figure the testbed pages quote and issue 33's requirements
for the long-chain regime name, measured on the warm start's own samples of the task's test split:

- the data: events per problem, distractors per problem, mean reasoning tokens of the teacher's
  solutions and of the policy's samples;
- accuracy at T = 1 (``--samples`` per problem) and greedy;
- the roles: pivot fraction, mean entropy by role (`oar_rl.roles.role_statistics`);
- where the counterfactual oracle's pivots lie (`oar_rl.analysis.oracle.counterfactual_oracle`, which
  re-decodes greedily after each substituted reasoning token): the share of pivots outside the last
  reasoning step, pooled over ``--oracle-rows`` sampled trajectories, and the share of trajectories with
  at least one pivot outside it. The *last reasoning step* starts at the sentence holding the last
  equation of the reasoning (``a+b=c``) and runs to the answer; a token is outside it when its first
  character lies before that sentence. If the pivots were all in the last step, "weight later tokens"
  would be the right credit rule by construction.

The requirements of the long regime (issue 33) are checked and printed beside the figures (`REQUIREMENTS`);
the GRPO gain and the sharpness check are separate runs (`oar-rl study`, `python -m experiments.sharpness`).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_EQUATION = re.compile(r"\d+[+\-*]\d+=\d+")

REQUIREMENTS: dict[str, tuple[str, float, float]] = {
    # figure: (what, low, high) with low <= value <= high
    "mean_reasoning_tokens": ("mean reasoning tokens (policy samples)", 150, float("inf")),
    "min_events": ("events per problem, minimum", 5, float("inf")),
    "pivots_outside_last_step": ("oracle pivots outside the last reasoning step", 0.40, 1.0),
    "greedy_accuracy": ("greedy accuracy", 0.0, 0.8999),
    "sampled_accuracy": ("sampled accuracy at T = 1", 0.20, 0.45),
}
"""Issue 33's requirements for the long regime (checked when the task is `wordproblems-long`)."""


def last_step_start(text: str) -> int | None:
    """Character offset where the last reasoning step of `text` starts (None: no equation, no answer).

    The reasoning is the text before ``<answer>``; its last step is the sentence holding its last
    equation (from the character after the previous ``". "``), up to the answer."""
    end = text.find("<answer>")
    reasoning = text if end < 0 else text[:end]
    found = list(_EQUATION.finditer(reasoning))
    if end < 0 or not found:
        return None
    cut = reasoning.rfind(". ", 0, found[-1].start())
    return 0 if cut < 0 else cut + 2


def token_starts(tokenizer: Any, ids: list[int]) -> list[int]:
    """The character offset of each token's first character in ``decode(ids)`` (decoding prefixes, so
    it holds for any tokenizer whose decode of a prefix is a prefix of the decode)."""
    return [len(tokenizer.decode(ids[:i], skip_special_tokens=True)) for i in range(len(ids))]


def oracle_positions(
    model: Any, tokenizer: Any, prompt_ids: Any, completion_ids: Any, check: Any, max_new_tokens: int
) -> dict[str, Any] | None:
    """The oracle's pivots of one trajectory among its reasoning tokens, split at the last step.

    Returns None for a trajectory without a closed answer or an equation (not counted)."""
    from oar_rl.analysis.oracle import counterfactual_oracle

    ids = [int(i) for i in completion_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cut = last_step_start(text)
    if cut is None:
        return None
    starts = token_starts(tokenizer, ids)
    answer_at = text.find("<answer>")
    reasoning = [i for i, s in enumerate(starts) if s < answer_at]
    labels = counterfactual_oracle(
        model,
        tokenizer,
        prompt_ids,
        completion_ids,
        check,
        max_new_tokens=max_new_tokens,
        positions=reasoning,
    )
    pivots = [i for i in reasoning if bool(labels[i])]
    outside = [i for i in pivots if starts[i] < cut]
    return {"reasoning_tokens": len(reasoning), "pivots": len(pivots), "outside": len(outside)}


def measure(
    task_name: str,
    *,
    model_dir: str | None = None,
    problems: int = 200,
    samples: int = 4,
    oracle_rows: int = 40,
    seed: int = 0,
    progress: bool = True,
    cache_dir: str | None = None,
) -> dict[str, Any]:
    """Every figure of the module docstring for `task_name` (a word-problem task)."""
    import torch

    from oar_rl.data.wordproblems import SPLITS_BY_TASK, label_roles, split_problems
    from oar_rl.roles import role_statistics
    from oar_rl.sampling import sample_ids
    from oar_rl.tasks import get_task

    if task_name not in SPLITS_BY_TASK:
        raise ValueError(f"task-figures measures word-problem tasks; valid: {', '.join(SPLITS_BY_TASK)}")
    if problems < 1 or samples < 1 or oracle_rows < 0:
        raise ValueError(
            f"need problems >= 1, samples >= 1, oracle_rows >= 0; got {problems}, {samples}, {oracle_rows}"
        )
    task = get_task(task_name)
    if model_dir is None:
        ws = task.load_warm_start("default", cache_dir)
        model, tok, recipe_hash = ws.model, ws.tokenizer, ws.recipe_hash
    else:
        from oar_rl.tiny import load_model_dir

        model, tok = load_model_dir(Path(model_dir))
        recipe_hash = _recipe_hash(Path(model_dir))
    t0 = time.perf_counter()
    probs = split_problems("eval", problems, task_name)
    prompts = [p.prompt for p in probs]
    budget = task.max_completion_length

    def say(msg: str) -> None:
        if progress:
            print(f"  [{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    events = [len(p.steps) - sum(op == "*" for _, op, _, _ in p.steps) for p in probs]
    distractors = [p.prompt.count(".") - 1 - e for p, e in zip(probs, events, strict=True)]
    teacher_tokens = [
        len(tok(p.solution[: p.solution.index("<answer>")], add_special_tokens=False)["input_ids"])
        for p in probs
    ]
    say("greedy decoding")
    greedy = sample_ids(model, tok, prompts, temperature=0.0, max_new_tokens=budget, seed=seed)
    greedy_ok = [
        task.check(tok.decode(c, skip_special_tokens=True), str(p.answer))
        for (_, c), p in zip(greedy, probs, strict=True)
    ]
    say("sampling at T = 1")
    sampled = sample_ids(model, tok, prompts * samples, temperature=1.0, max_new_tokens=budget, seed=seed + 1)
    answers = [str(p.answer) for p in probs] * samples
    sampled_ok = [
        task.check(tok.decode(c, skip_special_tokens=True), a)
        for (_, c), a in zip(sampled, answers, strict=True)
    ]
    say("role statistics")
    labeller = task.label_roles
    roles = (
        role_statistics(
            model,
            tok,
            prompts,
            lambda text: label_roles(text),
            max_new_tokens=budget,
            seed=seed + 2,
        )
        if labeller is not None
        else None
    )
    say(f"oracle on {oracle_rows} sampled trajectories")
    rows = []
    torch.manual_seed(seed)
    for i, ((p_ids, c_ids), a) in enumerate(zip(sampled[:oracle_rows], answers, strict=False)):
        r = oracle_positions(model, tok, p_ids, c_ids, lambda text, a=a: task.check(text, a), budget)
        if r is not None:
            rows.append({**r, "correct": bool(sampled_ok[i])})
    pivots = sum(r["pivots"] for r in rows)
    outside = sum(r["outside"] for r in rows)
    with_pivots = [r for r in rows if r["pivots"]]
    figures = {
        "task": task_name,
        "recipe_hash": recipe_hash,
        "problems": problems,
        "samples_per_problem": samples,
        "min_events": min(events),
        "mean_events": statistics.mean(events),
        "mean_distractors": statistics.mean(distractors),
        "teacher_mean_reasoning_tokens": statistics.mean(teacher_tokens),
        "mean_reasoning_tokens": roles["mean_reasoning_tokens"] if roles else None,
        "greedy_accuracy": sum(greedy_ok) / len(greedy_ok),
        "sampled_accuracy": sum(sampled_ok) / len(sampled_ok),
        "pivot_fraction": roles["pivot_fraction"] if roles else None,
        "entropy_by_role": roles["entropy_by_role"] if roles else None,
        "unlabelled": roles["unlabelled"] if roles else None,
        "oracle_rows_tried": min(oracle_rows, len(sampled)),
        "oracle_rows": len(rows),
        "oracle_rows_with_pivots": len(with_pivots),
        "oracle_pivots": pivots,
        "pivots_outside_last_step": outside / pivots if pivots else None,
        "rows_with_a_pivot_outside": (
            sum(r["outside"] > 0 for r in with_pivots) / len(with_pivots) if with_pivots else None
        ),
        "oracle_rows_detail": rows,
        "seconds": time.perf_counter() - t0,
    }
    if task_name == "wordproblems-long":
        figures["requirements"] = check_requirements(figures)
    return figures


def _recipe_hash(model_dir: Path) -> str:
    """The recipe hash of a saved warm start (as `oar_rl.tiny.Recipe.hash` computes it), or "unknown"."""
    import hashlib

    from oar_rl.tiny import RECIPE_FILE

    path = model_dir / RECIPE_FILE
    if not path.is_file():
        return "unknown (no recipe file)"
    blob = json.dumps(json.loads(path.read_text()), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_requirements(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{figure: {value, low, high, met}} for each of `REQUIREMENTS` (a missing value is not met)."""
    out = {}
    for key, (what, low, high) in REQUIREMENTS.items():
        value = figures.get(key)
        out[key] = {
            "what": what,
            "value": value,
            "low": low,
            "high": high,
            "met": value is not None and low <= value <= high,
        }
    return out


def format_table(figures: dict[str, Any]) -> str:
    """The figures as a Markdown table (what the testbed page shows)."""
    ent = figures.get("entropy_by_role") or {}
    lines = [
        f"Task `{figures['task']}`, warm start `{figures['recipe_hash']}`: "
        f"{figures['problems']} test problems, "
        f"{figures['samples_per_problem']} samples each at T = 1; oracle on {_oracle_rows(figures)}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| events per problem (min / mean) | {figures['min_events']} / {figures['mean_events']:.2f} |",
        f"| distractors per problem (mean) | {figures['mean_distractors']:.2f} |",
        "| reasoning tokens: teacher / policy samples (mean) | "
        f"{figures['teacher_mean_reasoning_tokens']:.1f} / "
        f"{_num(figures['mean_reasoning_tokens'], '.1f')} |",
        f"| accuracy, sampled at T = 1 | {figures['sampled_accuracy']:.1%} |",
        f"| accuracy, greedy | {figures['greedy_accuracy']:.1%} |",
        f"| pivot fraction of reasoning tokens | {_num(figures['pivot_fraction'], '.3f')} |",
        "| entropy by role (nats/token): pivot / filler / answer | "
        + " / ".join(_num(ent.get(r), ".3f") for r in ("pivot", "filler", "answer"))
        + " |",
        "| oracle pivots outside the last reasoning step | "
        f"{_num(figures['pivots_outside_last_step'], '.1%')} "
        f"of {figures['oracle_pivots']} |",
        "| trajectories with a pivot outside the last step | "
        f"{_num(figures['rows_with_a_pivot_outside'], '.1%')} "
        f"of {figures['oracle_rows_with_pivots']} with pivots |",
    ]
    req = figures.get("requirements")
    if req:
        lines += ["", "| requirement (issue 33) | range | value | met |", "|---|---|---|---|"]
        for r in req.values():
            lines.append(
                f"| {r['what']} | [{r['low']}, {r['high']}] | {_num(r['value'], '.3f')} | "
                f"{'yes' if r['met'] else '**no**'} |"
            )
    return "\n".join(lines)


def _num(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def _oracle_rows(figures: dict[str, Any]) -> str:
    """ "the 30 of 40 sampled trajectories it could label" ("30 of the samples" in files made before the
    tried count was recorded)."""
    tried = figures.get("oracle_rows_tried")
    if tried is None:
        return f"{figures['oracle_rows']} of the samples"
    return (
        f"the {figures['oracle_rows']} of {tried} sampled trajectories it could label "
        "(the others close no answer or have no equation)"
    )


def build_parser() -> argparse.ArgumentParser:
    from oar_rl.argparsing import add, new_parser
    from oar_rl.options import shared_parser

    out = {"help": "directory for figures.json and figures.md"}
    shared = shared_parser("seed", "threads", "cache-dir", "out", out=out)
    p = new_parser("oar-rl task-figures", __doc__.split("\n\n")[0], parents=[shared])
    add(p, "--task", default="wordproblems-long", help="a word-problem task")
    add(p, "--model", default=None, help="a saved model directory of the task (default: its warm start)")
    add(p, "--problems", type=int, default=200, help="test problems")
    add(p, "--samples", type=int, default=4, help="samples per problem at T = 1")
    add(p, "--oracle-rows", type=int, default=40, help="sampled trajectories the oracle labels")
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit 0: requirements met (or none); 1: a requirement not met; 2: bad input (named)."""
    from oar_rl.io import ensure_writable_dir, write_text_atomic

    args = build_parser().parse_args(argv)
    try:
        for flag, value in (("--problems", args.problems), ("--samples", args.samples),
                            ("--oracle-rows", args.oracle_rows)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{flag} must be >= 1, got {value}")
        if args.model is not None and not Path(args.model).is_dir():
            raise ValueError(f"--model {args.model!r}: no such directory (a saved model of the task)")
        from oar_rl.tasks import get_task

        get_task(args.task)  # an unknown task, named with the valid ones
        out = ensure_writable_dir(args.out) if args.out else None  # before the measurement, not after
    except (ValueError, OSError) as exc:
        print(f"oar-rl task-figures: {exc}", file=sys.stderr)
        return 2
    from oar_rl.options import apply_threads

    apply_threads(args.threads)
    figures = measure(
        args.task,
        model_dir=args.model,
        cache_dir=args.cache_dir,
        problems=args.problems,
        samples=args.samples,
        oracle_rows=args.oracle_rows,
        seed=args.seed,
    )
    table = format_table(figures)
    print(table)
    if out is not None:
        write_text_atomic(out / "figures.json", json.dumps(figures, indent=1, sort_keys=True) + "\n")
        write_text_atomic(out / "figures.md", table + "\n")
    req = figures.get("requirements")
    return 0 if not req or all(r["met"] for r in req.values()) else 1
