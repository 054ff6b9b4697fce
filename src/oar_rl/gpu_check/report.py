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
        "| scorer | dtype | relative error (limit) | Spearman ρ (limit) | top-20% overlap | result |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in d["rows"]:
        lines.append(
            f"| {r['scorer']} | {r['dtype']} | {_g(r['relative_error'])} (≤ {r['max_relative_error']:g}) "
            f"| {_f(r['spearman'], 3)} (≥ {r['min_spearman']:g}) | {_f(r.get('top20_overlap'))} "
            f"| {_verdict(r)} |"
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


def _spr(r: dict[str, Any] | None, digits: int = 2) -> str:
    """median [min–max] of a spread dict."""
    if r is None:
        return "n/a"
    return f"{r['median']:.{digits}f} [{r['min']:.{digits}f}–{r['max']:.{digits}f}]"


def _cost_scorer_lines(d: dict[str, Any]) -> list[str]:
    fl, sec, tf = d["floors"], d["seconds"], d["oar_p_token_forwards"]
    lines = [
        f"`oar-rl bench {' '.join(d['argv'])}` ({d['shape']}); one batch of {d['rows']} rows × "
        f"({d['prompt_len']} + {d['completion_len']}) tokens, every case {d['repeats']} times interleaved; "
        "full table in bench-scorers/bench.md.",
        "",
        "| case | seconds, median [min–max] | × train fwd+bwd, median [min–max] |",
        "|---|---:|---:|",
        f"| train fwd+bwd | {_spr(sec['train fwd+bwd'], 3)} | 1 |",
    ]
    for case, r in d["over_train"].items():
        lines.append(f"| {case} | {_spr(sec[case], 3)} | {_spr(r)} |")
    stride = d["oar_p_full_stride"]
    lines += [
        "",
        "- OAR-G compute floor (clean probe pass + noisy forward and input-only backward) = "
        f"{_f(fl['oar_g_floor_over_train_fwd_bwd'])}× train fwd+bwd; "
        f"OAR-G / floor {_f(fl['oar_g_over_floor'])}.",
        f"- Exact OAR-P: {tf['floor']:,} token-forwards with prefix reuse (Σ over rows and scored tokens "
        f"of the suffix each recomputes, ≈ L²/2 per row), {tf['full']:,} with whole copies (≈ R·L, "
        f"R = L); a forward is {tf['clean']:,}. Floor at the measured forward throughput "
        f"({fl['forward_tokens_per_second']:,.0f} tokens/s): {_f(fl['oar_p_floor_seconds'])} s; "
        f"measured/floor {_f(fl['oar_p_measured_over_floor'])} (prefix reuse), "
        f"{_f(fl['oar_p_full_measured_over_floor'])} (whole copies"
        f"{f', timed on every {stride}th position and scaled' if stride > 1 else ''}); prefix "
        f"reuse {_f(fl['prefix_speedup'])}× faster.",
        "- Recall of exact OAR-P's top-20% tokens: "
        + ", ".join(f"{k} {_f(v)}" for k, v in d["recall_top20_of_oar_p"].items())
        + " (a random-initialised model).",
        "",
        "Paper Fig. 7 gives the whole update sweep per token (OAR-G 1.4×, OAR-P batched 4.2×, serial 18.7× "
        "GRPO's), not importance ÷ one training pass; see cost-steps for that metric.",
    ]
    return lines


def _cost_steps_lines(d: dict[str, Any]) -> list[str]:
    ok = d["generation_parity_ok"]
    lines = [
        f"`oar-rl bench {' '.join(d['argv'])}` ({d['shape']}); {d['completion_len']} completion tokens, "
        f"{d['steps']} measured steps per method, interleaved; ratios step by step, median [min–max]; full "
        "table in bench-steps/bench.md.",
        "",
        "| method | × GRPO, update sweep per token | ms/token, update sweep | importance s/step "
        f"| ms/token, generation | {'× GRPO, whole step' if ok else 'whole step'} | peak MiB "
        "| paper Fig. 7, × GRPO |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, r in d["methods"].items():
        whole = _spr(r["step_ratio"]) if ok else "withheld"
        lines.append(
            f"| {m} | {_spr(r['update_ratio'])} | {_spr(r['update_ms_per_token'], 3)} "
            f"| {_spr(r['importance_seconds'], 3)} | {_f(r['generation_ms_per_token'], 3)} | {whole} "
            f"| {_f(r['peak_mib'], 0)} | {FIG7.get(m, 1.0 if m == 'none' else None) or 'n/a'} |"
        )
    lines += [
        "",
        f"The update sweep is the step minus generation (paper §5.2: the optimizer-update sweep per action "
        f"token): loss forward and backward, importance, optimizer, TRL's bookkeeping. GRPO's took "
        f"{_f(d.get('grpo_update_seconds'))} s per step. Paper Fig. 7 is Qwen2.5-7B on 8 H100s with vLLM at "
        f"1024 tokens: for orientation; its serial OAR-P ({FIG7['oar-p-serial']}×) is not run here.",
        "",
        d["parity"],
    ]
    if not ok:
        lines += [
            "",
            "Whole-step ratios are withheld: generation is most of a step here, and it did not match.",
        ]
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
            elif c["name"] == "cost-scorers":
                lines += _cost_scorer_lines(d)
            elif c["name"] == "cost-steps":
                lines += _cost_steps_lines(d)
            elif c["name"] == "environment":
                lines += [f"- {k}: {v}" for k, v in d.items() if not isinstance(v, (dict, list))]
        except (KeyError, TypeError, ValueError) as exc:  # a partial record must not lose the report
            lines.append(f"(details could not be rendered: {type(exc).__name__}: {exc})")
    return "\n".join(lines) + "\n"
