"""`oar-rl bench`: what each credit mode costs per completion token, as a ratio to GRPO (paper §5.2).

Every method trains its own copy of the same policy (same weights, prompts and seed) through
`OARTrainer`, in a process of its own, as a real training run does (one trainer per process). The
methods' steps are *interleaved* in rounds whose order rotates: A B C, B C A, C A B, …, one optimizer
step each in turn (the parent process hands the turn to one worker at a time; the others wait idle), so
a load change on a shared machine, or a drift within rounds, hits every method alike. Per step it records

- the whole step's seconds per completion token (generation, rewards, importance, loss, update),
- generation alone (TRL's ``_generate``) per completion token,
- the update sweep alone: the step minus generation, the paper's Fig. 7 definition,
- the importance seconds (the credit assignment, inside the step), and peak memory of the method's own
  process above the step's starting level (CUDA allocator peak on a GPU, resident-set high-water mark on
  the CPU).

Ratios to GRPO are taken pair by pair (repeat r of a method over repeat r of ``none``), then the
median and min–max over repeats are reported. The first ``--warmup`` steps of each method are dropped.
``oar-p-full`` recomputes every perturbed copy from position 0 (no prefix reuse) and
``oar-p-serial`` also runs one copy per forward pass, the paper's "naive serial implementation".
The worker processes, the interleaving and the memory readings are in
:mod:`oar_rl.bench.steps`.

Generation parity check. Generation is the same code on the same weights for every credit mode, so its
median time per token should match GRPO's. The bench flags any mode whose median generation seconds
per token differ from GRPO's by more than 10% (bench.md, the console and ``generation_parity`` in
bench.json): its "step" figures then carry something other than the credit mode's cost, and the
update-sweep figures are the ones to use.

After the steps, a scorer-level part (:mod:`oar_rl.bench.scorers`, skip with
``--no-scorers``; ``--scorers-only`` skips the steps instead) times the importance functions on one batch
of the same shape, OAR-G's and OAR-P's compute floors, and recall of OAR-P's top-20% tokens. Shapes are
in :mod:`oar_rl.bench.shapes`.

Ratios are only meaningful within one run on one machine; the outputs name the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from oar_rl.argparsing import add, new_parser
from oar_rl.bench.parity import generation_parity, parity_lines
from oar_rl.bench.shapes import SHAPE_NAMES, WARM_STARTS
from oar_rl.bench.steps import METHOD_CONFIG, SEARCH_KEYS, BenchWorkerError, run_interleaved
from oar_rl.credit_names import registered, spelled, unknown_message
from oar_rl.io import ensure_writable_dir, write_text_atomic

DEFAULT_METHODS = "none,oar-g,oar-p,oar-gp"


def methods() -> tuple[str, ...]:
    """Every registered credit mode (read live: --credit-module rules count) and the variants above."""
    from oar_rl.credits import CREDITS

    return (*CREDITS, *METHOD_CONFIG)


def build_parser() -> argparse.ArgumentParser:
    """The `oar-rl bench` parser (the values are checked in `_parse`)."""
    from oar_rl.argparsing import add_renamed, add_renaming
    from oar_rl.credit_modules import add_flag
    from oar_rl.options import shared_parser

    out = {"default": "bench_out", "help": "directory for bench.json and bench.md"}
    shared = shared_parser("seed", "threads", "cache-dir", "out", out=out)
    p = new_parser("oar-rl bench", __doc__.split("\n\n")[0], parents=[shared])
    add(p, "--shape", default="embedded", choices=SHAPE_NAMES, help="model shape (see module doc)")
    add(
        p,
        "--model",
        default=None,
        help="--shape embedded / wordproblems(-long) only: a saved model directory instead of the warm start",
    )
    add_renaming(
        p,
        "--credits",
        "--methods",
        dest="methods",
        default=DEFAULT_METHODS,
        help=f"the training steps' credit rules, comma-separated, from: {', '.join(spelled(methods()))}, and "
        "the rules of --credit-module (the scorer part always times its whole table)",
    )
    add_flag(p)
    add(p, "--repeats", type=int, default=3, help="measured steps per method (interleaved)")
    add_renamed(
        p, "--steps", "--repeats", "measured steps per method; `oar-rl study --steps` is optimizer steps"
    )
    add(p, "--warmup", type=int, default=1, help="steps per method dropped from the figures")
    add_renaming(p, "--problems", "--prompts", dest="prompts", type=int, default=1, help="problems per step")
    add_renaming(p, "--samples", "--num-generations", dest="num_generations", type=int, default=4,
                 help="completions per problem (GRPO's group size G)")  # fmt: skip
    add(p, "--micro-batch", type=int, default=None,
        help="at most this many rows per forward/backward pass of the update, gradients accumulated over "
        "a step's rows as `oar-rl study` does (default: all of them in one pass)")  # fmt: skip
    add(p, "--prompt-len", type=int, default=32, help="prompt tokens (random shapes)")
    add(
        p,
        "--completion-len",
        type=int,
        default=None,
        help="completion tokens (random shapes: exact, default 256; warm starts: at most, default 96 for "
        "embedded, the task's completion budget for the word-problem shapes)",
    )
    add(
        p,
        "--probe",
        default="lt-logits",
        choices=("lt-logits", "as-mean", "as-joint"),
        help="outcome probe (not the other commands' as-mean: random shapes have no answer span, so an "
        "answer-span probe would fall back to lt-logits on every row)",
    )
    add(p, "--oar-gp-fraction", type=float, default=0.25, help="OAR-P share of oar-gp, in (0, 1]")
    add(p, "--copies", type=int, default=64, help="OAR-P perturbed copies per forward pass")
    scope = p.add_mutually_exclusive_group()
    add(scope, "--no-scorers", action="store_true", help="skip the scorer-level part (floors, recall)")
    add(
        scope,
        "--scorers-only",
        action="store_true",
        help="skip the training steps; scorer part only (its whole table: OAR-G, OAR-P, "
        "whole-copy OAR-P, OAR-GP and span, whatever --credits says)",
    )
    add(
        p,
        "--full-stride",
        type=int,
        default=1,
        help="scorer part: time whole-copy OAR-P on every k-th position and scale (flat cost per copy)",
    )
    add(
        p,
        "--span-tokens",
        type=int,
        default=16,
        help="scorer part: tokens per step of oar-p-span (the bench's batches are random tokens, with no "
        "sentences or lines to split at: fixed runs of this many tokens)",
    )
    add(
        p,
        "--scorer-repeats",
        type=int,
        default=1,
        help="timed rounds of the scorer-level part (OAR-P is slow)",
    )
    return p


def _parse(argv: list[str]) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    from oar_rl.credit_modules import load_credit_modules

    try:
        load_credit_modules(a.credit_module)  # before the methods are checked: their rules are methods
    except ValueError as exc:
        p.error(str(exc))
    chosen = [registered(m.strip()) for m in a.methods.split(",") if m.strip()]  # grpo: "none"
    valid = methods()
    unknown = [m for m in chosen if m not in valid]
    if unknown or not chosen:
        told = "; ".join(unknown_message("rule", m, valid) for m in unknown) or f"valid: {', '.join(valid)}"
        p.error(f"--credits: unknown rule(s) {unknown or a.methods!r}: {told}")
    if "none" not in chosen:
        p.error("--credits must include grpo (or its alias none: the GRPO reference the ratios divide by)")
    if len(set(chosen)) != len(chosen):
        p.error(f"--credits lists a rule twice: {a.methods!r}")
    if a.completion_len is None:
        a.completion_len = 96 if a.shape == "embedded" else 256
        if a.shape in WARM_STARTS and a.shape != "embedded":  # a word-problem warm start: its task's budget
            from oar_rl.tasks import get_task

            a.completion_len = get_task(WARM_STARTS[a.shape]).max_completion_length
    for name in (
        "repeats",
        "prompts",
        "completion_len",
        "prompt_len",
        "copies",
        "scorer_repeats",
        "full_stride",
        "span_tokens",
    ):
        if getattr(a, name) < 1:
            flag = "--problems" if name == "prompts" else f"--{name.replace('_', '-')}"
            p.error(f"{flag} must be >= 1, got {getattr(a, name)}")
    if a.num_generations < 2:
        p.error(f"--samples must be >= 2 (GRPO needs a group), got {a.num_generations}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    if a.micro_batch is not None and a.micro_batch < 1:
        p.error(f"--micro-batch must be >= 1, got {a.micro_batch}")
    if not 0.0 < a.oar_gp_fraction <= 1.0:
        p.error(f"--oar-gp-fraction must be in (0, 1], got {a.oar_gp_fraction}")
    if a.model is not None and a.shape not in WARM_STARTS:
        p.error(
            f"--model goes with --shape {', '.join(WARM_STARTS)} (the warm-start shapes; the others are "
            "random-initialised or a named pretrained model)"
        )
    a.methods = chosen
    return a


# ----------------------------------------------------------------------------------------------------
# figures


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(records: list[dict], methods: list[str], warmup: int) -> dict[str, dict]:
    """Per method: median [min–max] of s/token (step, generation, update), importance s, peak MiB, ratios."""
    by = {m: [r for r in records if r["method"] == m][warmup:] for m in methods}
    n = min(len(v) for v in by.values())
    if n == 0:
        raise RuntimeError(f"no measured steps (warmup={warmup} drops all of them)")
    out = {}
    for m in methods:
        rs = by[m][:n]
        tok = [max(r.get("tokens", 0.0), 1.0) for r in rs]
        spt = [r["step_seconds"] / t for r, t in zip(rs, tok, strict=True)]
        gen = [r.get("generate", 0.0) / t for r, t in zip(rs, tok, strict=True)]
        upd = [(r["step_seconds"] - r.get("generate", 0.0)) / t for r, t in zip(rs, tok, strict=True)]
        out[m] = {
            "steps": n,
            "tokens_per_step": _spread([r.get("tokens", 0.0) for r in rs]),
            "seconds_per_token": _spread(spt),
            "generate_seconds_per_token": _spread(gen),
            "update_seconds_per_token": _spread(upd),
            "importance_seconds": _spread([r.get("importance", 0.0) for r in rs]),
            "generate_seconds": _spread([r.get("generate", 0.0) for r in rs]),
            "peak_mib": _spread([r["peak_mib"] for r in rs])
            if all(r["peak_mib"] is not None for r in rs)
            else None,
            **{  # first-error's search per step: sequential generation rounds, continuations, tokens
                f"search_{key}": _spread([r[f"search_{key}"] for r in rs])
                for key in SEARCH_KEYS
                if all(f"search_{key}" in r for r in rs)
            },
            "_spt": spt,
            "_upd": upd,
        }
    for m in methods:
        out[m]["ratio_vs_grpo"] = _spread(
            [a / b for a, b in zip(out[m]["_spt"], out["none"]["_spt"], strict=True)]
        )
        out[m]["update_ratio_vs_grpo"] = _spread(
            [a / b for a, b in zip(out[m]["_upd"], out["none"]["_upd"], strict=True)]
        )
        base = out["none"]["generate_seconds_per_token"]["median"]
        mine = out[m]["generate_seconds_per_token"]["median"]
        out[m]["generation_ratio_vs_grpo"] = mine / base if base > 0 else None
    for m in methods:
        del out[m]["_spt"], out[m]["_upd"]
    return out


def _fmt(s: dict[str, float] | None, scale: float = 1.0, digits: int = 2) -> str:
    if s is None:
        return "n/a"
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f}–{s['max'] * scale:.{digits}f}]"


def table_lines(summary: dict[str, dict]) -> list[str]:
    lines = [
        "| method | ms/token, step | × GRPO, step | ms/token, generation | ms/token, update "
        "| × GRPO, update | importance s/step | peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, s in summary.items():
        lines.append(
            f"| {m} | {_fmt(s['seconds_per_token'], 1000)} | {_fmt(s['ratio_vs_grpo'])} "
            f"| {_fmt(s['generate_seconds_per_token'], 1000)} "
            f"| {_fmt(s['update_seconds_per_token'], 1000)} | {_fmt(s['update_ratio_vs_grpo'])} "
            f"| {_fmt(s['importance_seconds'])} | {_fmt(s['peak_mib'], 1, 0)} |"
        )
    return lines


def search_lines(summary: dict[str, dict]) -> list[str]:
    """first-error's search per measured step (methods that ran it): rounds of greedy generation, one
    after the other; continuations; cuts answered from a run already continued (`greedy_runs`); tokens
    generated (rows × positions computed: with `generate`, padding and finished rows included; the
    cached decode drops finished rows and counts the draft positions it verifies); the forwards of the
    continuations one after the other (prefill included); the seconds of the teacher-forced pass over the
    searched rollouts,
    of the continuations (with `generate`, prefill included) and of the checks; the importance seconds and
    the step as a ratio to GRPO's, both from the interleaved steps."""
    rows = {m: s for m, s in summary.items() if "search_rounds" in s}
    if not rows:
        return []
    lines = [
        "first-error's search per step (median [min–max]; k − 1 cut points per row per round):",
        "",
        "| method | rounds | continuations | reused cuts | generated tokens | forwards | pass s | decode s "
        "| check s | importance s/step | × GRPO, step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, s in rows.items():
        seconds = [  # absent from records made before issue 46
            (_fmt(s[f"search_{key}"], 1, 0) if key == "forwards" else _fmt(s[f"search_{key}"]))
            if f"search_{key}" in s
            else "–"
            for key in ("forwards", "pass_seconds", "decode_seconds", "check_seconds")
        ]
        lines.append(
            f"| {m} | {_fmt(s['search_rounds'], 1, 0)} | {_fmt(s['search_continuations'], 1, 0)} "
            f"| {_fmt(s['search_reused'], 1, 0)} "
            f"| {_fmt(s['search_generated_tokens'], 1, 0)} | {' | '.join(seconds)} "
            f"| {_fmt(s['importance_seconds'])} | {_fmt(s['ratio_vs_grpo'])} |"
        )
    return lines


def machine_info() -> dict[str, Any]:
    """`oar_rl.machine.machine_info` (CPU model and instruction set, libraries), plus the bench's keys."""
    import torch

    from oar_rl.machine import machine_info as where

    return {
        **where(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _run_scorers(shape, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from tqdm.auto import tqdm

    from oar_rl.bench.scorers import random_batch, run_scorers

    model = shape.make_model()
    if isinstance(model, str):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    vocab = model.get_input_embeddings().num_embeddings
    rows = args.prompts * args.num_generations
    batch = random_batch(vocab, rows, args.prompt_len, args.completion_len, args.seed, device)
    with tqdm(total=None, unit="case", file=sys.stderr) as bar:

        def progress(msg: str) -> None:
            bar.set_description(msg)
            bar.update(1)

        return run_scorers(
            model,
            batch,
            repeats=args.scorer_repeats,
            noise_std=1e-3,
            fraction=args.oar_gp_fraction,
            copies=args.copies,
            full_stride=args.full_stride,
            span_tokens=args.span_tokens,
            progress=progress,
        )


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    try:
        out = ensure_writable_dir(args.out)
        if args.model is not None and not Path(args.model).is_dir():
            raise ValueError(f"--model {args.model!r} is not a directory")
    except ValueError as exc:
        print(f"oar-rl bench: {exc}", file=sys.stderr)
        return 2
    from tqdm.auto import tqdm

    from oar_rl.bench.scorers import scorer_lines
    from oar_rl.bench.shapes import build_shape
    from oar_rl.console import print_settings
    from oar_rl.options import apply_threads

    apply_threads(args.threads)
    print_settings("bench", {k: ",".join(v) if k == "methods" else v for k, v in vars(args).items()})
    started = time.perf_counter()
    steps = args.warmup + args.repeats
    shape_kwargs = dict(
        name=args.shape,
        prompt_len=args.prompt_len,
        completion_len=args.completion_len,
        rows=args.prompts * steps * 2,
        seed=args.seed,
        model_dir=args.model,
        cache_dir=args.cache_dir,
    )
    shape = build_shape(**shape_kwargs)
    summary = parity = None
    records: list[dict] = []
    workers: dict[str, dict] = {}
    if not args.scorers_only:
        print(
            f"[bench] {shape.description}; {len(args.methods)} methods × ({args.warmup} + {args.repeats}) "
            f"interleaved steps of {args.prompts}×{args.num_generations} completions, one process each",
            flush=True,
        )
        with tqdm(total=len(args.methods) * steps, unit="step", file=sys.stderr) as bar:
            try:
                records, workers = run_interleaved(shape_kwargs, args, bar)
            except BenchWorkerError as exc:
                print(f"oar-rl bench: {exc}", file=sys.stderr)
                return 1
        summary = summarize(records, args.methods, args.warmup)
        parity = generation_parity(summary)
    scorers = None if args.no_scorers else _run_scorers(shape, args)
    wall = time.perf_counter() - started
    machine = machine_info()
    report = {
        "args": vars(args),
        "shape": shape.description,
        "num_parameters": shape.num_parameters,
        "machine": machine,
        "wall_seconds": wall,
        "steps": summary,
        "generation_parity": parity,
        "workers": workers,
        "scorers": scorers,
        "records": records,
    }
    command = f"`oar-rl bench {' '.join(argv if argv is not None else sys.argv[1:])}` — {shape.description}; "
    where = (
        f"machine: {machine['device']}, {machine['cpu_count']} CPUs, "
        f"torch threads {machine['torch_threads']}; wall time {wall / 60:.1f} min."
    )
    lines = []
    if summary is not None:
        header = (
            f"{command}{args.prompts}×{args.num_generations} completions of ≤ {args.completion_len} tokens "
            f"per step; {summary['none']['steps']} measured steps per method, interleaved, one process "
            f"per method; {where} Median [min–max] over repeats; ratios pair by pair."
        )
        lines += [header, "", *table_lines(summary), "", *parity_lines(parity)]
        search = search_lines(summary)
        lines += ["", *search] if search else []
    else:
        lines += [f"{command}scorer part only; {where}"]
    if scorers:
        lines += ["", *scorer_lines(scorers)]
    table = "\n".join(lines) + "\n"
    write_text_atomic(out / "bench.json", json.dumps(report, indent=2))
    write_text_atomic(out / "bench.md", table)
    print(table)
    if parity is not None and not parity["ok"]:
        print(
            f"[bench] WARNING: generation parity failed for {', '.join(parity['flagged'])}", file=sys.stderr
        )
    print(f"[bench] wrote {out / 'bench.json'} and {out / 'bench.md'} ({wall / 60:.1f} min)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
