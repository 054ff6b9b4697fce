"""The step-level part of `oar-rl bench`: one `OARTrainer` per method, their steps interleaved, timed and
their memory read (see :mod:`oar_rl.analysis.bench` for what is measured and how it is reported).

Each trainer runs in its own thread; a `Baton` lets only one of them run a step at a time, in turn
(A B C A B C ...), so a load change on a shared machine hits every method alike. `PeakMemory` reads the
CUDA allocator peak on a GPU, the resident-set high-water mark on the CPU.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

METHOD_CONFIG: dict[str, dict[str, Any]] = {  # bench-only variants of a credit mode
    "oar-p-full": {"credit": "oar-p", "perturbation_prefix_reuse": False},
    "oar-p-serial": {"credit": "oar-p", "perturbation_prefix_reuse": False, "perturbation_batch_size": 1},
}


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
