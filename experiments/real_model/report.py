"""The real-model figure's output: recall.json, recall.md, the recall plots and the heatmaps.

Every table carries the two controls, `position` (later reasoning tokens first) and `random`, with each
signal's paired difference to both (`oar_rl.analysis.recall_stats.control_differences`), beside the few paired
comparisons between signals of `experiments.real_model.recall.PAIRS`; and, for references, recall per
reasoning step (`experiments.real_model.steps`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from oar_rl.analysis.recall import plot_recall
from oar_rl.analysis.recall_stats import (
    band_json,
    control_differences,
    curve_json,
    paired_json,
    recall_bands,
    recall_curves,
    recall_difference,
)
from oar_rl.io import write_text_atomic

TABLE_KS = (0.1, 0.2, 0.3, 0.5)
MAIN_CURVES = (
    "oar-p/lt-logits", "oar-p/as-mean", "oar-g/lt-logits", "oar-g/as-mean", "grail", "entropy", "position",
    "random",
)  # fmt: skip
"""The curves of recall.png (recall_all_probes.png has every signal)."""


def _diff_rows(paired: Mapping[str, Mapping[float, Sequence[float]]]) -> list[str]:
    return [
        f"| {k} | " + " | ".join(f"{d[x][0]:+.2f} ({d[x][1]:+.2f}, {d[x][2]:+.2f})" for x in TABLE_KS) + " |"
        for k, d in paired.items()
    ]


def write_figure(
    out: Path,
    result: dict[str, Any],
    scores: Mapping[str, torch.Tensor],
    oracle: torch.Tensor,
    mask: torch.Tensor,
    ks: Sequence[float],
    *,
    seed: int,
    pairs: Sequence[tuple[str, str]],
    steps: torch.Tensor | None = None,
) -> str:
    """Compute the curves, intervals, paired differences (and per-step recall when `steps` is given),
    add them to `result`, write recall.json, recall.md and the two recall plots; returns the Markdown."""
    from experiments.real_model.steps import per_step_markdown, per_step_recall

    recalls = recall_curves(scores, oracle, mask, ks)
    bands = recall_bands(scores, oracle, mask, ks, seed=seed)
    between = {
        f"{x} − {y}": recall_difference(scores[x], scores[y], oracle, mask, ks, seed=seed)
        for x, y in pairs
        if x in scores and y in scores
    }
    controls = control_differences(scores, oracle, mask, ks, seed=seed)
    result.update(
        recall={k: curve_json(c) for k, c in recalls.items()},
        recall_ci95={k: band_json(b) for k, b in bands.items()},
        paired_difference=paired_json(between),
        paired_to_controls=paired_json(controls),
    )
    head = "| signal | " + " | ".join(f"top {100 * x:g}%" for x in TABLE_KS) + " |"
    lines = [head, "|---" * (len(TABLE_KS) + 1) + "|"]
    for k, c in recalls.items():
        cells = [f"{c[x]:.2f} ({bands[k][x][0]:.2f}–{bands[k][x][1]:.2f})" for x in TABLE_KS]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    diff_head = "| paired difference (95% CI) | " + " | ".join(f"top {100 * x:g}%" for x in TABLE_KS) + " |"
    lines += ["", diff_head, "|---" * (len(TABLE_KS) + 1) + "|", *_diff_rows(between)]
    lines += ["", "Paired difference of every signal to the controls (position: later tokens first):", ""]
    lines += [diff_head, "|---" * (len(TABLE_KS) + 1) + "|", *_diff_rows(controls)]
    if steps is not None:
        result["per_step"] = per_step_recall(scores, oracle, mask, steps, seed=seed)
        lines += ["", "## Recall per reasoning step (experiments.real_model.steps)", ""]
        lines.append(per_step_markdown(result["per_step"]))
    markdown = "\n".join(lines) + "\n"
    write_text_atomic(out / "recall.json", json.dumps(result, indent=2) + "\n")
    write_text_atomic(out / "recall.md", markdown)
    with_pivot = result["with_pivot"]
    for tag, keys in (
        ("recall.png", [k for k in MAIN_CURVES if k in recalls]),
        ("recall_all_probes.png", recalls),
    ):
        plot_recall({k: recalls[k] for k in keys}, out / tag, {k: bands[k] for k in keys},
                    n=result["finishable"], with_pivot=with_pivot)  # fmt: skip
    return markdown
