"""Stand-in bench worker processes for tests/test_bench.py: they speak the real turn protocol
(`oar_rl.bench.steps.serve`) without building a trainer. Spawned children import this module,
so it stays light (no torch)."""

from __future__ import annotations

import functools
import os

from oar_rl.bench.steps import WorkerTurns, serve


def _fake(method: str, args, turns: WorkerTurns) -> None:
    turns.send("ready", {"pid": os.getpid(), "torch_threads": 0})
    turns.wait()
    for step in range(args.warmup + args.repeats):
        if (method, step) == (args.crash_method, args.crash_step):
            if args.crash == "exit":
                os._exit(3)  # dies without a word
            raise ValueError(f"boom in {method} at step {step}")
        turns.send("record", {"method": method, "step": step, "pid": os.getpid(), "step_seconds": 0.0})
        turns.wait()


def fake_worker(method, shape_kwargs, args, conn) -> None:
    serve(conn, functools.partial(_fake, method, args))
