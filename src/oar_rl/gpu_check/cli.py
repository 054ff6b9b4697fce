"""`oar-rl gpu-check`: run every check, one progress line each, and write gpu-check.json and .md.

Checks run in a fixed order (:data:`CHECKS`); one that raises is recorded with its traceback summary and
the next one runs. The report is rewritten (atomically) after every check, so a run stopped by a time
limit still leaves the checks it finished. Exit code 0 when every check passed, 1 when one failed, 2 on
bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oar_rl.argparsing import add, add_renamed, new_parser
from oar_rl.io import ensure_writable_dir, write_text_atomic

CHECKS: tuple[str, ...] = (
    "environment",
    "train-qwen2",
    "train-llama",
    "scorer-precision",
    "scorer-parity",
    "oar-p-max-length",
    "cost-scorers",  # the scorer table at the paper's length
    "cost-steps",  # last: the longest, so a time limit costs the least
)
DEVICES = ("cuda", "cpu")


def _parse(argv: list[str]) -> argparse.Namespace:
    p = new_parser("oar-rl gpu-check", __doc__.split("\n\n")[0])
    add(
        p,
        "--device",
        default="cuda",
        choices=DEVICES,
        help="cuda: the full sizes; cpu: the same checks, tiny",
    )
    add(p, "--out", default="gpu_check_out", help="directory for gpu-check.json, gpu-check.md and bench/")
    add(p, "--checks", default=",".join(CHECKS), help=f"comma-separated subset of: {', '.join(CHECKS)}")
    add(p, "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    add(
        p,
        "--scorer-completion-len",
        type=int,
        default=None,
        help="cost-scorers completion tokens (default: 1024, the paper's length, on cuda; 8 on cpu)",
    )
    add(
        p,
        "--steps-completion-len",
        type=int,
        default=None,
        help="cost-steps completion tokens (default: 256 on cuda, 4 on cpu; steps are generation-bound: "
        "at 1024 one warm-up step took ~2 min on an H100)",
    )
    add_renamed(
        p,
        "--cost-completion-len",
        "--steps-completion-len",
        "the cost table is now two checks; --scorer-completion-len sets the scorer table's length",
    )
    add(p, "--seed", type=int, default=0)
    a = p.parse_args(argv)
    checks = [c.strip() for c in a.checks.split(",") if c.strip()]
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        p.error(f"--checks: unknown check(s) {unknown or a.checks!r}; valid: {', '.join(CHECKS)}")
    a.checks = [c for c in CHECKS if c in checks]
    if a.threads is not None and a.threads < 1:
        p.error(f"--threads must be >= 1, got {a.threads}")
    for name in ("scorer_completion_len", "steps_completion_len"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    return a


def _summary(name: str, d: dict[str, Any]) -> str:
    """One line of figures for the progress output and the report's table."""
    if name == "environment":
        versions = f"torch {d['torch']}, transformers {d.get('transformers')}, trl {d.get('trl')}"
        return f"{d['device_name']}; {versions}; {d['modules_imported']} oar_rl modules import"
    if name.startswith("train-"):
        ok = [m for m, r in d["modes"].items() if "error" not in r]
        peaks = {
            m: max(p for p in r["peak_mib"] if p is not None)
            for m, r in d["modes"].items()
            if m in ok and any(p is not None for p in r["peak_mib"])
        }
        peak = f"; peak step memory {min(peaks.values()):.0f}-{max(peaks.values()):.0f} MiB" if peaks else ""
        return f"{d['architecture']}: {len(ok)}/{len(d['modes'])} credit modes trained 2 steps{peak}"
    if name in ("scorer-precision", "scorer-parity"):
        worst = max(d["rows"], key=lambda r: r["relative_error"])
        what = f"{worst['scorer']} {worst.get('dtype', '')}".strip()
        bf16 = [
            f"{r['scorer']} bf16 ρ {r['spearman']:.3f}, top-20% overlap {r['top20_overlap']:.2f}"
            for r in d["rows"]
            if r.get("dtype") == "bfloat16" and r["scorer"].startswith("oar-g") and "top20_overlap" in r
        ]
        return (
            f"worst relative error {worst['relative_error']:.2g} ({what}); {len(d['failed'])} out of limits"
            + "".join(f"; {b}" for b in bf16)
        )
    if name == "cost-scorers":
        r = d["over_train"]
        ratios = ", ".join(f"{m} {r[m]['median']:.2f}×" for m in ("oar-g", "oar-p", "oar-gp") if m in r)
        return (
            f"importance ÷ train fwd+bwd at {d['completion_len']} tokens: {ratios} "
            f"(OAR-G/floor {d['floors']['oar_g_over_floor']:.2f}, "
            f"OAR-P/floor {d['floors']['oar_p_measured_over_floor']:.2f})"
        )
    if name == "cost-steps":
        r = {m: v for m, v in d["methods"].items() if m != "none"}
        upd = ", ".join(
            "{} {median:.2f}× [{min:.2f}–{max:.2f}]".format(m, **v["update_ratio"]) for m, v in r.items()
        )
        if d["generation_parity_ok"]:
            whole = "; generation parity ok, whole step: " + ", ".join(
                f"{m} {v['step_ratio']['median']:.2f}×" for m, v in r.items()
            )
        else:
            whole = "; generation parity FAILED: whole-step ratios withheld"
        return f"update sweep per token vs GRPO ({d['steps']} steps): {upd}{whole}"
    if name == "oar-p-max-length":
        return f"largest completion that fits: {d['largest_fitting']} tokens ({d['verdict']})"
    return ""


def _problems(name: str, d: dict[str, Any]) -> list[str]:
    if name == "environment":
        return d["problems"]
    if name.startswith("train-"):
        return [
            f"{m}: {d['modes'][m]['error']['type']}: {d['modes'][m]['error']['message'][:300]}"
            for m in d["failed"]
        ]
    if name in ("scorer-precision", "scorer-parity"):
        return d["failed"]
    if name == "oar-p-max-length" and d["largest_fitting"] is None:
        return [f"not even {d['trials'][0]['completion_len']} completion tokens fit"]
    return []


def _runner(name: str, args: argparse.Namespace, sizes, out: Path, progress: Callable[[str], None]):
    from oar_rl.gpu_check import cost, environment, memory, scorers, training

    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "environment": lambda: environment.run_environment(args.device),
        "train-qwen2": lambda: training.run_training("qwen2", sizes, args.seed, progress),
        "train-llama": lambda: training.run_training("llama", sizes, args.seed, progress),
        "scorer-precision": lambda: scorers.run_precision(sizes, args.seed, progress),
        "scorer-parity": lambda: scorers.run_parity(sizes, args.seed, progress),
        "cost-scorers": lambda: cost.run_cost_scorers(
            sizes, out, args.seed, args.threads, args.scorer_completion_len
        ),
        "cost-steps": lambda: cost.run_cost_steps(
            sizes, out, args.seed, args.threads, args.steps_completion_len
        ),
        "oar-p-max-length": lambda: memory.run_memory(sizes, progress),
    }
    return runners[name]


def time_estimate(sizes, checks: list[str]) -> str:
    """The expected wall time of `checks` at `sizes` (the last measured run's per-check seconds)."""
    total = sum(sizes.expected_seconds.get(c, 0.0) for c in checks)
    where = "an H200 (2026-11-30)" if sizes.device == "cuda" else "this project's shared 2-core CPU"
    return f"expected about {total / 60:.1f} min on {where}"


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def run_checks(args: argparse.Namespace, out: Path, command: str) -> dict[str, Any]:
    """Run `args.checks`, rewriting the report after each; returns the final report."""
    from oar_rl.gpu_check.report import error_summary, markdown
    from oar_rl.gpu_check.sizes import SIZES

    sizes = SIZES[args.device]
    started = time.perf_counter()
    report: dict[str, Any] = {
        "command": command,
        "device": args.device,
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": 0.0,
        "checks": [],
        "passed": False,
    }
    n = len(args.checks)
    print(
        f"[gpu-check] {n} checks: {', '.join(args.checks)}; {time_estimate(sizes, args.checks)}", flush=True
    )
    for i, name in enumerate(args.checks, 1):
        tag = f"[gpu-check {i}/{n}] {name}"
        t0 = time.perf_counter()

        def progress(msg: str, tag: str = tag, t0: float = t0) -> None:
            print(f"{tag}: {msg} ({time.perf_counter() - t0:.0f} s)", flush=True)

        progress("started")
        record: dict[str, Any] = {"name": name, "status": "failed", "seconds": 0.0, "summary": ""}
        try:
            details = _runner(name, args, sizes, out, progress)()
            problems = _problems(name, details)
            record.update(status="failed" if problems else "passed", details=details, problems=problems)
            record["summary"] = _summary(name, details)
            if name == "environment":
                report["environment"] = details
        except Exception as exc:  # recorded; the next check still runs
            record["error"] = error_summary(exc)
            record["summary"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        finally:
            _free(args.device)
        record["seconds"] = time.perf_counter() - t0
        if record.get("problems"):
            record["summary"] += " -- " + "; ".join(record["problems"])[:400]
        report["checks"].append(record)
        report["wall_seconds"] = time.perf_counter() - started
        report["passed"] = all(c["status"] == "passed" for c in report["checks"])
        write_text_atomic(out / "gpu-check.json", json.dumps(report, indent=2, default=str))
        write_text_atomic(out / "gpu-check.md", markdown(report))
        print(
            f"{tag}: {record['status'].upper()} in {record['seconds']:.1f} s -- {record['summary']}",
            flush=True,
        )
    return report


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    try:
        out = ensure_writable_dir(args.out)
    except ValueError as exc:
        print(f"oar-rl gpu-check: {exc}", file=sys.stderr)
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "oar-rl gpu-check: --device cuda, but torch sees no CUDA device "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); use --device cpu for the "
            "tiny CPU run",
            file=sys.stderr,
        )
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    from oar_rl.console import silence_known_warnings

    silence_known_warnings()
    report = run_checks(args, out, "oar-rl gpu-check " + " ".join(argv))
    failed = [c["name"] for c in report["checks"] if c["status"] != "passed"]
    print(
        f"[gpu-check] {len(report['checks']) - len(failed)}/{len(report['checks'])} checks passed"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
        + f" ({report['wall_seconds'] / 60:.1f} min); wrote {out / 'gpu-check.json'} and gpu-check.md"
    )
    return 1 if failed else 0
