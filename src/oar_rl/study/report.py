"""The study's results: aggregation over seeds (pure), PNG plots and one self-contained HTML report.

Aggregation (`aggregate`) reads only the run records, so the report can be rebuilt from `runs/` at any
time. For every variant: final held-out accuracy (mean, 95% t-interval over seeds), its paired
difference to GRPO per seed with the interval of the differences, the accuracy-vs-step curve with its
interval, the steps to reach GRPO's final accuracy, and the mean of every `oar/*` metric TRL logged
(the credit metrics, including any a task's role hook adds). "Steps to reach" is read off the mean
curve over seeds, at the evaluated steps only (a multiple of `eval_every`, or the last step).

Intervals of accuracies and of their differences are Student-t over seeds, *clipped and marked*: cut to
the possible range ([0, 100]%, differences [-100, 100]) and the cut end marked `*` in the tables, with a
note saying so (`oar_rl.study.stats` says why not a binomial interval). With fewer than 3 seeds the
report says its intervals are not informative (1 degree of freedom: t = 12.71).

Layout: the page fits its width; a table wider than the page (the credit metrics: one column per
metric) scrolls inside its own box, and so does the study record.
"""

from __future__ import annotations

import base64
import html
import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oar_rl.io import savefig_atomic, write_text_atomic
from oar_rl.study.stats import curve_ci, mean_ci, paired_difference, steps_to_reach, t_quantile, wins_text

REFERENCE = "grpo"
ACCURACY = (0.0, 1.0)
"""The range of an accuracy; a difference of two lies in (-1, 1)."""
DIFFERENCE = (-1.0, 1.0)
INFORMATIVE_SEEDS = 3
"""Fewer seeds than this: the report says its intervals are not informative."""

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
p{overflow-wrap:break-word}.table-wrap{overflow-x:auto;max-width:100%;margin:1em 0}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 10px;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.plots img{width:48%;min-width:380px;max-width:100%;margin:4px}code{font-size:14px}
pre{overflow-x:auto;max-width:100%}.note{color:#666;font-size:90%}
.warn{border-left:4px solid #c60;padding:.4em .8em;background:#fff6ec}
"""


def _curve(run: Mapping[str, Any]) -> dict[int, float]:
    return {int(k): float(v) for k, v in run["curve"].items()}


def _credit_means(history: list[dict[str, Any]]) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for row in history:
        for k, v in row.items():
            if k.startswith("oar/") and isinstance(v, int | float):
                sums.setdefault(k, []).append(float(v))
    return {k: statistics.fmean(v) for k, v in sums.items()}


def aggregate(groups: Mapping[str, list[str]], runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per group and variant, the statistics of the module docstring over the seeds `runs` holds (the
    caller passes the runs in scope; differences to GRPO pair the seeds both have)."""
    by_variant: dict[str, dict[int, Mapping[str, Any]]] = {}
    for run in runs.values():
        by_variant.setdefault(run["variant"], {})[run["seed"]] = run
    ref_runs = by_variant.get(REFERENCE, {})
    ref_final = {s: r["final"]["sampled"] for s, r in ref_runs.items()}
    ref_curve = curve_ci([_curve(r) for r in ref_runs.values()], bounds=ACCURACY)
    ref_target = ref_curve["mean"][-1] if ref_curve["mean"] else None
    out: dict[str, Any] = {}
    for group, names in groups.items():
        results = {}
        for name in names:
            vr = by_variant.get(name, {})
            finals = {s: r["final"]["sampled"] for s, r in vr.items()}
            curve = curve_ci([_curve(r) for r in vr.values()], bounds=ACCURACY)
            credit: dict[str, list[float]] = {}
            for r in vr.values():
                for k, v in _credit_means(r.get("history", [])).items():
                    credit.setdefault(k, []).append(v)
            res: dict[str, Any] = {
                "seeds": sorted(vr),
                "final_sampled": mean_ci(list(finals.values()), bounds=ACCURACY),
                "final_greedy": mean_ci(
                    [r["final"]["greedy"] for r in vr.values() if r["final"]["greedy"] is not None],
                    bounds=ACCURACY,
                ),
                "curve": curve,
                "credit_metrics": {k: mean_ci(v) for k, v in sorted(credit.items())},
                "train_seconds": mean_ci([r["train_seconds"] for r in vr.values()]),
            }
            if ref_final and name != REFERENCE:
                res["diff_to_grpo"] = paired_difference(finals, ref_final, bounds=DIFFERENCE)
            if ref_target is not None and curve["step"]:
                res["steps_to_grpo_final"] = steps_to_reach(curve["step"], curve["mean"], ref_target)
            results[name] = res
        out[group] = results
    return out


# ----------------------------------------------------------------------------------------------------
# plots
# ----------------------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy(results: Mapping[str, Any], path: Path, title: str) -> Path | None:
    """Held-out accuracy vs step, one line per variant, the 95% t-interval shaded."""
    series = {n: r["curve"] for n, r in results.items() if r["curve"]["step"]}
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for name, c in series.items():
        (line,) = ax.plot(c["step"], c["mean"], marker="o", ms=3, lw=1.6, label=name)
        if all(v is not None for v in c["low"]):
            ax.fill_between(c["step"], c["low"], c["high"], color=line.get_color(), alpha=0.15)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("held-out accuracy (T=1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    savefig_atomic(fig, path)
    plt.close(fig)
    return path


def plot_differences(agg: Mapping[str, Mapping[str, Any]], path: Path) -> Path | None:
    """Paired difference to GRPO (final accuracy) with its 95% interval, every variant of every group."""
    rows: list[tuple[str, dict[str, Any]]] = []
    seen = set()
    for results in agg.values():
        for name, r in results.items():
            if "diff_to_grpo" in r and r["diff_to_grpo"]["mean"] is not None and name not in seen:
                seen.add(name)
                rows.append((name, r["diff_to_grpo"]))
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(rows) + 1.2))
    for i, (_name, d) in enumerate(rows):
        mean = 100 * d["mean"]
        if d["low"] is not None:
            err = [[mean - 100 * d["low"]], [100 * d["high"] - mean]]
            ax.errorbar([mean], [i], xerr=err, fmt="o", capsize=3, color="C0")
        else:
            ax.plot([mean], [i], "o", color="C0")
        ax.plot([100 * x for x in d["diffs"]], [i] * len(d["diffs"]), "x", color="0.5", ms=4)
    ax.axvline(0, color="0.3", lw=1, ls=":")
    ax.set_yticks(range(len(rows)), [n for n, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("final accuracy − GRPO's, same seed (points); bar: 95% t-interval; x: seeds")
    ax.grid(alpha=0.3, axis="x")
    savefig_atomic(fig, path)
    plt.close(fig)
    return path


def plot_recall(recall: Mapping[str, Any], key: str, path: Path, ylabel: str) -> Path | None:
    section = recall.get(key)
    if not section:
        return None
    from oar_rl.importance.baselines import CONTROLS

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for name, curve in section["recall"].items():
        ks = sorted(curve, key=float)
        style = {"ls": "--"} if name in CONTROLS else {}  # the controls dashed
        ax.plot([100 * float(k) for k in ks], [curve[k] for k in ks], marker="o", ms=3, label=name, **style)
    top = 100 * max(float(k) for k in recall["ks"])
    ax.plot([0, top], [0, top / 100], color="0.6", ls=":", lw=1, label="chance")
    ax.set_xlabel("top-K% reasoning tokens by importance")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, ncol=2)
    savefig_atomic(fig, path)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------------
# HTML
# ----------------------------------------------------------------------------------------------------
def _pct(ci: Mapping[str, Any] | None, signed: bool = False) -> str:
    if not ci or ci.get("mean") is None:
        return "–"
    from oar_rl.study.screen_report import signed_text

    def fmt(x: float) -> str:  # signed: a bound next to 0 shows which side it is on ("+0.05")
        return signed_text(100 * x) if signed else f"{100 * x:.1f}"

    text = fmt(ci["mean"])
    if ci.get("low") is not None:
        cut = ci.get("clipped") or []
        low, high = (fmt(ci[k]) + ("*" if k in cut else "") for k in ("low", "high"))
        text += f" [{low}, {high}]"
    return text


def _seed_notes(study: Mapping[str, Any]) -> list[str]:
    """Notes on the intervals: too few seeds to be informative, and bounds clipped to the range."""
    results = [r for res in study["groups"].values() for r in res.values() if r["seeds"]]
    notes = []
    fewest = min((len(r["seeds"]) for r in results), default=0)
    if fewest == 1:
        notes.append(
            "<p class='note warn'><b>Some variants have 1 seed: they have no intervals</b>, and a single "
            f"run says nothing about the spread over seeds; run {INFORMATIVE_SEEDS} or more seeds "
            f"(<code>--seeds {INFORMATIVE_SEEDS}</code>).</p>"
        )
    elif 1 < fewest < INFORMATIVE_SEEDS:
        t = t_quantile(0.975, fewest - 1)
        notes.append(
            f"<p class='note warn'><b>With {fewest} seeds these intervals are not informative</b>: a 95% "
            f"t-interval over {fewest} seeds has {fewest - 1} degree{'s' * (fewest > 2)} of freedom "
            f"(t = {t:.2f}), so it "
            f"spans about ±{t / fewest**0.5:.1f} standard deviations of the seeds around the mean and "
            "rarely excludes anything. Read the per-seed values (the wins column, the plots), or run "
            f"{INFORMATIVE_SEEDS} or more seeds (<code>--seeds {INFORMATIVE_SEEDS}</code>).</p>"
        )
    cells = [r.get(k) or {} for r in results for k in ("final_sampled", "final_greedy", "diff_to_grpo")]
    if any(c.get("clipped") for c in cells):
        notes.append(
            "<p class='note'>* The t-interval ran past the possible range (accuracy 0–100%, a difference "
            "−100 to +100) and is clipped to it: the true mean lies inside the range, so only impossible "
            "values are cut (clip-and-mark; see <code>oar_rl.study.stats</code>).</p>"
        )
    return notes


def _machines(study: Mapping[str, Any]) -> str:
    """Where the runs ran (each run file's `machine`), and which figures reproduce on another CPU."""
    from collections import Counter

    from oar_rl.machine import REPRODUCIBILITY, machine_line

    seen = Counter(machine_line(r.get("machine")) for r in study["runs"].values())
    where = "; ".join(f"{html.escape(line)} ({n} run{'s' * (n != 1)})" for line, n in seen.items())
    return f"<p class='note'>Machines: {where or 'no runs yet'}. {html.escape(REPRODUCIBILITY)}</p>"


def _num(ci: Mapping[str, Any] | None) -> str:
    if not ci or ci.get("mean") is None:
        return "–"
    text = f"{ci['mean']:.3f}"
    return text + (f" ± {ci['half_width']:.3f}" if ci.get("half_width") is not None else "")


def _reach(r: Mapping[str, Any]) -> str:
    if "steps_to_grpo_final" not in r:
        return "–"
    reach = r["steps_to_grpo_final"]
    return "not reached" if reach is None else str(reach)


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<div class='table-wrap'><table><tr>{th}</tr>{body}</table></div>"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img alt='{html.escape(path.name)}' src='data:image/png;base64,{data}'>"


def render(study: Mapping[str, Any], plots: Mapping[str, Path]) -> str:
    p = study["protocol"]
    lr = study["learning_rate"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>oar-rl study</title>",
        f"<style>{_CSS}</style></head><body><h1>oar-rl study: {html.escape(p['task'])}</h1>",
    ]
    if not study.get("complete"):
        parts.append("<p><b>Partial results</b>: the study was interrupted or is still going.</p>")
    parts.append(
        f"<p>Warm start <code>{html.escape(study['warm_start']['recipe_hash'])}</code>; every method trains "
        f"{p['steps']} steps of {p['prompts_per_step']}×{p['num_generations']} completions from it, "
        f"seeds 0–{study['scope']['seeds'] - 1}, same prompts per seed and the same hyperparameters "
        f"(learning rate {lr['value']:g}: {html.escape(lr['source'])}; probe {p['probe']}, τ {p['tau']}, "
        f"β {p['oar_beta']}). Final held-out accuracy: {p['test_problems']} test problems × "
        f"{p['eval_samples']} sample(s) at T={p['temperature']:g}; the curve every {p['eval_every']} steps "
        f"on the first {p.get('curve_problems') or p['test_problems']} × "
        f"{p.get('curve_samples') or p['eval_samples']}. Intervals are 95% Student-t over seeds; differences "
        "are paired by seed; MDE is the smallest true difference a paired t-test at 95% detects with 80% "
        "power, from the measured paired SD. Accuracies in %.</p>"
    )
    parts.extend(_seed_notes(study))
    per_method = lr.get("per_method") or {}
    if any(v != lr["value"] for v in per_method.values()):
        own = ", ".join(f"{m} {v:g}" for m, v in per_method.items())
        parts.append(
            f"<p>Learning rates, each method's own sweep choice (group <i>main</i>): {html.escape(own)}; "
            f"group <i>grpo_lr</i> trains every method at GRPO's {lr['value']:g}.</p>"
        )
    ws = study["warm_start"]["accuracy"]
    parts.append(f"<p>Warm start: {100 * ws['sampled']:.1f}% sampled, {100 * ws['greedy']:.1f}% greedy.</p>")
    parts.append(_machines(study))
    head = [
        "variant",
        "seeds",
        "final (T=1)",
        "final (greedy)",
        "Δ vs GRPO (paired)",
        "MDE (80% power)",
        "wins",
        "steps to GRPO final",
    ]
    for group, results in study["groups"].items():
        rows = []
        for name, r in results.items():
            d = r.get("diff_to_grpo")
            rows.append(
                [
                    name,
                    str(len(r["seeds"])),
                    _pct(r["final_sampled"]),
                    _pct(r["final_greedy"]),
                    _pct(d, signed=True) if d else "(reference)" if name == REFERENCE else "–",
                    f"{100 * d['mde80']:.1f}" if d and d.get("mde80") is not None else "–",
                    wins_text(d) if d else "–",
                    _reach(r),
                ]
            )
        parts.append(f"<h2>{html.escape(group)}</h2>" + _table(head, rows))
    ref = study["groups"].get("main", {}).get(REFERENCE, {}).get("curve", {})
    if ref.get("mean") and ref["mean"][-1] <= ref["mean"][0]:
        parts.append(
            "<p class='note'><b>GRPO's final accuracy is not above the warm start's</b>, so every method "
            "'reaches' it at step 0: the steps-to-reach column says nothing in this study.</p>"
        )
    keys = sorted({k for res in study["groups"].values() for r in res.values() for k in r["credit_metrics"]})
    if keys:
        rows = [
            [name] + [_num(r["credit_metrics"].get(k)) for k in keys]
            for res in study["groups"].values()
            for name, r in res.items()
        ]
        parts.append("<h2>Credit metrics (mean over steps, then seeds ± 95% half-width)</h2>")
        parts.append(_table(["variant", *keys], list({r[0]: r for r in rows}.values())))
    rec = study.get("recall") or {}
    for key, label in (("oracle", "counterfactual oracle"), ("ground_truth", "ground-truth pivots")):
        if rec.get(key):
            ks = [f"{float(k):g}" for k in rec["ks"]]
            rows = [[n] + [f"{c[k]:.2f}" for k in ks] for n, c in rec[key]["recall"].items()]
            parts.append(
                f"<h2>Recall@K% vs {label}</h2><p class='note'>{rec['trajectories']} correct warm-start "
                f"trajectories, {rec['reasoning_tokens']} reasoning tokens, pivot fraction "
                f"{rec[key]['pivot_fraction']:.2f}.</p>"
            )
            parts.append(_table(["signal", *(f"top {100 * float(k):g}%" for k in ks)], rows))
    if rec.get("skipped"):
        parts.append(f"<p class='note'>Recall analysis skipped: {html.escape(rec['skipped'])}.</p>")
    parts.append("<h2>Plots</h2><div class='plots'>" + "".join(_img(v) for v in plots.values()) + "</div>")
    if lr.get("tuning"):
        t = lr["tuning"]
        parts.append("<h2>Learning-rate choice</h2><p>" + html.escape(t["rule"]) + "</p>")
        per_method = t.get("chosen_per_method")
        results = t["results"] if per_method else {"grpo": t["results"]}  # a GRPO-only sweep (older format)
        chosen = per_method or {"grpo": t["chosen"]}
        rows = [
            [m, k, " ".join(f"{100 * a:.1f}" for a in r["accuracy"]), f"{100 * r['mean']:.1f}",
             "chosen" if r["learning_rate"] == chosen.get(m) else ""]
            for m, res in results.items()
            for k, r in res.items()
        ]  # fmt: skip
        head = ["method", "learning rate", "validation accuracy per seed", "mean", ""]
        parts.append(_table(head, rows))
        if t.get("at_edge"):
            parts.append(
                f"<p class='note'><b>At an edge of the grid</b> (optimum not bracketed): "
                f"{html.escape(', '.join(t['at_edge']))}.</p>"
            )
    runs = [
        [k, f"{100 * r['final']['sampled']:.1f}", f"{r['train_seconds']:.0f} s"]
        for k, r in sorted(study["runs"].items())
    ]
    parts.append("<h2>Every run</h2>" + _table(["run", "final (T=1)", "train time"], runs))
    if study.get("runs_outside_scope"):
        others = ", ".join(study["runs_outside_scope"])
        parts.append(
            f"<p class='note'>Also in runs/ (outside this invocation's scope): {html.escape(others)}</p>"
        )
    parts.append(f"<h2>Study record</h2><pre>{html.escape(json.dumps(study['wall'], indent=1))}\n")
    parts.append(html.escape(json.dumps(p, indent=1, sort_keys=True)) + "</pre></body></html>")
    return "\n".join(parts)


def write_outputs(study: dict[str, Any], out: Path) -> dict[str, Path]:
    """study.json, the PNG plots and report.html (all atomic); returns {plot name: path}."""
    from oar_rl.analysis.plots import plot_curves

    plots: dict[str, Path] = {}
    for group, results in study["groups"].items():
        path = plot_accuracy(results, out / f"accuracy_{group}.png", f"Held-out accuracy vs step ({group})")
        if path:
            plots[f"accuracy_{group}"] = path
    diff = plot_differences(study["groups"], out / "diff_to_grpo.png")
    if diff:
        plots["diff_to_grpo"] = diff
    for key, label in (
        ("oracle", "recall of oracle pivots"),
        ("ground_truth", "recall of ground-truth pivots"),
    ):
        path = plot_recall(study.get("recall") or {}, key, out / f"recall_{key}.png", label)
        if path:
            plots[f"recall_{key}"] = path
    histories: dict[str, list] = {}
    for r in study["runs"].values():
        if r["variant"] in study["groups"]["main"]:
            histories.setdefault(r["variant"], []).append(r["history"])
    smooth = 5 if study["protocol"]["steps"] >= 20 else 1
    for key, path in plot_curves(histories, out, smooth=smooth).items():
        plots[key] = Path(path)
    write_text_atomic(out / "study.json", json.dumps(study, indent=1, sort_keys=True))
    write_text_atomic(out / "report.html", render(study, plots))
    return plots
