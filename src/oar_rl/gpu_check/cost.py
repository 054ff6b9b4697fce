"""gpu-check's cost table: `oar-rl bench` itself, at its ``qwen2.5-0.5b`` preset, set beside paper Fig. 7.

Nothing is timed here: this runs `oar-rl bench` (its own worker processes, interleaved steps and
generation-parity check) with the flags in :data:`oar_rl.gpu_check.sizes.GPU` -- random-initialised
Qwen2.5-0.5B, bf16, SDPA, 8 completions of exactly 256 tokens per step (``--cost-completion-len``; see
the sizes module for why not 1024 by default), one warm-up and one measured
step per method -- into ``OUT/bench``, and reads back bench.json: per method the step and update-sweep
ratios to GRPO, ms per token, generation ms per token, importance seconds per step and peak memory. The
bench's own output streams to ``OUT/bench/bench.log`` (so a run cut short still shows how far it got).

Importance vs training: the bench's scorer part (one batch, importance against one training forward +
backward) is skipped (``--no-scorers``): it builds one more 0.5B model and runs OAR-P twice more, which
does not fit the 8 minutes. The same question is answered from the steps instead: each method's importance
seconds per step over GRPO's update sweep per step (the step minus generation: the loss forward and
backward, the optimizer step and TRL's bookkeeping), both measured on the same batch shape.

The check fails when the bench fails or a figure is missing or not finite. A generation-parity failure
(a mode's generation time per token more than 10% off GRPO's) is reported, not failed: it says the step
columns carry machine noise, and the update-sweep columns are then the ones to read (see the bench).

Paper Fig. 7 (Qwen2.5-7B on 8 H100s, vLLM generation) is not the same setup: its ratios are set beside
these for orientation only. Its "serial" OAR-P (18.7×) is the bench's ``oar-p-serial``, left out here:
8 × 1024 one-copy forward passes per step alone would take minutes.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from oar_rl.gpu_check.benchlink import bench_command
from oar_rl.gpu_check.sizes import Sizes

SCORER_CASES = ("oar-g", "oar-p", "oar-p-full", "oar-gp")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def run_cost(
    sizes: Sizes, out: Path, seed: int, threads: int | None = None, completion_len: int | None = None
) -> dict[str, Any]:
    """Run the bench into ``out/bench``; the figures the report shows, or an AssertionError/RuntimeError."""
    bench_dir = out / "bench"
    bench_dir.mkdir(parents=True, exist_ok=True)
    argv = sizes.bench_argv(str(bench_dir), seed, threads, completion_len)
    log_path = bench_dir / "bench.log"
    with (
        open(log_path, "w", encoding="utf-8", buffering=1) as log,  # a log, streamed: not atomic
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        rc = bench_command.main(argv)
    if rc != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-1500:]
        raise RuntimeError(f"oar-rl bench exited with {rc}; the end of its output:\n{tail}")
    report = json.loads((bench_dir / "bench.json").read_text())
    steps = report["steps"]
    grpo_update = (
        steps["none"]["update_seconds_per_token"]["median"] * steps["none"]["tokens_per_step"]["median"]
    )
    methods: dict[str, dict[str, Any]] = {}
    for m, s in steps.items():
        methods[m] = {
            "step_ratio": s["ratio_vs_grpo"]["median"],
            "update_ratio": s["update_ratio_vs_grpo"]["median"],
            "ms_per_token": 1000 * s["seconds_per_token"]["median"],
            "generation_ms_per_token": 1000 * s["generate_seconds_per_token"]["median"],
            "importance_seconds": s["importance_seconds"]["median"],
            "importance_over_grpo_update": s["importance_seconds"]["median"] / grpo_update,
            "peak_mib": s["peak_mib"]["median"] if s["peak_mib"] else None,
            "steps": s["steps"],
        }
    scorers = {}
    sec = (report.get("scorers") or {}).get("seconds", {})
    if sec:
        base = sec["train fwd+bwd"]["median"]
        scorers = {k: sec[k]["median"] / base for k in SCORER_CASES if k in sec}
    bad = [
        f"{m}.{k}" for m, r in methods.items() for k, v in r.items() if k != "peak_mib" and not _finite(v)
    ] + [k for k, v in scorers.items() if not _finite(v)]
    if bad:
        raise AssertionError(f"oar-rl bench gave missing or non-finite figures: {bad}")
    parity = report["generation_parity"]
    parity_line = bench_command.parity_lines(parity)[0]
    return {
        "argv": argv,
        "shape": report["shape"],
        "machine": report["machine"],
        "wall_seconds": report["wall_seconds"],
        "grpo_update_seconds": grpo_update,
        "methods": methods,
        "scorers": scorers,
        "generation_parity_ok": parity["ok"],
        "parity": parity_line,
    }
