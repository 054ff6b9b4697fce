"""Issue 48's answers as a figure, `results/credit-why/answers.png` beside `answers.md`.

Top (`oar_rl.study.screen_plot.forest`): the paired differences the decisions read (final sampled
accuracy on the test sample, 500 problems × 4 samples per run, points, by seed): each rule against each
GRPO arm (D1: the error bar is the 95% interval, the thin line the Bonferroni-adjusted 99.5% one the
decision uses), then D2, D3 and the descriptive contrasts (95%), then Amendment 3's contrasts once its
runs are all in. Bottom: each arm's learning curve, mean over seeds with its 95% band, from the warm
start at step 0; the curves are measured every 5 steps on a smaller sample than the final accuracy
(the plan's `confirm_curve`: 150 problems × 2 samples), and the axis says so.

Drawn to be read at the docs page's width: the content column at 1280 px is about :data:`PAGE_PX` wide,
and every label is at least :data:`MIN_PX` px tall there (`tests/test_credit_why.py` measures it).

The numbers are `answers.answers`' record (`answers.json`), never recomputed here: :func:`figure_data`
only picks them out, :func:`draw` only draws them. A blinded record (the confirmation incomplete) has no
figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.credit_why.answers import BASELINES, RULES, ci_text
from oar_rl.io import savefig_atomic
from oar_rl.study.screen_plot import forest


def _row(label: str, d: dict[str, Any], adjusted: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "label": label,
        "diffs": list(d["diffs"]),
        "mean": d["mean"],
        "low": d["low"],
        "high": d["high"],
        "adj_low": adjusted["low"] if adjusted else None,
        "adj_high": adjusted["high"] if adjusted else None,
        "text": ci_text(adjusted or d),
    }


def figure_data(rec: dict[str, Any], seeds: tuple[int, ...]) -> dict[str, Any]:
    """What the figure shows, from an unblinded `answers.answers` record: {"title", "rows", "curves",
    "warm", "curve_sample"}; a row is a heading {"heading"} or a difference {"label", "diffs", "mean",
    "low", "high", "adj_low", "adj_high", "text"} (`text`: the interval the decision reads)."""
    if rec.get("blinded", True):
        raise ValueError("the confirmation is incomplete (blinded): no figure until every run is in")
    arms = rec["arms"]
    rows: list[dict[str, Any]] = [{"heading": "D1: rule − GRPO arm (error bar 95%, thin line 99.5%)"}]
    for r in RULES:
        for b in BASELINES:
            rows.append(_row(f"{r} − {b}", arms[r][f"vs_{b}"], arms[r][f"vs_{b}_adjusted"]))
    rows.append({"heading": "D2, D3 and descriptive contrasts (95%)"})
    rows.append(_row("D2 first-error − random-departure", rec["D2"]["paired"]))
    rows.append(_row("D3 first-error − lowest-prob", rec["D3"]["paired"]))
    rows += [_row(name, d) for name, d in rec["contrasts"].items()]
    amended = rec.get("amendment3") or {}
    if amended.get("complete"):
        rows.append({"heading": "Amendment 3 (95%, sampled)"})
        rows += [_row(name, c["sampled"]) for name, c in amended["contrasts"].items()]
    cs = rec.get("curve_sample") or []
    sample = f"{cs[0]} problems × {cs[1]} samples" if len(cs) == 2 else "the curve's sample"
    final = rec.get("final_sample") or []
    return {
        "final_sample": f"{final[0]} problems × {final[1]} samples" if len(final) == 2 else "the test sample",
        "title": f"Issue 48's confirmation: test split, seeds {seeds[0]}–{seeds[-1]}, paired by seed",
        "rows": rows,
        "curves": rec["curves"],
        "warm": rec["curves"]["grpo"]["mean"][0],
        "curve_sample": sample,
    }


PAGE_PX = 690
"""The docs pages' content column at a 1280 px window (Material, both sidebars), in px."""
MIN_PX = 10
"""The smallest label height the figure may have at `PAGE_PX`, in px."""
DPI = 110
"""`oar_rl.io.savefig_atomic`'s."""
WIDTH_IN, SIZE = 8.0, 10.0
"""The figure's width (inches) and its labels' size (points; the intervals' texts one point less)."""


def build(data: dict[str, Any]):
    """The matplotlib figure of `data` (:func:`figure_data`): the differences above the curves, each
    panel laid out on its own (the differences' long labels do not narrow the curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    top = 0.3 * len(rows) + 1.1
    fig = plt.figure(figsize=(WIDTH_IN, top + 4.2), layout="constrained")
    upper, lower = fig.subfigures(2, 1, height_ratios=[top, 4.2])
    ax = upper.subplots()
    forest(ax, rows, size=SIZE)
    what = f"final sampled accuracy, {data['final_sample']} per run"
    ax.set_xlabel(f"{what}:\ndifference in points (dots: seeds)", fontsize=SIZE)
    ax.tick_params(axis="x", labelsize=SIZE)
    ax.grid(alpha=0.3, axis="x")
    cx = lower.subplots()
    for i, (arm, c) in enumerate(data["curves"].items()):
        base = arm in BASELINES
        color = "0.15" if base else f"C{i}"
        style = {"ls": "--" if arm == "grpo-compute" else "-", "lw": 2 if base else 1.3, "color": color}
        cx.plot(c["steps"], c["mean"], label=arm, marker="o", ms=3, **style)
        band = [t for t in zip(c["steps"], c["low"], c["high"], strict=True) if t[1] is not None]
        if band:
            s, lo, hi = zip(*band, strict=True)
            cx.fill_between(s, lo, hi, color=color, alpha=0.08, lw=0)
    cx.axhline(data["warm"], color="0.5", lw=1, ls=":", label="warm start")
    cx.set_xlabel("training step", fontsize=SIZE)
    cx.set_ylabel(f"sampled accuracy (%), learning curve:\n{data['curve_sample']}", fontsize=SIZE)
    cx.tick_params(labelsize=SIZE)
    cx.legend(fontsize=SIZE, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    cx.grid(alpha=0.3)
    fig.suptitle(data["title"], fontsize=SIZE + 1)
    return fig


def draw(data: dict[str, Any], path: Path) -> Path:
    """`data` (:func:`figure_data`) as a PNG at `path`, written atomically."""
    import matplotlib.pyplot as plt

    fig = build(data)
    savefig_atomic(fig, path, dpi=DPI)
    plt.close(fig)
    return path
