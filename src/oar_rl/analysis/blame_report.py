"""`oar-rl blame`'s statistics and output: per-rollout metrics, bootstrap intervals, tables and the chart.

Every metric is computed per rollout first (`row_metrics`); a summary is the mean over rollouts with a
95% percentile bootstrap that resamples rollouts (`oar_rl.analysis.recall_stats.bootstrap_interval`),
and a paired difference (signal − control) resamples the same rollouts for both, so what the two share
cancels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from oar_rl.analysis.recall_stats import bootstrap_interval, per_row_recall
from oar_rl.shipped import shipped_recipe_hash

METRICS = ("w_error", "w_last", "error_minus_last", "outweighs", "recall@10", "recall@20")
PAIRED = ("w_error", "error_minus_last", "outweighs", "recall@10", "recall@20")
OWN = ("w_error", "w_last", "error_minus_last", "outweighs")
LABELS = {
    "w_error": "ω̃ first error",
    "w_last": "ω̃ last result",
    "error_minus_last": "error − last",
    "outweighs": "share error > last",
    "recall@10": "recall@10%",
    "recall@20": "recall@20%",
}


def token_masks(
    rows: Sequence[Mapping[str, Any]], shape: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, C) bool masks of each row's first-error tokens and last-result tokens (`rows[i]["error"]`,
    `["last"]`: completion columns)."""
    err = torch.zeros(shape, dtype=torch.bool)
    last = torch.zeros(shape, dtype=torch.bool)
    for i, r in enumerate(rows):
        err[i, r["error"]] = True
        last[i, r["last"]] = True
    return err, last


def row_metrics(
    weights: torch.Tensor,
    normalized: torch.Tensor | None,
    err: torch.Tensor,
    last: torch.Tensor,
    reasoning: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Per-rollout metrics (each (R,) float64): mean ω̃ on the error's and on the last result's tokens,
    their difference, whether the error outweighs (strictly), and, given `normalized` scores, recall@10%
    and @20% of the error tokens among the `reasoning` tokens (`causal_recall` of the row alone).

    Raises ValueError when a row has no error or no last-result token (nothing to compare)."""
    if not bool(err.any(dim=1).all()) or not bool(last.any(dim=1).all()):
        raise ValueError("every row needs at least one first-error token and one last-result token")
    w = weights.double()
    we = (w * err).sum(dim=1) / err.sum(dim=1)  # (R,)
    wl = (w * last).sum(dim=1) / last.sum(dim=1)  # (R,)
    out = {"w_error": we, "w_last": wl, "error_minus_last": we - wl, "outweighs": (we > wl).double()}
    if normalized is not None:
        rec = per_row_recall(normalized, err & reasoning, reasoning, (0.1, 0.2), list(range(err.shape[0])))
        out["recall@10"], out["recall@20"] = rec[:, 0], rec[:, 1]
    return out


def summarize(
    per_row: Mapping[str, torch.Tensor], *, seed: int, n_boot: int = 2000
) -> dict[str, list[float]]:
    """{metric: [mean, low, high]}: the mean over rollouts and its 95% bootstrap interval."""
    names = list(per_row)
    stacked = torch.stack([per_row[m] for m in names], dim=1)  # (R, M)
    lo, hi = bootstrap_interval(stacked, 0.95, n_boot, seed)
    mean = stacked.mean(dim=0).tolist()
    return {m: [mean[j], lo[j], hi[j]] for j, m in enumerate(names)}


def paired(
    a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], *, seed: int, n_boot: int = 2000
) -> dict[str, list[float]]:
    """{metric: [difference, low, high]} of a − b over the same rollouts, for the metrics of `PAIRED`."""
    return summarize({m: a[m] - b[m] for m in PAIRED if m in a and m in b}, seed=seed, n_boot=n_boot)


def _cell(v: Sequence[float], signed: bool = False) -> str:
    f = "+.2f" if signed else ".2f"
    return f"{v[0]:{f}} ({v[1]:{f}}, {v[2]:{f}})"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|---" * len(head) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def kinds_table(result: Mapping[str, Any]) -> list[str]:
    """The first errors by kind: of every wrong rollout with a located first error (`error_kinds`) and of
    the rows measured (`kinds`), each as a count and a share; [] for a record without `error_kinds`."""
    from oar_rl.data.wordproblem_errors import ERROR_KINDS

    every, measured = result.get("error_kinds"), result["kinds"]
    if every is None:
        return []
    n_every, n_measured = sum(every.values()), sum(measured.values())
    names = [k for k in ERROR_KINDS if every.get(k) or measured.get(k)]

    def cell(count: int, total: int) -> str:
        return f"{count} ({count / total:.0%})" if total else "0"

    rows = [[k.replace("_", " "), cell(every.get(k, 0), n_every), cell(measured.get(k, 0), n_measured)]
            for k in names]  # fmt: skip
    rows.append(["all", str(n_every), str(n_measured)])
    head = ["first error", "every wrong rollout with a located error", "before the last step (measured)"]
    return ["First errors by kind (count, share):", "", *_table(head, rows), ""]


def markdown(result: Mapping[str, Any]) -> str:
    """blame.md: the counts, the errors by kind, the main table, the paired differences to each control,
    own reshaping."""
    s, c = result["settings"], result["counts"]
    task = s.get("task", "wordproblems")
    model = "word-problem" if task == "wordproblems" else f"`{task}`"
    shipped = "shipped " if shipped_recipe_hash(task) == result["recipe"] else ""  # a built one is not
    lines = [  # no title: the docs page includes this file under its own heading
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}; {s['threads']} torch thread(s); "
        f"wall {result['wall_seconds']:.0f} s.  ",
        f"Model: the {shipped}{model} warm start (recipe {result['recipe']}); {s['prompts']} "
        f"{s['split']} problems × {s['samples']} samples at T = 1, seed {s['seed']}; τ = {s['tau']}, "
        f"β = {s['oar_beta']}, threshold {s['threshold']}, floor {s['floor']}.",
        "",
        "Rollouts: " + "; ".join(f"{k} {v}" for k, v in c.items()) + ". First errors of the rows "
        "measured: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in result["kinds"].items()) + ".",
        "",
        *kinds_table(result),
        f"Rows below: the {result['rows']} wrong rollouts whose first error lies before their last step. "
        "ω̃: the bi-level weight (Eq. 14-17, the trainer's `token_advantages`; 1 = GRPO's; the boost "
        "reaches 1 + β before Eq. 17's sum-preserving rescale); "
        "mean over the tokens of the first error / of the last result, then over rollouts. 95% bootstrap "
        "intervals over rollouts in brackets.",
        "",
    ]
    head = ["signal", *(LABELS[m] for m in METRICS)]
    signed = {"error_minus_last"}
    lines += _table(
        head, [[n, *(_cell(v[m], m in signed) for m in METRICS)] for n, v in result["signals"].items()]
    )
    for ctrl in ("random", "position"):
        rows = [
            [k.split(" − ")[0], *(_cell(v[m], True) for m in PAIRED)]
            for k, v in result["paired"].items()
            if k.endswith(f" − {ctrl}")
        ]
        lines += ["", f"Paired difference to `{ctrl}` (signal − {ctrl}, same rollouts):", ""]
        lines += _table(["signal", *(f"Δ {LABELS[m]}" for m in PAIRED)], rows)
    if result.get("own_reshaping"):
        lines += [
            "",
            "Each mode's own trainer reshaping (A_i = −1; random: Eq. 17 on the raw draws over the scored "
            "tokens; entropy: Eq. 6 weight A_t/A_i; grail: GRAIL's weights on wrong rollouts; a 'weights' "
            "rule: its scores; entropy-80-20: TRL's binary mask of the top 20% entropies):",
            "",
        ]
        own = result["own_reshaping"]
        rows = [[n, *(_cell(v[m], m in signed) for m in OWN)] for n, v in own.items()]
        lines += _table(["signal", *(LABELS[m] for m in OWN)], rows)
    return "\n".join(lines) + "\n"


def bar_chart(result: Mapping[str, Any], path: Path) -> None:
    """Mean ω̃ on the first error and on the last result per signal, with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from oar_rl.io import savefig_atomic

    names = list(result["signals"])
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for off, metric, label in ((-0.2, "w_error", "first error"), (0.2, "w_last", "last result")):
        vals = [result["signals"][n][metric] for n in names]
        ax.bar(
            [i + off for i in range(len(names))],
            [v[0] for v in vals],
            width=0.4,
            yerr=[[v[0] - v[1] for v in vals], [v[2] - v[0] for v in vals]],
            capsize=2,
            label=label,
        )
    ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("mean bi-level weight ω̃")
    ax.set_title(f"{result['rows']} wrong rollouts, first error before the last step (95% CI)", fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
