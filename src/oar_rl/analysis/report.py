"""The self-contained HTML report of `oar-rl demo`: accuracy tables, training curves, a token heatmap.

Plots are embedded as base64 PNGs so the single file can be moved or mailed. Written atomically.
"""

from __future__ import annotations

import base64
import html
import json
import os
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oar_rl.io import write_text_atomic

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 10px;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.plots img{width:48%;min-width:380px;margin:4px}code{font-size:14px}
.oar-heatmap td{line-height:1.9}.note{color:#666;font-size:90%}
"""


def _fmt(values: list[float]) -> str:
    if not values:
        return "–"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{100 * mean:.1f}%"
    return f"{100 * mean:.1f}% ± {100 * statistics.stdev(values):.1f}"


def accuracy_table(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per method: seeds done and the before/after accuracies (sampled at T=1 and greedy) over seeds."""
    by_method: dict[str, list[Mapping[str, Any]]] = {}
    for run in summary.get("runs", {}).values():
        by_method.setdefault(run["method"], []).append(run)
    rows = []
    for method in summary.get("config", {}).get("methods", sorted(by_method)):
        runs = by_method.get(method, [])
        row: dict[str, Any] = {"method": method, "seeds": len(runs)}
        for when in ("before", "after"):
            for kind in ("sampled", "greedy"):
                row[f"{when}_{kind}"] = [r[when][kind] for r in runs if r.get(when)]
        row["delta_sampled"] = [r["after"]["sampled"] - r["before"]["sampled"] for r in runs]
        row["train_seconds"] = [r.get("train_seconds", 0.0) for r in runs]
        rows.append(row)
    return rows


def render_report(
    summary: Mapping[str, Any], plots: Mapping[str, str | os.PathLike], heatmap: str | None = None
) -> str:
    """The report as one HTML string (plots read from disk and inlined)."""
    cfg = summary.get("config", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>oar-rl demo report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>oar-rl demo: GRPO vs OAR on synthetic arithmetic</h1>",
    ]
    if not summary.get("complete", False):
        parts.append("<p><b>Partial results</b>: the run was interrupted or is still going.</p>")
    ws = summary.get("warm_start", {})
    parts.append(
        "<p>Warm start: a tiny char-level Qwen2 trained by supervised fine-tuning on worked solutions "
        f"(recipe <code>{html.escape(str(ws.get('recipe_hash', '?')))}</code>). Held-out split "
        f"<code>{html.escape(str(cfg.get('eval_split', '?')))}</code>, "
        f"{cfg.get('eval_problems', '?')} problems; "
        "accuracy is mean over seeds ± standard deviation.</p>"
    )
    parts.append(
        "<h2>Held-out accuracy</h2><table><tr><th>method</th><th>seeds</th><th>before (T=1)</th>"
        "<th>after (T=1)</th><th>Δ (T=1)</th><th>before (greedy)</th><th>after (greedy)</th>"
        "<th>train time / run</th></tr>"
    )
    for row in accuracy_table(summary):
        secs = row["train_seconds"]
        t = f"{statistics.fmean(secs):.0f} s" if secs else "–"
        cells = [row["before_sampled"], row["after_sampled"], row["delta_sampled"]]
        cells += [row["before_greedy"], row["after_greedy"]]
        tds = "".join(f"<td class='num'>{_fmt(c)}</td>" for c in cells)
        parts.append(f"<tr><td>{html.escape(row['method'])}</td><td class='num'>{row['seeds']}</td>{tds}")
        parts.append(f"<td class='num'>{t}</td></tr>")
    parts.append("</table>")
    if plots:
        parts.append("<h2>Training curves</h2><p class='note'>Line: mean over seeds; band: min–max.</p>")
        parts.append("<div class='plots'>")
        for key, path in plots.items():
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            parts.append(f"<img alt='{html.escape(key)}' src='data:image/png;base64,{data}'>")
        parts.append("</div>")
    if heatmap:
        parts.append("<h2>Token importance of one trace</h2>")
        parts.append(
            "<p class='note'>The warm-start model's greedy solution of a held-out problem; each character "
            "before the answer is coloured by its normalised importance (Eq. 14) under OAR-P (perturbation) "
            "and OAR-G (input gradient) with the probe used for training; the answer span and what "
            "follows are not scored (grey; they keep weight 1). Hover a character for its value.</p>"
        )
        parts.append(heatmap)
    parts.append("<h2>Configuration</h2><pre>")
    parts.append(html.escape(json.dumps(cfg, indent=2, sort_keys=True)))
    parts.append("</pre></body></html>")
    return "\n".join(parts)


def write_report(
    path: str | os.PathLike,
    summary: Mapping[str, Any],
    plots: Mapping[str, str | os.PathLike],
    heatmap: str | None = None,
) -> Path:
    """Render and write the report atomically; returns its path."""
    write_text_atomic(path, render_report(summary, plots, heatmap))
    return Path(path)
