"""`oar-rl bench`: the compute overhead of each credit mode versus plain GRPO (paper §5.2, Fig. 7).

Every method trains the same model on the same prompts with the same seed for a few steps; the
figure is wall-clock seconds per completion token of a whole training step (generation, rewards,
importance, loss and optimizer update), divided by GRPO's. The importance share is reported apart
(`oar/importance_seconds`). The first `--warmup` steps of each method are excluded (allocator and
kernel warm-up). `oar-p-serial` is OAR-P with one perturbed copy per forward pass: the paper's "naive
serial implementation".

Ratios are only meaningful within one run on one machine; the command says which machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from oar_rl.io import ensure_writable_dir, resolve_model, savefig_atomic, write_text_atomic

METHODS = ("none", "random", "entropy", "oar-g", "oar-p", "oar-p-serial")


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="oar-rl bench", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", default="default", help="model dir, or 'default' for the embedded default model"
    )
    p.add_argument(
        "--methods", default="none,random,entropy,oar-g,oar-p,oar-p-serial", help="comma-separated"
    )
    p.add_argument("--steps", type=int, default=4, help="measured optimizer steps per method (after warm-up)")
    p.add_argument("--warmup", type=int, default=1, help="steps per method excluded from the figures")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step")
    p.add_argument("--num-generations", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--max-completion-length", type=int, default=96)
    p.add_argument("--probe", default="as-mean", choices=("lt-logits", "as-mean", "as-joint"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench_out", help="directory for bench.json / bench.md / bench.png")
    a = p.parse_args(argv)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        p.error(f"unknown method(s) {unknown or a.methods!r}; valid: {', '.join(METHODS)}")
    if "none" not in methods:
        p.error("--methods must include 'none' (the GRPO reference the ratios divide by)")
    for name in ("steps", "prompts", "num_generations", "max_completion_length"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    a.methods = methods
    return a


def run_method(method: str, model_path: str, args: argparse.Namespace, workdir: str) -> dict:
    """Train `args.warmup + args.steps` steps with one credit mode; return per-step timings."""
    import torch
    from transformers import AutoTokenizer

    from oar_rl.data.arithmetic import load
    from oar_rl.demo import arithmetic_reward
    from oar_rl.trainer import OARConfig, OARTrainer

    credit = "oar-p" if method == "oar-p-serial" else method
    total = args.warmup + args.steps
    batch = args.prompts * args.num_generations
    config = OARConfig(
        output_dir=os.path.join(workdir, method),
        credit=credit,
        probe=args.probe,
        perturbation_batch_size=1 if method == "oar-p-serial" else 64,
        per_device_train_batch_size=batch,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_steps=total,
        learning_rate=1e-5,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        gradient_checkpointing=False,
        disable_tqdm=True,
    )
    dataset = load("train").select(range(batch * total))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    trainer = OARTrainer(
        model=model_path,
        args=config,
        train_dataset=dataset,
        reward_funcs=arithmetic_reward,
        processing_class=tokenizer,
    )
    generate_seconds: list[float] = []
    generate = trainer._generate  # TRL's sampling call: timed so the update cost can be reported apart

    def timed_generate(*a, **k):
        start = time.perf_counter()
        try:
            return generate(*a, **k)
        finally:
            generate_seconds.append(time.perf_counter() - start)

    trainer._generate = timed_generate
    trainer.train()
    logs = [h for h in trainer.state.log_history if "step_time" in h][args.warmup :]
    gen = generate_seconds[args.warmup : args.warmup + len(logs)]
    tokens = [batch * max(h["completions/mean_length"], 1.0) for h in logs]
    return {
        "method": method,
        "step_seconds": [h["step_time"] for h in logs],
        "generate_seconds": gen,
        "importance_seconds": [h.get("oar/importance_seconds", 0.0) for h in logs],
        "mean_length": [h["completions/mean_length"] for h in logs],
        "seconds_per_token": sum(h["step_time"] for h in logs) / sum(tokens),
        "update_seconds_per_token": sum(h["step_time"] - g for h, g in zip(logs, gen, strict=True))
        / sum(tokens),
        "importance_seconds_per_step": statistics.mean(h.get("oar/importance_seconds", 0.0) for h in logs),
    }


def _plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    names = [r["method"] for r in results]
    for ax, key, title in (
        (axes[0], "ratio_vs_grpo", "whole training step"),
        (axes[1], "update_ratio_vs_grpo", "excluding generation (paper Fig. 7)"),
    ):
        ratios = [r[key] for r in results]
        bars = ax.bar(names, ratios, color=["#888" if n == "none" else "#3b7dd8" for n in names])
        ax.bar_label(bars, labels=[f"{v:.2f}x" for v in ratios], fontsize=8)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_ylabel("time per token (GRPO = 1)")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    try:
        out = ensure_writable_dir(args.out)
        model_path = resolve_model(args.model)
        if not Path(model_path).is_dir():
            raise ValueError(f"--model {args.model!r} is not a directory (or use 'default')")
    except ValueError as exc:
        print(f"oar-rl bench: {exc}", file=sys.stderr)
        return 2
    import torch

    results = []
    with tempfile.TemporaryDirectory() as work:
        for method in args.methods:
            print(f"[bench] {method}: {args.warmup}+{args.steps} steps", flush=True)
            results.append(run_method(method, model_path, args, work))
    grpo = next(r for r in results if r["method"] == "none")
    for r in results:
        r["ratio_vs_grpo"] = r["seconds_per_token"] / grpo["seconds_per_token"]
        r["update_ratio_vs_grpo"] = r["update_seconds_per_token"] / grpo["update_seconds_per_token"]
    machine = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }
    report = {"args": vars(args), "machine": machine, "results": results}
    write_text_atomic(out / "bench.json", json.dumps(report, indent=2))
    lines = [
        f"Machine: {machine['device']}, {machine['cpu_count']} CPUs, "
        f"torch threads {machine['torch_threads']}; "
        f"{args.steps} measured steps of {args.prompts}x{args.num_generations} completions per method",
        "",
        "| method | s/step | generate s/step | importance s/step | ms/token | x GRPO | "
        "ms/token excl. generation | x GRPO excl. generation |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['method']} | {statistics.mean(r['step_seconds']):.2f}"
            f" | {statistics.mean(r['generate_seconds']):.2f}"
            f" | {r['importance_seconds_per_step']:.2f} | {1000 * r['seconds_per_token']:.2f}"
            f" | {r['ratio_vs_grpo']:.2f} | {1000 * r['update_seconds_per_token']:.2f}"
            f" | {r['update_ratio_vs_grpo']:.2f} |"
        )
    table = "\n".join(lines) + "\n"
    write_text_atomic(out / "bench.md", table)
    _plot(results, out / "bench.png")
    print(table)
    print(f"[bench] wrote {out / 'bench.json'}, {out / 'bench.md'}, {out / 'bench.png'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
