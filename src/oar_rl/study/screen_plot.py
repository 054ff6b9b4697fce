"""The credit screen's figure (`oar_rl.study.screen`): each arm's paired difference to its GRPO baseline,
`screen.png` beside `screen.md` and `confirm.png` beside `confirm.md`.

One row per arm in the table's order: the per-seed differences as dots, their mean with its 95%
t-interval as a bar, a line at 0; with the table's stages, the arms are grouped under a heading per
stage. The numbers are the table's (`summarize`'s `paired`, from `oar_rl.study.stats`), never recomputed
here: :func:`figure_data` only picks them out, :func:`draw` only draws them (with :func:`forest`, the
rows-of-paired-differences plot that issue 48's answers figure shares).

A confirmation that is still running (`oar_rl.study.screen.blinded`) gets no figure at all: the report
calls neither function then, and removes a figure left from an earlier, complete set of runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oar_rl.io import savefig_atomic
from oar_rl.study.config import protocol_hash
from oar_rl.study.screen_plan import ScreenPlan
from oar_rl.study.screen_report import fmt_ci

METRIC = "final sampled accuracy, arm − its GRPO baseline on the same seed (percentage points)"


def image_line(kind: str) -> str:
    """The Markdown line under the report's title that shows `<kind>.png` (a path beside the .md)."""
    what = "screen" if kind == "screen" else "confirmation"
    return f"![Credit {what}: paired difference to the GRPO baseline, per arm and seed]({kind}.png)"


def _seed_text(seeds: Sequence[int]) -> str:
    s = list(seeds)
    if s and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))


def figure_data(
    rows: list[dict[str, Any]],
    *,
    kind: str,
    split: str,
    seeds: Sequence[int],
    protocol_hash: str,
    decision_stages: Sequence[int] = (),
) -> dict[str, Any]:
    """What the figure shows, from the table's rows (`oar_rl.study.screen.summarize`), in their order.

    Returns {"title", "xlabel", "rows"}; each row is a stage heading {"heading": "stage 1 · decision"}
    (only where the table has a stage column: no greedy accuracies) or an arm {"arm", "stage",
    "baseline", "seeds", "diffs", "mean", "low", "high", "text"}: the paired differences per seed and
    their mean and 95% t-interval exactly as the table's Δ column (`text` is that cell; a baseline arm,
    or an arm with no paired seed yet, has no seeds and None for the numbers)."""
    staged = not any(r.get("greedy") for r in rows)  # as `screen_report.markdown`: its stage column
    what = "screen" if kind == "screen" else "confirmation"
    title = (
        f"Credit {what}: {split} split, {len(seeds)} seeds ({_seed_text(seeds)})\n"
        f"{METRIC}\nprotocol {protocol_hash}"
    )
    out: list[dict[str, Any]] = []
    stage = None
    for r in rows:
        if staged and r["stage"] != stage:
            stage = r["stage"]
            role = "decision" if stage in decision_stages else "after the decision"
            out.append({"heading": f"stage {stage} · {role}" if decision_stages else f"stage {stage}"})
        p = r.get("paired") or {}
        out.append(
            {
                "arm": r["arm"],
                "stage": r["stage"],
                "baseline": r["baseline"],
                "seeds": list(p.get("seeds", [])),
                "diffs": list(p.get("diffs", [])),
                "mean": p.get("mean"),
                "low": p.get("low"),
                "high": p.get("high"),
                "text": fmt_ci(p, signed=True) if p else "–",
            }
        )
    xlabel = "Δ vs baseline, paired by seed (points); dots: seeds; bar: mean and 95% t-interval"
    return {"title": title, "xlabel": xlabel, "rows": out}


def forest(ax: Any, rows: list[dict[str, Any]], size: float = 8) -> None:
    """Draw `rows` top to bottom on `ax`: a heading {"heading"} as a bold label under a rule, a difference
    {"diffs", "mean", "low", "high", "text", and a label "arm" or "label"} as its per-seed dots, its mean
    with the interval as an error bar and `text` at the right; optional "adj_low"/"adj_high" (a wider,
    adjusted interval) as a thin whisker; a row with mean None as a note ("baseline" when its "baseline"
    is None, else "no paired seed yet"). A line marks 0. `size`: the labels' font size in points (the
    notes and interval texts one point smaller)."""
    from matplotlib.transforms import blended_transform_factory

    right = blended_transform_factory(ax.transAxes, ax.transData)  # x in axes fraction, y in rows
    for y, r in enumerate(rows):
        if "heading" in r:
            if y:
                ax.axhline(y - 0.5, color="0.8", lw=0.8)
            continue
        if r["mean"] is None:
            note = "baseline" if r.get("baseline") is None else "no paired seed yet"
            ax.text(0, y, f" {note}", va="center", ha="left", fontsize=size - 1, color="0.45", style="italic")
            continue
        n = len(r["diffs"])
        step = min(0.09, 0.5 / max(n - 1, 1))  # seeds spread in their order over at most half a row
        jitter = [step * (j - (n - 1) / 2) for j in range(n)]  # (no randomness: the same figure every time)
        ax.plot(r["diffs"], [y + d for d in jitter], "o", ms=3, color="0.55", alpha=0.8, zorder=2)
        if r.get("adj_low") is not None:
            ax.plot([r["adj_low"], r["adj_high"]], [y, y], color="C0", lw=1, zorder=3)
        if r["low"] is not None:
            err = [[r["mean"] - r["low"]], [r["high"] - r["mean"]]]
            ax.errorbar([r["mean"]], [y], xerr=err, fmt="o", ms=5, capsize=3, color="C0", zorder=3)
        else:  # one seed: no interval
            ax.plot([r["mean"]], [y], "o", ms=5, color="C0", zorder=3)
        ax.text(1.01, y, r["text"], transform=right, va="center", ha="left", fontsize=size - 1)
    ax.axvline(0, color="0.3", lw=1, ls=":", zorder=1)
    labels = [r.get("heading") or r.get("arm") or r["label"] for r in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=size)
    for tick, r in zip(ax.get_yticklabels(), rows, strict=True):
        if "heading" in r:
            tick.set_fontweight("bold")
    ax.set_ylim(max(len(rows), 1) - 0.5, -0.5)  # the table's order, top to bottom


def draw(data: dict[str, Any], path: Path) -> Path:
    """`data` (:func:`figure_data`) as a PNG at `path`, written atomically (`oar_rl.io.savefig_atomic`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(rows) + 1.9))
    forest(ax, rows)
    if not rows:
        ax.text(0.5, 0.5, "no runs yet", transform=ax.transAxes, ha="center", va="center", color="0.45")
    ax.set_xlabel(data["xlabel"], fontsize=8)
    ax.set_title(data["title"], fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    savefig_atomic(fig, path)
    plt.close(fig)
    return path


def write_figure(
    path: Path, rows: list[dict[str, Any]], kind: str, plan: ScreenPlan, protocol: dict[str, Any]
) -> str:
    """Draw the report's figure of `rows` (a complete screen or confirmation of `plan`, `kind` "screen"
    or "confirm", under `protocol`) at `path`; returns the image line for its .md. Never called on a
    blinded confirmation."""
    seeds = plan.screen_seeds if kind == "screen" else plan.confirm_seeds
    data = figure_data(
        rows,
        kind=kind,
        split=plan.eval[kind][0],
        seeds=seeds,
        protocol_hash=protocol_hash(protocol),
        decision_stages=plan.decision_stages if kind == "screen" else (),
    )
    draw(data, path)
    return image_line(kind)
