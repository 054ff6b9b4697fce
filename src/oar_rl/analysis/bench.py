"""`oar-rl bench`: what each credit mode costs per completion token, as a ratio to plain GRPO (paper §5.2).

Every method trains its own copy of the same policy (same weights, prompts and seed) through
`OARTrainer`. The methods' steps are *interleaved*: A B C A B C …, one optimizer step each in turn
(each trainer runs in its own thread; only the thread holding the baton runs, the others wait), so
a load change on a shared machine hits every method alike. Per step it records

- the whole step's seconds per completion token (generation, rewards, importance, loss, update),
- the update sweep alone: the step minus generation, the paper's Fig. 7 definition,
- the importance seconds (the credit assignment, inside the step), and peak memory above the step's
  starting level (CUDA allocator peak on a GPU, resident-set high-water mark on the CPU).

Ratios to GRPO are taken pair by pair (repeat r of a method over repeat r of ``none``), then the
median and min–max over repeats are reported. The first ``--warmup`` steps of each method are dropped.
``oar-p-full`` recomputes every perturbed copy from position 0 (no prefix reuse) and
``oar-p-serial`` also runs one copy per forward pass, the paper's "naive serial implementation".

After the steps, a scorer-level part (:mod:`oar_rl.analysis.bench_scorers`, skip with
``--no-scorers``) times the importance functions on one batch of the same shape, OAR-P's compute
floor, and recall of OAR-P's top-20% tokens. Shapes are in :mod:`oar_rl.analysis.bench_shapes`.

Ratios are only meaningful within one run on one machine; the outputs name the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from oar_rl.analysis.bench_shapes import SHAPE_NAMES
from oar_rl.argparsing import add, new_parser
from oar_rl.credits import CREDITS
from oar_rl.io import ensure_writable_dir, write_text_atomic

METHOD_CONFIG: dict[str, dict[str, Any]] = {  # bench-only variants of a credit mode
    "oar-p-full": {"credit": "oar-p", "perturbation_prefix_reuse": False},
    "oar-p-serial": {"credit": "oar-p", "perturbation_prefix_reuse": False, "perturbation_batch_size": 1},
}
METHODS = (*CREDITS, *METHOD_CONFIG)  # every registered credit mode, and the variants above
DEFAULT_METHODS = "none,oar-g,oar-p,oar-gp"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = new_parser("oar-rl bench", __doc__.split("\n\n")[0])
    add(p, "--shape", default="embedded", choices=SHAPE_NAMES, help="model shape (see module doc)")
    add(p, "--model", default=None, help="--shape embedded only: a model dir instead of the default")
    add(p, "--methods", default=DEFAULT_METHODS, help=f"comma-separated, from: {', '.join(METHODS)}")
    add(
        p,
        "--repeats",
        "--steps",
        type=int,
        default=3,
        help="measured steps per method (interleaved)",
    )
    add(p, "--warmup", type=int, default=1, help="steps per method dropped from the figures")
    add(p, "--prompts", type=int, default=1, help="prompts per step")
    add(p, "--num-generations", type=int, default=4, help="completions per prompt (G)")
    add(p, "--prompt-len", type=int, default=32, help="prompt tokens (random shapes)")
    add(
        p,
        "--completion-len",
        type=int,
        default=None,
        help="completion tokens (random shapes: exact; default 256)",
    )
    add(p, "--probe", default="lt-logits", choices=("lt-logits", "as-mean", "as-joint"))
    add(p, "--oar-gp-fraction", type=float, default=0.25, help="OAR-P share of oar-gp, in (0, 1]")
    add(p, "--copies", type=int, default=64, help="OAR-P perturbed copies per forward pass")
    add(p, "--no-scorers", action="store_true", help="skip the scorer-level part (floor, recall)")
    add(
        p,
        "--full-stride",
        type=int,
        default=1,
        help="scorer part: time whole-copy OAR-P on every k-th position and scale (flat cost per copy)",
    )
    add(
        p,
        "--scorer-repeats",
        type=int,
        default=1,
        help="timed rounds of the scorer-level part (OAR-P is slow)",
    )
    add(p, "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    add(p, "--seed", type=int, default=0)
    add(p, "--out", default="bench_out", help="directory for bench.json and bench.md")
    a = p.parse_args(argv)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        p.error(f"unknown method(s) {unknown or a.methods!r}; valid: {', '.join(METHODS)}")
    if "none" not in methods:
        p.error("--methods must include 'none' (the GRPO reference the ratios divide by)")
    if len(set(methods)) != len(methods):
        p.error(f"--methods lists a method twice: {a.methods!r}")
    if a.completion_len is None:
        a.completion_len = 96 if a.shape == "embedded" else 256
    for name in (
        "repeats",
        "prompts",
        "completion_len",
        "prompt_len",
        "copies",
        "scorer_repeats",
        "full_stride",
    ):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.num_generations < 2:
        p.error(f"--num-generations must be >= 2 (GRPO needs a group), got {a.num_generations}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    if not 0.0 < a.oar_gp_fraction <= 1.0:
        p.error(f"--oar-gp-fraction must be in (0, 1], got {a.oar_gp_fraction}")
    if a.model is not None and a.shape != "embedded":
        p.error("--model goes with --shape embedded (the other shapes are random-initialised)")
    if a.threads is not None and a.threads < 1:
        p.error(f"--threads must be >= 1, got {a.threads}")
    a.methods = methods
    return a


# ----------------------------------------------------------------------------------------------------
# memory


_STATUS, _CLEAR = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _rss_mib(key: str) -> float | None:
    try:
        m = re.search(rf"{key}:\s+(\d+)", _STATUS.read_text())
    except OSError:
        return None
    return int(m.group(1)) / 1024 if m else None


class PeakMemory:
    """Peak memory above the level at `start()`: CUDA allocator peak, or the RSS high-water mark."""

    def __init__(self) -> None:
        import torch

        self.cuda = torch.cuda.is_available()
        self.base: float | None = None

    def start(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated() / 2**20
            return
        try:
            _CLEAR.write_text("5")  # reset VmHWM to the current RSS
            self.base = _rss_mib("VmRSS")
        except OSError:
            self.base = None

    def peak(self) -> float | None:
        import torch

        if self.base is None:
            return None
        if self.cuda:
            return torch.cuda.max_memory_allocated() / 2**20 - self.base
        hwm = _rss_mib("VmHWM")
        return None if hwm is None else hwm - self.base


# ----------------------------------------------------------------------------------------------------
# interleaving


class Baton:
    """Round-robin turns among named threads: only the holder runs; errors release everyone."""

    def __init__(self, names: list[str]) -> None:
        self.cond = threading.Condition()
        self.order = list(names)
        self.active = set(names)
        self.turn: str | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        with self.cond:
            self.turn = self.order[0]
            self.cond.notify_all()

    def wait(self, name: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == name or self.error is not None)
            if self.error is not None and self.turn != name:
                raise RuntimeError("another benchmark thread failed") from self.error

    def pass_on(self, name: str) -> None:
        with self.cond:
            i = self.order.index(name)
            nxt = [self.order[(i + k) % len(self.order)] for k in range(1, len(self.order) + 1)]
            self.turn = next((n for n in nxt if n in self.active), None)
            self.cond.notify_all()

    def finish(self, name: str) -> None:
        with self.cond:
            self.active.discard(name)
            if self.turn == name:
                self.pass_on(name)
            self.cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self.cond:
            self.error = self.error or exc
            self.cond.notify_all()


def _make_trainer(method: str, shape, args: argparse.Namespace, workdir: str):
    import torch

    from oar_rl.config import OARConfig
    from oar_rl.trainer import OARTrainer

    cfg = {"credit": method, **METHOD_CONFIG.get(method, {})}
    rows = args.prompts * args.num_generations
    cuda = torch.cuda.is_available()
    config = OARConfig(
        output_dir=os.path.join(workdir, method),
        probe=args.probe,
        perturbation_batch_size=cfg.pop("perturbation_batch_size", args.copies),
        oar_gp_fraction=args.oar_gp_fraction,
        per_device_train_batch_size=rows,
        num_generations=args.num_generations,
        max_completion_length=args.completion_len,
        generation_kwargs=shape.generation_kwargs or None,
        max_steps=args.warmup + args.repeats,
        learning_rate=1e-6,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        use_cpu=not cuda,
        bf16=cuda and shape.dtype == "bfloat16",
        activation_checkpointing=False,  # the new name: `gradient_checkpointing` warns it is deprecated
        disable_tqdm=True,
        **cfg,
    )
    return OARTrainer(
        model=shape.make_model(),
        args=config,
        train_dataset=shape.dataset,
        reward_funcs=shape.reward,
        processing_class=shape.tokenizer,
    )


def _instrument(trainer, method: str, baton: Baton, records: list[dict], memory: PeakMemory):
    """Time generation, credit and whole steps of `trainer`; take turns through `baton`."""
    import torch
    from transformers import TrainerCallback

    cur: dict[str, float] = {}
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    def timed(fn, key):
        def wrapper(*a, **k):
            sync()
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                sync()
                cur[key] = cur.get(key, 0.0) + time.perf_counter() - t0

        return wrapper

    trainer._generate = timed(trainer._generate, "generate")
    trainer._assign_credit = timed(trainer._assign_credit, "importance")
    score = trainer._generate_and_score_completions

    def count_tokens(*a, **k):
        out = score(*a, **k)
        cur["tokens"] = cur.get("tokens", 0.0) + float(out["completion_mask"].sum())
        return out

    trainer._generate_and_score_completions = count_tokens

    class Turns(TrainerCallback):
        def on_train_begin(self, *a, **k):
            baton.wait(method)

        def on_step_begin(self, *a, **k):
            gc.collect()
            cur.clear()
            memory.start()
            sync()
            cur["t0"] = time.perf_counter()

        def on_step_end(self, *a, **k):
            sync()
            step = time.perf_counter() - cur.pop("t0")
            records.append({"method": method, "step_seconds": step, "peak_mib": memory.peak(), **cur})
            baton.pass_on(method)
            baton.wait(method)

        def on_train_end(self, *a, **k):
            baton.finish(method)

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)  # the bench prints its own progress and table, not log dicts
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(Turns())


def run_interleaved(shape, args: argparse.Namespace, bar) -> list[dict]:
    """Train every method for warmup + repeats steps, interleaved; one record per step."""
    records: list[dict] = []
    baton = Baton(args.methods)
    memory = PeakMemory()
    threads: list[threading.Thread] = []
    with tempfile.TemporaryDirectory() as work:
        trainers = {}
        for m in args.methods:
            bar.set_description(f"building {m}")
            trainers[m] = _make_trainer(m, shape, args, work)
            _instrument(trainers[m], m, baton, records, memory)

        def target(m: str) -> None:
            try:
                trainers[m].train()
            except BaseException as exc:  # surfaced by the main thread
                baton.fail(exc)
                baton.finish(m)

        n_before = 0
        for m in args.methods:
            threads.append(threading.Thread(target=target, args=(m,), name=f"bench-{m}", daemon=True))
            threads[-1].start()
        baton.start()
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            if len(records) > n_before:
                for r in records[n_before:]:
                    bar.set_description(f"{r['method']} {r['step_seconds']:.1f}s")
                    bar.update(1)
                n_before = len(records)
        for t in threads:
            t.join()
    if baton.error is not None:
        raise baton.error
    return records


# ----------------------------------------------------------------------------------------------------
# figures


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(records: list[dict], methods: list[str], warmup: int) -> dict[str, dict]:
    """Per method: median [min–max] of s/token (step, update), importance s, peak MiB, pairwise ratios."""
    by = {m: [r for r in records if r["method"] == m][warmup:] for m in methods}
    n = min(len(v) for v in by.values())
    if n == 0:
        raise RuntimeError(f"no measured steps (warmup={warmup} drops all of them)")
    out = {}
    for m in methods:
        rs = by[m][:n]
        spt = [r["step_seconds"] / max(r.get("tokens", 0.0), 1.0) for r in rs]
        upd = [(r["step_seconds"] - r.get("generate", 0.0)) / max(r.get("tokens", 0.0), 1.0) for r in rs]
        out[m] = {
            "steps": n,
            "tokens_per_step": _spread([r.get("tokens", 0.0) for r in rs]),
            "seconds_per_token": _spread(spt),
            "update_seconds_per_token": _spread(upd),
            "importance_seconds": _spread([r.get("importance", 0.0) for r in rs]),
            "generate_seconds": _spread([r.get("generate", 0.0) for r in rs]),
            "peak_mib": _spread([r["peak_mib"] for r in rs])
            if all(r["peak_mib"] is not None for r in rs)
            else None,
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
    for m in methods:
        del out[m]["_spt"], out[m]["_upd"]
    return out


def _fmt(s: dict[str, float] | None, scale: float = 1.0, digits: int = 2) -> str:
    if s is None:
        return "n/a"
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f}–{s['max'] * scale:.{digits}f}]"


def table_lines(summary: dict[str, dict]) -> list[str]:
    lines = [
        "| method | ms/token, step | × GRPO, step | ms/token, update | × GRPO, update | importance s/step "
        "| peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m, s in summary.items():
        lines.append(
            f"| {m} | {_fmt(s['seconds_per_token'], 1000)} | {_fmt(s['ratio_vs_grpo'])} "
            f"| {_fmt(s['update_seconds_per_token'], 1000)} | {_fmt(s['update_ratio_vs_grpo'])} "
            f"| {_fmt(s['importance_seconds'])} | {_fmt(s['peak_mib'], 1, 0)} |"
        )
    return lines


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    try:
        out = ensure_writable_dir(args.out)
        if args.model is not None and not Path(args.model).is_dir():
            raise ValueError(f"--model {args.model!r} is not a directory")
    except ValueError as exc:
        print(f"oar-rl bench: {exc}", file=sys.stderr)
        return 2
    import torch
    from tqdm.auto import tqdm

    from oar_rl.analysis.bench_scorers import random_batch, run_scorers, scorer_lines
    from oar_rl.analysis.bench_shapes import build_shape

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    rows = args.prompts * args.num_generations
    steps = args.warmup + args.repeats
    shape = build_shape(
        args.shape,
        prompt_len=args.prompt_len,
        completion_len=args.completion_len,
        rows=args.prompts * steps * 2,
        seed=args.seed,
        model_dir=args.model,
    )
    print(
        f"[bench] {shape.description}; {len(args.methods)} methods × ({args.warmup} + {args.repeats}) "
        f"interleaved steps of {args.prompts}×{args.num_generations} completions",
        flush=True,
    )
    with tqdm(total=len(args.methods) * steps, unit="step", file=sys.stderr) as bar:
        records = run_interleaved(shape, args, bar)
    summary = summarize(records, args.methods, args.warmup)
    scorers = None
    if not args.no_scorers:
        model = shape.make_model()
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(model)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model.to(device)
        vocab = model.get_input_embeddings().num_embeddings
        batch = random_batch(vocab, rows, args.prompt_len, args.completion_len, args.seed, device)
        with tqdm(total=None, unit="case", file=sys.stderr) as bar:

            def progress(msg: str) -> None:
                bar.set_description(msg)
                bar.update(1)

            scorers = run_scorers(
                model,
                batch,
                repeats=args.scorer_repeats,
                noise_std=1e-3,
                fraction=args.oar_gp_fraction,
                copies=args.copies,
                full_stride=args.full_stride,
                progress=progress,
            )
    wall = time.perf_counter() - started
    machine = machine_info()
    report = {
        "args": vars(args),
        "shape": shape.description,
        "num_parameters": shape.num_parameters,
        "machine": machine,
        "wall_seconds": wall,
        "steps": summary,
        "scorers": scorers,
        "records": records,
    }
    header = (
        f"`oar-rl bench {' '.join(argv if argv is not None else sys.argv[1:])}` — {shape.description}; "
        f"{args.prompts}×{args.num_generations} completions of ≤ {args.completion_len} tokens per step; "
        f"{summary['none']['steps']} measured steps per method, interleaved; "
        f"machine: {machine['device']}, {machine['cpu_count']} CPUs, "
        f"torch threads {machine['torch_threads']}; "
        f"wall time {wall / 60:.1f} min. Median [min–max] over repeats; ratios pair by pair."
    )
    lines = [header, "", *table_lines(summary)]
    if scorers:
        lines += ["", *scorer_lines(scorers)]
    table = "\n".join(lines) + "\n"
    write_text_atomic(out / "bench.json", json.dumps(report, indent=2))
    write_text_atomic(out / "bench.md", table)
    print(table)
    print(f"[bench] wrote {out / 'bench.json'} and {out / 'bench.md'} ({wall / 60:.1f} min)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
