"""gpu-check's report: failures as traceback summaries, and the Markdown page beside the JSON."""

from __future__ import annotations

import traceback
from typing import Any

FIG7 = {"oar-g": 1.4, "oar-p": 4.2, "oar-p-serial": 18.7}
"""Paper Fig. 7: each method's training step as a multiple of GRPO's (Qwen2.5-7B, 8 H100s)."""


def error_summary(exc: BaseException, frames: int = 6, chars: int = 4000) -> dict[str, Any]:
    """The exception's type and message, its last `frames` frames as 'file:line in function', and the
    formatted traceback's last `chars` characters."""
    tb = traceback.extract_tb(exc.__traceback__)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "type": type(exc).__name__,
        "message": str(exc)[:2000],
        "frames": [f"{f.filename.split('site-packages/')[-1]}:{f.lineno} in {f.name}" for f in tb[-frames:]],
        "traceback": text[-chars:],
    }


def _f(x: Any, digits: int = 2, scale: float = 1.0) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return str(x)
    return f"{x * scale:.{digits}f}" if isinstance(x, (int, float)) else str(x)


def _g(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _verdict(row: dict[str, Any]) -> str:
    return "pass" if row["passed"] else f"**FAIL**: {row['why']}"


def _training_lines(name: str, d: dict[str, Any]) -> list[str]:
    lines = [
        f"{d['architecture']} ({d['shape']} shape, {d['parameters'] / 1e6:.1f}M parameters), {d['dtype']}, "
        f"{d['attention']}, {d['rows_per_step']} completions × {d['completion_len']} tokens per step, "
        f"learning rate {d['learning_rate']:g}:",
        "",
        "| credit | loss (steps 1, 2) | oar/ess_ratio | oar/top10_mass | importance s | step s | peak MiB "
        "| weights moved |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, r in d["modes"].items():
        if "error" in r:
            lines.append(
                f"| {mode} | **failed**: {r['error']['type']}: {r['error']['message'][:150]} |||||||"
            )
            continue
        oar = r["oar"]
        peaks = [p for p in r["peak_mib"] if p is not None]
        lines.append(
            f"| {mode} | {', '.join(_g(x) for x in r['loss'])} | {_f(oar['oar/ess_ratio'][-1])} "
            f"| {_f(oar['oar/top10_mass'][-1])} | {_f(oar['oar/importance_seconds'][-1], 3)} "
            f"| {_f(max(r['step_seconds']))} | {_f(max(peaks), 0) if peaks else 'n/a'} "
            f"| {r['parameters_changed']} tensors |"
        )
    return lines


def _precision_lines(d: dict[str, Any]) -> list[str]:
    b = d["batch"]
    lines = [
        f"{d['model']}; {b['rows']} rows × ({b['prompt_len']} + {b['completion_len']}) tokens, "
        f"{b['valid_tokens']} valid completion tokens; reference: {d['reference']}.",
        "",
        "| scorer | dtype | relative error (limit) | Spearman ρ (limit) | result |",
        "|---|---|---:|---:|---|",
    ]
    for r in d["rows"]:
        lines.append(
            f"| {r['scorer']} | {r['dtype']} | {_g(r['relative_error'])} (≤ {r['max_relative_error']:g}) "
            f"| {_f(r['spearman'], 3)} (≥ {r['min_spearman']:g}) | {_verdict(r)} |"
        )
    return lines


def _parity_lines(d: dict[str, Any]) -> list[str]:
    lines = [
        f"{d['compared']}:",
        "",
        "| scorer | relative error (limit) | Spearman ρ (limit) | result |",
        "|---|---:|---:|---|",
    ]
    for r in d["rows"]:
        lines.append(
            f"| {r['scorer']} | {_g(r['relative_error'])} (≤ {r['max_relative_error']:g}) "
            f"| {_f(r['spearman'], 3)} (≥ {r['min_spearman']:g}) | {_verdict(r)} |"
        )
    return lines


def _memory_lines(d: dict[str, Any]) -> list[str]:
    lines = [
        f"{d['model']}; {d['rows']} rows, the first chunk of {d['copies']} perturbed copies (OARConfig's "
        f"default perturbation_batch_size) at each completion length; device memory "
        f"{_f(d['device_mib'], 0)} MiB:",
        "",
        "| completion tokens | result | peak MiB above the model | seconds |",
        "|---:|---|---:|---:|",
    ]
    for r in d["trials"]:
        lines.append(
            f"| {r['completion_len']} | {r['result']} | {_f(r.get('peak_mib'), 0)} | {_f(r.get('seconds'))} |"
        )
    lines += ["", f"Largest completion that fits: **{d['largest_fitting']}** tokens ({d['verdict']})."]
    return lines


def _cost_lines(d: dict[str, Any]) -> list[str]:
    lines = [
        f"`oar-rl bench {' '.join(d['argv'])}` ({d['shape']}); full tables in bench/bench.md.",
        "",
        "| method | × GRPO, step | × GRPO, update sweep | ms/token, step | ms/token, generation "
        "| importance s/step | importance ÷ GRPO update | peak MiB | paper Fig. 7, × GRPO |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, r in d["methods"].items():
        lines.append(
            f"| {m} | {_f(r['step_ratio'])} | {_f(r['update_ratio'])} | {_f(r['ms_per_token'], 3)} "
            f"| {_f(r['generation_ms_per_token'], 3)} | {_f(r['importance_seconds'], 3)} "
            f"| {_f(r.get('importance_over_grpo_update'))} "
            f"| {_f(r['peak_mib'], 0)} | {FIG7.get(m, 1.0 if m == 'none' else None) or 'n/a'} |"
        )
    lines += [
        "",
        f"GRPO's update sweep (step minus generation: loss forward + backward, optimizer, TRL's "
        f"bookkeeping) took {_f(d.get('grpo_update_seconds'))} s per step. Paper Fig. 7 is Qwen2.5-7B on "
        "8 H100s with vLLM generation: for orientation, not a like-for-like comparison; its serial OAR-P "
        f"is {FIG7['oar-p-serial']}× (not run here).",
    ]
    s = d.get("scorers") or {}
    if s:
        lines += [
            "",
            "Importance on one batch as a multiple of one training forward + backward: "
            + ", ".join(f"{k} {_f(v)}×" for k, v in s.items())
            + ".",
        ]
    lines += ["", d["parity"]]
    return lines


def markdown(report: dict[str, Any]) -> str:
    """The Markdown report of a (possibly partial) gpu-check run."""
    env = report.get("environment", {})
    lines = [
        "# oar-rl gpu-check",
        "",
        f"`{report['command']}` on {env.get('device_name', '?')} ({report['device']}); "
        f"torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}, "
        f"trl {env.get('trl', '?')}; "
        f"started {report['started']}, wall time {report['wall_seconds'] / 60:.1f} min.",
        "",
        "| check | result | seconds | summary |",
        "|---|---|---:|---|",
    ]
    for c in report["checks"]:
        lines.append(f"| {c['name']} | {c['status']} | {c['seconds']:.1f} | {c['summary']} |")
    for c in report["checks"]:
        lines += ["", f"## {c['name']}: {c['status']}", ""]
        if c.get("error"):
            e = c["error"]
            lines += [f"{e['type']}: {e['message']}", "", "```", *e["frames"], "```"]
        d = c.get("details")
        if not d:
            continue
        try:
            if c["name"].startswith("train-"):
                lines += _training_lines(c["name"], d)
            elif c["name"] == "scorer-precision":
                lines += _precision_lines(d)
            elif c["name"] == "scorer-parity":
                lines += _parity_lines(d)
            elif c["name"] == "oar-p-max-length":
                lines += _memory_lines(d)
            elif c["name"] == "cost-table":
                lines += _cost_lines(d)
            elif c["name"] == "environment":
                lines += [f"- {k}: {v}" for k, v in d.items() if not isinstance(v, (dict, list))]
        except (KeyError, TypeError, ValueError) as exc:  # a partial record must not lose the report
            lines.append(f"(details could not be rendered: {type(exc).__name__}: {exc})")
    return "\n".join(lines) + "\n"
