"""The step-level part of `oar-rl bench`: one `OARTrainer` per method, each in its own process, their
steps interleaved, timed and their memory read (see :mod:`oar_rl.bench.cli` for what is measured
and how it is reported).

Each method runs in a worker process of its own (``multiprocessing``, spawn context), as a real training
run does: it builds the shape and its trainer, sets its torch threads from ``--threads``, and blocks in its
step-begin turn until the parent hands it the turn over a pipe. After each step it sends the step's
record back and waits again. The parent hands the turn round robin (none, oar-g, oar-p, ... , none, ...),
so only one method computes at a time and a load change on a shared machine hits every method alike.
A worker that raises sends its traceback, and one that dies is noticed by the parent: either ends the
bench with a :class:`BenchWorkerError` naming the method (the other workers are stopped), never a hang.

(The first harness ran every trainer in a thread of one process, taking turns. It made the *generation*
part of every scoring mode's step ~6× slower than GRPO's, which one process per trainer does not.)

`PeakMemory` reads, in each worker, that process's own CUDA allocator peak on a GPU, or its own
resident-set high-water mark on the CPU, above its level at the step's start.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import multiprocessing
import os
import re
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

METHOD_CONFIG: dict[str, dict[str, Any]] = {  # bench-only variants of a credit mode
    "oar-p-full": {"credit": "oar-p", "perturbation_prefix_reuse": False},
    "oar-p-serial": {"credit": "oar-p", "perturbation_prefix_reuse": False, "perturbation_batch_size": 1},
    # first-error's search with k - 1 cut points per row per round (plain first-error: k = 2)
    "first-error-k2": {"credit": "first-error", "first_error_branching": 2},
    "first-error-k4": {"credit": "first-error", "first_error_branching": 4},
    "first-error-k8": {"credit": "first-error", "first_error_branching": 8},
    "first-error-k16": {"credit": "first-error", "first_error_branching": 16},
    # first-error without answering cuts from their runs of greedy tokens (the search before issue 33)
    "first-error-plain": {"credit": "first-error", "first_error_reuse_greedy": False},
    # first-error's continuations by model.generate on every prefix (the search before issue 46)
    "first-error-generate": {"credit": "first-error", "first_error_decode": "generate"},
    # ... over a static cache, and one prefix at a time with generate's prompt-lookup decoding (issue 58)
    "first-error-static": {"credit": "first-error", "first_error_decode": "generate-static"},
    "first-error-lookup": {"credit": "first-error", "first_error_decode": "generate-lookup"},
}
# generation by a colocated vLLM engine (vLLM's CPU build on a CPU; oar_rl.vllm_sync) instead of `generate`
# (on a CPU the memory share is of the machine's memory, for the KV cache: 0.15 fits four workers in 24 GB)
VLLM = {
    "use_vllm": True,
    "vllm_mode": "colocate",
    "vllm_dtype": "float32",
    "vllm_gpu_memory_utilization": 0.15,
}
METHOD_CONFIG.update({"grpo-vllm": {"credit": "none", **VLLM}, "oar-g-vllm": {"credit": "oar-g", **VLLM}})
SEARCH_KEYS = (  # first-error's search, per step
    "rounds", "continuations", "reused", "generated_tokens", "forwards", "pass_seconds", "decode_seconds",
    "check_seconds",
)  # fmt: skip
_POLL_SECONDS = 0.5  # how often the parent checks that the worker it waits on is alive


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
# the worker: one method's trainer in its own process


class BenchWorkerError(RuntimeError):
    """A method's worker process failed (its traceback is in the message) or died."""


class _Stopped(Exception):
    """The parent ended the bench early (or went away): the worker leaves quietly."""


class WorkerTurns:
    """The worker's side of the pipe: send a message, block until the parent hands the turn back."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def send(self, kind: str, payload: Any = None) -> None:
        self.conn.send((kind, payload))

    def wait(self) -> None:
        try:
            msg = self.conn.recv()
        except (EOFError, OSError) as exc:  # the parent is gone
            raise _Stopped from exc
        if msg != "go":
            raise _Stopped


def _make_trainer(method: str, shape, args: argparse.Namespace, workdir: str):
    import torch

    from oar_rl.config import OARConfig
    from oar_rl.trainer import OARTrainer

    cfg = {"credit": method, **METHOD_CONFIG.get(method, {})}
    rows = args.prompts * args.num_generations
    from oar_rl.study.training import passes_per_step

    passes = passes_per_step(rows, getattr(args, "micro_batch", None))  # of the update, as the study's
    cuda = torch.cuda.is_available()
    generation_kwargs = dict(shape.generation_kwargs)
    if cfg.get("use_vllm") and "min_new_tokens" in generation_kwargs:  # vLLM's name for the same floor
        generation_kwargs["min_tokens"] = generation_kwargs.pop("min_new_tokens")
    config = OARConfig(
        output_dir=os.path.join(workdir, method),
        probe=args.probe,
        perturbation_batch_size=cfg.pop("perturbation_batch_size", args.copies),
        oar_gp_fraction=args.oar_gp_fraction,
        per_device_train_batch_size=rows // passes,
        gradient_accumulation_steps=passes,  # one optimizer step per generation batch, as the study
        steps_per_generation=passes,
        num_generations=args.num_generations,
        max_completion_length=args.completion_len,
        generation_kwargs=generation_kwargs or None,
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
        credit_module=getattr(args, "credit_module", None),  # loaded again in this worker process
        **cfg,
    )
    return OARTrainer(
        model=shape.make_model(),
        args=config,
        train_dataset=shape.dataset,
        reward_funcs=shape.reward,
        processing_class=shape.tokenizer,
    )


def _instrument(trainer, method: str, turns: WorkerTurns, memory: PeakMemory, search=None) -> None:
    """Time generation, credit and whole steps of `trainer`; take turns through `turns`. `search`: a
    first-error :class:`~oar_rl.importance.first_error.SearchStats` being recorded (its per-step rounds,
    continuations and generated tokens go into the step's record)."""
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

    class TakeTurns(TrainerCallback):
        def on_train_begin(self, *a, **k):
            turns.send("ready", {"pid": os.getpid(), "torch_threads": torch.get_num_threads()})
            turns.wait()

        def on_step_begin(self, *a, **k):
            gc.collect()
            cur.clear()
            if search is not None:
                cur.update({f"_search_{key}": getattr(search, key) for key in SEARCH_KEYS})
            memory.start()
            sync()
            cur["t0"] = time.perf_counter()

        def on_step_end(self, *a, **k):
            sync()
            step = time.perf_counter() - cur.pop("t0")
            if search is not None:
                for key in SEARCH_KEYS:
                    cur[f"search_{key}"] = getattr(search, key) - cur.pop(f"_search_{key}")
            turns.send("record", {"method": method, "step_seconds": step, "peak_mib": memory.peak(), **cur})
            turns.wait()  # also after the last step: the end of training must not overlap a timed step

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)  # the bench prints its own progress and table, not log dicts
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(TakeTurns())


def serve(conn, body: Callable[[WorkerTurns], None]) -> None:
    """Run ``body(turns)`` as a worker process's whole life: then say 'done', or send the traceback."""
    turns = WorkerTurns(conn)
    try:
        body(turns)
        turns.send("done")
    except _Stopped:
        pass
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            turns.send("error", traceback.format_exc())
        raise SystemExit(1) from None
    finally:
        conn.close()


def _train(method: str, shape_kwargs: dict[str, Any], args: argparse.Namespace, turns: WorkerTurns) -> None:
    import warnings

    import torch

    # each worker would print the libraries' deprecation notices again; they say nothing about cost
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if args.threads:
        torch.set_num_threads(args.threads)
    from oar_rl.bench.shapes import build_shape

    shape = build_shape(**shape_kwargs)
    if METHOD_CONFIG.get(method, {}).get("use_vllm") and not os.environ.get("MASTER_PORT"):
        # the workers start together: TRL's free-port probe would hand two engines the same port
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    from oar_rl.importance.first_error import recording

    with tempfile.TemporaryDirectory() as work, recording() as search:
        trainer = _make_trainer(method, shape, args, work)
        searching = trainer.args.credit == "first-error"
        if searching:  # this worker's searches decode as its config says, whoever passes the option
            from oar_rl.importance import first_error

            first_error.DEFAULT_DECODE = trainer.args.first_error_decode
        _instrument(trainer, method, turns, PeakMemory(), search if searching else None)
        trainer.train()
        if trainer.use_vllm:  # a colocated engine: shut down while its process groups exist
            from oar_rl.vllm_sync import shutdown

            shutdown(trainer.vllm_generation)


def method_worker(method: str, shape_kwargs: dict[str, Any], args: argparse.Namespace, conn) -> None:
    """Entry point of one method's process: build the shape and the trainer, train in turns, report."""
    serve(conn, functools.partial(_train, method, shape_kwargs, args))


# ----------------------------------------------------------------------------------------------------
# the parent: round-robin turns


class _Worker:
    def __init__(self, ctx, method: str, target: Callable, shape_kwargs: dict, args) -> None:
        self.method = method
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=target, args=(method, shape_kwargs, args, child), name=f"oar-rl-bench-{method}"
        )
        self.proc.start()
        child.close()  # the parent keeps one end only, so a dead worker reads as EOF

    def expect(self, kind: str) -> Any:
        """The payload of the worker's next message, which must be `kind`; raise if it fails or dies."""
        while True:
            if self.conn.poll(_POLL_SECONDS):
                try:
                    got, payload = self.conn.recv()
                except (EOFError, OSError):
                    self.proc.join(timeout=5)
                    break
                if got == "error":
                    raise BenchWorkerError(f"the bench worker for {self.method!r} failed:\n{payload}")
                if got != kind:
                    raise BenchWorkerError(f"the bench worker for {self.method!r} sent {got!r}, not {kind!r}")
                return payload
            if not self.proc.is_alive() and not self.conn.poll(0):
                break
        raise BenchWorkerError(
            f"the bench worker for {self.method!r} (pid {self.proc.pid}) died with exit code "
            f"{self.proc.exitcode} while the bench waited for its {kind!r}"
            + (" (killed by a signal: out of memory?)" if (self.proc.exitcode or 0) < 0 else "")
        )

    def go(self) -> None:
        try:
            self.conn.send("go")
        except OSError as exc:
            raise BenchWorkerError(f"the bench worker for {self.method!r} is gone: {exc}") from exc

    def stop(self) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send("stop")
            self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def rotated_order(methods: list[str], round_index: int) -> list[str]:
    """The order of round `round_index`: `methods` rotated left by the round's index (A B C, B C A, C A B, …).

    Counterbalancing: a fixed order puts the same method at the same place in every round, so a drift
    within rounds lands on it alone; rotating gives each method each place in turn (each place falls
    on every method equally often when the rounds are a multiple of the methods). It did not make
    the generation-parity check pass on an H200: in one run the gaps followed each worker across
    places, and their cause is open (``results/gpu-check-h200-2026-11-30/README.md``).
    """
    k = round_index % len(methods)
    return [*methods[k:], *methods[:k]]


def run_interleaved(
    shape_kwargs: dict[str, Any],
    args: argparse.Namespace,
    bar,
    worker: Callable = method_worker,
) -> tuple[list[dict], dict[str, dict]]:
    """Train every method for warmup + repeats steps, one process each, interleaved in rounds.

    Each round runs every method's next step once, in :func:`rotated_order`.
    Returns one record per step (in the order they ran) and, per method, its worker's info (pid, torch
    threads). `shape_kwargs` are :func:`oar_rl.bench.shapes.build_shape`'s arguments: each
    worker builds the shape itself. `worker` is the process entry point (tests swap it).
    """
    ctx = multiprocessing.get_context("spawn")
    steps = args.warmup + args.repeats
    workers: dict[str, _Worker] = {}
    records: list[dict] = []
    try:
        for m in args.methods:
            workers[m] = _Worker(ctx, m, worker, shape_kwargs, args)
        info = {}
        for m, w in workers.items():
            bar.set_description(f"building {m}")
            info[m] = w.expect("ready")
        for round_index in range(steps):
            for m in rotated_order(args.methods, round_index):
                w = workers[m]
                w.go()
                r = w.expect("record")
                records.append(r)
                bar.set_description(f"{m} {r['step_seconds']:.1f}s")
                bar.update(1)
        for w in workers.values():  # no timed step is left: all may finish at once
            w.go()
        for w in workers.values():
            w.expect("done")
    finally:
        for w in workers.values():
            w.stop()
    return records, info
