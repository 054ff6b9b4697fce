"""The credit screen's tables as Markdown (`oar_rl.study.screen`): accuracies with paired differences,
contrasts and training diagnostics. Pure formatting of the records the screen computes."""

from __future__ import annotations

from typing import Any

from oar_rl.io import markdown_cell
from oar_rl.study.stats import wins_text

DIAGNOSTIC_LABELS: tuple[tuple[str, str], ...] = (
    ("oar/ess_ratio", "ESS ratio"),
    ("oar/top10_mass", "top-10% |A| mass"),
    ("oar/pivot_adv_share", "pivot share of |A|"),
    ("clip_ratio/region_mean", "clipped share"),
)
"""Logged training metrics shown per arm (means over steps, then seeds); the pivot share is measured
against the testbed's ground-truth pivots (GRPO's equals the pivots' share of the tokens)."""


def contrasts_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "## Contrasts by hypothesis (descriptive)",
        "",
        "Per seed, the arm's gap to its GRPO baseline minus the other arm's (percentage points; at the same "
        "step size this is the difference of their accuracies). Not part of the pre-registered decision, "
        "and not corrected for the number of contrasts: a reading aid for the hypotheses.",
        "",
        "| hypothesis | arm − other | seeds | Δ (95% CI) | arm ahead |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        p = r["paired"]
        lines.append(
            f"| {r['hypothesis']} | {r['arm']} − {r['versus']} | {len(p['seeds'])} | "
            f"{fmt_ci(p, signed=True)} | {wins_text(p)} |"
        )
    return "\n".join(lines) + "\n"


def diagnostics_markdown(rows: list[dict[str, Any]]) -> str:
    head = " | ".join(markdown_cell(label) for _, label in DIAGNOSTIC_LABELS)  # "|A|" would end a cell
    lines = [
        "## Training diagnostics (logged, means over the 30 steps and the seeds)",
        "",
        "Gradient norm: the arm's mean over its run divided by its baseline's on the same seed.",
        "",
        f"| arm | grad norm / baseline's | {head} |",
        "|---|" + "---:|" * (len(DIAGNOSTIC_LABELS) + 1),
    ]
    for r in rows:
        cells = ["–" if r[k] is None else f"{r[k]:.4f}" for k, _ in DIAGNOSTIC_LABELS]
        ratio = "–" if r["grad_norm_ratio"] is None else f"{r['grad_norm_ratio']:.2f}"
        lines.append(f"| {markdown_cell(r['arm'])} | {ratio} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def signed_text(x: float) -> str:
    """x with its sign and one decimal, or two where one would show a non-zero value as ±0.0 (an interval
    bound next to 0 is what a reader checks: "+0.05", not "+0.0")."""
    text = f"{x:+.1f}"
    return f"{x:+.2f}" if text in ("+0.0", "-0.0") and x != 0 else text


def fmt_ci(ci: dict[str, Any] | None, signed: bool = False) -> str:
    if not ci or ci.get("mean") is None:
        return "–"
    f = signed_text if signed else "{:.1f}".format
    if ci.get("low") is None:
        return f(ci["mean"])
    lo = f(ci["low"]) + ("*" if "low" in ci.get("clipped", ()) else "")
    hi = f(ci["high"]) + ("*" if "high" in ci.get("clipped", ()) else "")
    return f"{f(ci['mean'])} ({lo}, {hi})"


def progress_markdown(landed: dict[str, list[int]], seeds: list[int], title: str) -> str:
    """A confirmation still running: which seeds of each arm have landed, and no number (`blinded`)."""
    done, total = sum(map(len, landed.values())), len(seeds) * len(landed)
    lines = [
        f"# {title}",
        "",
        f"Running: {done} of {total} runs landed. The confirmation's figures are withheld until every arm "
        f"has its {len(seeds)} seeds: the pre-registered criterion is read once, on the complete set.",
        "",
        "| arm | seeds landed |",
        "|---|---:|",
    ]
    lines += [f"| {arm} | {len(got)}/{len(seeds)} |" for arm, got in landed.items()]
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict[str, Any]], title: str, note: str, figure: str | None = None) -> str:
    """The table; with greedy accuracies (the confirmation) two greedy columns follow the sampled ones
    and the stage column is left out. `figure`: an image line shown under the title
    (`oar_rl.study.screen_plot.image_line`)."""
    greedy = any(r.get("greedy") for r in rows)
    head = "| arm | " + ("" if greedy else "stage | ") + "seeds | accuracy % (95% CI) | "
    head += "Δ vs baseline, paired (95% CI) | baseline | wins | "
    head += ("greedy % (95% CI) | Δ greedy, paired | " if greedy else "") + "train s/run |"
    rule = (
        "|---|" + ("" if greedy else "---:|") + "---:|---:|---:|---|---:|" + ("---:|---:|" if greedy else "")
    )
    lines = [f"# {title}", "", *([figure, ""] if figure else []), note, "", head, rule + "---:|"]
    for r in rows:
        p, pg = r.get("paired"), r.get("paired_greedy")
        wins = wins_text(p) if p else "–"
        secs = "{:.0f}".format(r["train_seconds"]) if r["train_seconds"] else "–"
        cells = [r["arm"]] + ([] if greedy else [str(r["stage"])])
        cells += [str(len(r["seeds"])), fmt_ci(r["accuracy"]), fmt_ci(p, signed=True) if p else "–"]
        cells += [r["baseline"] or "–", wins]
        if greedy:
            cells += [fmt_ci(r["greedy"]), fmt_ci(pg, signed=True) if pg else "–"]
        lines.append("| " + " | ".join([*cells, secs]) + " |")
    return "\n".join(lines) + "\n"
