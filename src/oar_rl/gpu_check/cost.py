"""gpu-check's cost checks: `oar-rl bench` itself, twice, read back and set beside paper Fig. 7.

Nothing is timed here: each check runs `oar-rl bench` with the flags in :mod:`oar_rl.gpu_check.sizes`
(random-initialised Qwen2.5-0.5B, bf16, SDPA, 8 completions per step) into its own folder, streams the
bench's output to ``bench.log`` there (so a run cut short still shows how far it got) and reads back
``bench.json``.

- ``cost-scorers`` (``OUT/bench-scorers``): the bench's scorer part at the paper's length, 1024 completion
  tokens. On one batch, each importance function as a multiple of one training forward + backward, with
  OAR-G's and exact OAR-P's compute floors, every case timed ``--scorer-repeats`` times interleaved.
  Ratios are taken repeat by repeat (repeat r of a scorer over repeat r of the training pass), then
  median and min–max. This is the figure that reproduces from run to run: no generation in it.
- ``cost-steps`` (``OUT/bench-steps``): paper Fig. 7's own metric (§5.2: the optimizer-update sweep per
  action token, i.e. the step minus generation) from ≥ 3 interleaved measured steps per method after a
  warm-up, median and min–max of the per-step ratios to GRPO. The whole-step ratio is generation-bound
  at these shapes (transformers' sampling loop is nearly all of a step), so it is shown only when the
  bench's generation-parity check passed (every mode's generation time per token within 10% of GRPO's);
  otherwise it is withheld and the report says why.

A check fails when its bench fails or a figure is missing or not finite; a generation-parity failure is
reported, not failed (it says the step columns carry machine noise; the update-sweep columns do not
contain generation).

Paper Fig. 7 (Qwen2.5-7B on 8 H100s, vLLM generation, 1024 tokens) is not the same setup: its ratios
are set beside these for orientation. Its "serial" OAR-P (18.7×) is the bench's ``oar-p-serial``, left out
here (8 × 1024 one-copy forward passes per call).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from pathlib import Path
from typing import Any

from oar_rl.gpu_check.benchlink import bench_command
from oar_rl.gpu_check.sizes import Sizes

SCORER_CASES = ("oar-g", "oar-g floor: clean", "oar-g floor: noisy", "oar-p", "oar-p-full", "oar-gp")
FLOOR_KEYS = (
    "oar_g_over_floor",
    "oar_g_floor_over_train_fwd_bwd",
    "oar_p_floor_seconds",
    "oar_p_measured_over_floor",
    "oar_p_full_measured_over_floor",
    "prefix_speedup",
    "forward_tokens_per_second",
)
MIN_STEPS = 3  # measured steps per method the cost-steps check needs


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _run_bench(sizes: Sizes, part: str, out: Path, seed: int, threads, completion_len) -> tuple[list, dict]:
    """Run `oar-rl bench` for `part` into ``out/bench-<part>``; (argv, bench.json) or RuntimeError."""
    bench_dir = out / f"bench-{part}"
    bench_dir.mkdir(parents=True, exist_ok=True)
    argv = sizes.bench_argv(part, str(bench_dir), seed, threads, completion_len)
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
    return argv, json.loads((bench_dir / "bench.json").read_text())


def _not_finite(prefix: str, d: dict[str, Any]) -> list[str]:
    """Keys (dotted) of every non-finite number in the nested dict `d`."""
    bad = []
    for k, v in d.items():
        if isinstance(v, dict):
            bad += _not_finite(f"{prefix}{k}.", v)
        elif not _finite(v):
            bad.append(f"{prefix}{k}")
    return bad


def scorer_figures(s: dict[str, Any]) -> dict[str, Any]:
    """The cost-scorers figures from a bench report's ``scorers`` part (pure: no model, no timing)."""
    sec = s["seconds"]
    train = sec["train fwd+bwd"]["all"]
    ratios = {}
    for case in SCORER_CASES:
        if case in sec:
            ratios[case] = _spread([a / b for a, b in zip(sec[case]["all"], train, strict=True)])
    return {
        "rows": s["rows"],
        "prompt_len": s["prompt_len"],
        "completion_len": s["completion_len"],
        "repeats": len(train),
        "train_seconds": _spread(train),
        "over_train": ratios,
        "seconds": {k: {m: v[m] for m in ("median", "min", "max")} for k, v in sec.items()},
        "floors": {k: s[k] for k in FLOOR_KEYS},
        "oar_p_token_forwards": s["oar_p_token_forwards"],
        "oar_p_full_stride": s["oar_p_full_stride"],
        "recall_top20_of_oar_p": s["recall_top20_of_oar_p"],
    }


def run_cost_scorers(
    sizes: Sizes, out: Path, seed: int, threads: int | None = None, completion_len: int | None = None
) -> dict[str, Any]:
    """The scorer table: importance ÷ one training forward + backward, with the floors."""
    argv, report = _run_bench(sizes, "scorers", out, seed, threads, completion_len)
    if not report.get("scorers"):
        raise AssertionError("oar-rl bench wrote no scorer part")
    fig = scorer_figures(report["scorers"])
    bad = _not_finite("", {"over_train": fig["over_train"], "floors": fig["floors"]})
    if bad:
        raise AssertionError(f"oar-rl bench gave missing or non-finite figures: {bad}")
    return {
        "argv": argv,
        "shape": report["shape"],
        "machine": report["machine"],
        "wall_seconds": report["wall_seconds"],
        **fig,
    }


def step_figures(steps: dict[str, Any], parity: dict[str, Any]) -> dict[str, Any]:
    """The cost-steps figures from a bench report's ``steps`` and ``generation_parity`` (pure)."""
    none = steps["none"]
    grpo_update = none["update_seconds_per_token"]["median"] * none["tokens_per_step"]["median"]
    methods: dict[str, dict[str, Any]] = {}
    for m, s in steps.items():
        methods[m] = {
            "update_ratio": s["update_ratio_vs_grpo"],
            "update_ms_per_token": {
                k: 1000 * s["update_seconds_per_token"][k] for k in ("median", "min", "max")
            },
            "step_ratio": s["ratio_vs_grpo"] if parity["ok"] else None,
            "generation_ms_per_token": 1000 * s["generate_seconds_per_token"]["median"],
            "generation_ratio": s.get("generation_ratio_vs_grpo"),
            "importance_seconds": s["importance_seconds"],
            "peak_mib": s["peak_mib"]["median"] if s["peak_mib"] else None,
            "steps": s["steps"],
        }
    return {
        "grpo_update_seconds": grpo_update,
        "steps": none["steps"],
        "methods": methods,
        "generation_parity_ok": parity["ok"],
        "parity": bench_command.parity_lines(parity)[0],
    }


def run_cost_steps(
    sizes: Sizes, out: Path, seed: int, threads: int | None = None, completion_len: int | None = None
) -> dict[str, Any]:
    """Update sweep per action token vs GRPO over ≥ 3 interleaved steps; the whole step beside parity."""
    argv, report = _run_bench(sizes, "steps", out, seed, threads, completion_len)
    fig = step_figures(report["steps"], report["generation_parity"])
    if fig["steps"] < MIN_STEPS:
        raise AssertionError(f"{fig['steps']} measured steps per method; the check needs ≥ {MIN_STEPS}")
    checked = {
        m: {
            "update_ratio": r["update_ratio"],
            "update_ms_per_token": r["update_ms_per_token"],
            "importance_seconds": r["importance_seconds"],
            "generation_ms_per_token": r["generation_ms_per_token"],
        }
        for m, r in fig["methods"].items()
    }
    bad = _not_finite("", checked)
    if bad:
        raise AssertionError(f"oar-rl bench gave missing or non-finite figures: {bad}")
    return {
        "argv": argv,
        "shape": report["shape"],
        "machine": report["machine"],
        "wall_seconds": report["wall_seconds"],
        "completion_len": report["args"]["completion_len"],
        **fig,
    }
