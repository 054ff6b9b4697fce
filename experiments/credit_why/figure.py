"""Issue 48's answers as a figure, `results/credit-why/answers.png` beside `answers.md`.

Left (`oar_rl.study.screen_plot.forest`): the paired differences the decisions read (final sampled
accuracy, test, points, by seed): each rule against each GRPO arm (D1: the error bar is the 95% interval,
the thin line the Bonferroni-adjusted 99.5% one the decision uses), then D2, D3 and the descriptive
contrasts (95%). Right: each arm's learning curve on the
curve's sample, mean over seeds with its 95% band, from the warm start at step 0.

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
    cs = rec.get("curve_sample") or []
    sample = f"{cs[0]} problems × {cs[1]} samples" if len(cs) == 2 else "the curve's sample"
    return {
        "title": f"Issue 48's confirmation: test split, seeds {seeds[0]}–{seeds[-1]}, paired by seed",
        "rows": rows,
        "curves": rec["curves"],
        "warm": rec["curves"]["grpo"]["mean"][0],
        "curve_sample": sample,
    }


def draw(data: dict[str, Any], path: Path) -> Path:
    """`data` (:func:`figure_data`) as a PNG at `path`, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    fig, (ax, cx) = plt.subplots(
        1, 2, figsize=(13, 0.3 * len(rows) + 2.2), gridspec_kw={"width_ratios": [1.25, 1]}
    )
    forest(ax, rows)
    ax.set_xlabel("final sampled accuracy, difference (points); dots: seeds", fontsize=8)
    ax.grid(alpha=0.3, axis="x")

    for i, (arm, c) in enumerate(data["curves"].items()):
        base = arm in BASELINES
        color = "0.15" if base else f"C{i}"
        style = {"ls": "--" if arm == "grpo-compute" else "-", "lw": 2 if base else 1.3, "color": color}
        cx.plot(c["steps"], c["mean"], label=arm, marker="o", ms=2.5, **style)
        band = [t for t in zip(c["steps"], c["low"], c["high"], strict=True) if t[1] is not None]
        if band:
            s, lo, hi = zip(*band, strict=True)
            cx.fill_between(s, lo, hi, color=color, alpha=0.08, lw=0)
    cx.axhline(data["warm"], color="0.5", lw=1, ls=":", label="warm start")
    cx.set_xlabel("training step", fontsize=8)
    cx.set_ylabel(f"sampled accuracy (%), {data['curve_sample']}", fontsize=8)
    cx.legend(fontsize=7, ncol=2, loc="lower right")
    cx.grid(alpha=0.3)
    fig.suptitle(data["title"], fontsize=10)
    fig.tight_layout()
    savefig_atomic(fig, path)
    plt.close(fig)
    return path
