"""Recall statistics, all of them: recall@K% of labelled tokens under an importance score, its bootstrap
intervals, paired differences between scores and to the controls, and their JSON and Markdown forms.

Recall@K% (paper §5.1): the share of a trajectory's labelled tokens (the oracle's causal pivots, the
testbed's ground-truth pivots, a wrong rollout's first error) found among its top-K% tokens by an
importance score, averaged over the trajectories that have at least one. The labels come from elsewhere
(`oar_rl.analysis.oracle` for the counterfactual oracle); everything here is pure tensor arithmetic.

Intervals: a percentile bootstrap over trajectories (rows), 1000 resamples. The interval is
`scipy.stats.bootstrap(method="percentile")` over the bootstrap distribution of the column means; the
resamples themselves are drawn with `torch.randint` from a `torch.Generator` seeded `seed` (an n_boot ×
R matrix of row indices), the draws every committed recall and blame table was made with, so those
tables reproduce to the last printed digit (SciPy's own draws, from a NumPy generator, differ; a test
checks the interval against torch.quantile of the same draws). A paired difference resamples the rows
once for both scores, so what the two share cancels.

Controls (`CONTROLS`, `oar_rl.importance.baselines`): `random` and `position`; `control_differences`
pairs every other signal with each control present.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from oar_rl.importance.baselines import CONTROLS
from oar_rl.metrics import top_k_probability

KS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The K fractions of `oar-rl oracle`'s table."""


def causal_recall(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    ks: Sequence[float] = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
) -> dict[float, float]:
    """Recall of oracle pivots within each row's top-K% tokens by score, averaged over rows with a pivot.

    Args:
        scores: (N, C) importance (any monotone transform gives the same result). labels: (N, C) bool
            oracle pivots. mask: (N, C) valid tokens. ks: fractions in (0, 1]; top-K% keeps
            max(1, round(k·T)) tokens of a row with T valid tokens.

    Ties at the cut are broken uniformly at random and the *expected* recall is returned (exact, as
    `oar_rl.metrics.pivot_recall_at_k`): with n_tie tokens tied at the K-th score, p_tie of them labelled,
    and `slots` places left, the tie adds slots · p_tie / n_tie hits. (Breaking ties by position, as
    before, favoured early tokens: a signal that scores one token and ties the rest, such as
    first-error, had its top-K% filled with the row's first tokens.)

    Returns:
        {k: mean recall}; NaN-free (rows without a pivot are skipped; 0.0 if no row has one).
    """
    if scores.shape != labels.shape or scores.shape != mask.shape:
        raise ValueError(
            f"scores, labels and mask must share a shape, got {tuple(scores.shape)}, "
            f"{tuple(labels.shape)}, {tuple(mask.shape)}"
        )
    bad = [k for k in ks if not 0.0 < float(k) <= 1.0]
    if bad:
        raise ValueError(f"ks must be fractions in (0, 1], got {bad}")
    mask = mask.bool()
    labels = labels.bool() & mask
    has_pivot = labels.any(dim=1)  # (N,)
    if not bool(has_pivot.any()):
        return {float(k): 0.0 for k in ks}
    counts = mask.sum(dim=1)  # (N,)
    pivots = labels.sum(dim=1).clamp_min(1).double()  # (N,)
    out = {}
    for k in ks:
        keep = torch.clamp(torch.round(float(k) * counts.double()).long(), min=1)  # (N,)
        hit = (top_k_probability(scores.float(), mask, keep) * labels).sum(dim=1)  # (N,): expected hits
        out[float(k)] = float((hit / pivots)[has_pivot].mean())
    return out


def per_row_recall(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, ks: Sequence[float], rows: list[int]
) -> torch.Tensor:
    """(R, K) float64: `causal_recall` of each of `rows` alone, at each k."""
    return torch.tensor(
        [
            [causal_recall(scores[r : r + 1], labels[r : r + 1], mask[r : r + 1], ks)[float(k)] for k in ks]
            for r in rows
        ],
        dtype=torch.float64,
    )


def bootstrap_interval(
    per_row: torch.Tensor, level: float, n_boot: int, seed: int
) -> tuple[list[float], list[float]]:
    """Percentile-bootstrap interval of the column means of (R, K) `per_row`, resampling rows: (lows,
    highs). The draws are `torch.randint`'s under `seed`; the interval is SciPy's (module docstring)."""
    import numpy as np
    from scipy.stats import bootstrap

    if per_row.dim() != 2 or per_row.shape[0] < 1:
        raise ValueError(f"per_row must be (R, K) with R >= 1 rows, got shape {tuple(per_row.shape)}")
    if per_row.shape[0] == 1:  # every resample is the one row
        row = per_row[0].tolist()
        return row, list(row)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, per_row.shape[0], (n_boot, per_row.shape[0]), generator=gen)  # (n_boot, R)
    means = per_row.double()[idx].mean(dim=1)  # (n_boot, K): the bootstrap distribution
    data = per_row.double().numpy().T  # (K, R): one sample per K, resampled along the rows
    drawn = _Distribution(means.numpy().T)  # (K, n_boot)
    res = bootstrap((data,), np.mean, n_resamples=0, bootstrap_result=drawn, method="percentile",
                    confidence_level=level, axis=-1)  # fmt: skip
    ci = res.confidence_interval
    return np.atleast_1d(ci.low).tolist(), np.atleast_1d(ci.high).tolist()


class _Distribution:
    """A bootstrap distribution already drawn, in the form `scipy.stats.bootstrap(bootstrap_result=...)`
    takes (it reads `bootstrap_distribution` and adds `n_resamples` more draws: none here)."""

    def __init__(self, values) -> None:
        self.bootstrap_distribution = values


def _pivot_rows(labels: torch.Tensor, mask: torch.Tensor, level: float) -> list[int]:
    """The rows with a pivot (after checking the interval's `level`)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return torch.nonzero((labels.bool() & mask.bool()).any(dim=1)).flatten().tolist()


def recall_interval(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    ks: Sequence[float],
    *,
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[float, tuple[float, float]]:
    """Percentile-bootstrap interval of `causal_recall` at each k, resampling trajectories (rows).

    Only rows with a pivot count (as in `causal_recall`); with none, every interval is (0, 0).
    """
    rows = _pivot_rows(labels, mask, level)
    if not rows:
        return {float(k): (0.0, 0.0) for k in ks}
    lo, hi = bootstrap_interval(per_row_recall(scores, labels, mask, ks, rows), level, n_boot, seed)
    return {float(k): (float(a), float(b)) for k, a, b in zip(ks, lo, hi, strict=True)}


def recall_difference(
    scores_a: torch.Tensor,
    scores_b: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    ks: Sequence[float],
    *,
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[float, tuple[float, float, float]]:
    """Paired recall difference A − B at each k: (difference, low, high), the interval a percentile
    bootstrap that resamples trajectories once for both scores (so what the two share cancels).

    The difference equals `causal_recall(A) − causal_recall(B)`; with no pivot, (0, 0, 0).
    """
    rows = _pivot_rows(labels, mask, level)
    if not rows:
        return {float(k): (0.0, 0.0, 0.0) for k in ks}
    per_row = per_row_recall(scores_a, labels, mask, ks, rows) - per_row_recall(
        scores_b, labels, mask, ks, rows
    )
    lo, hi = bootstrap_interval(per_row, level, n_boot, seed)
    mean = per_row.mean(dim=0).tolist()
    return {float(k): (float(d), float(a), float(b)) for k, d, a, b in zip(ks, mean, lo, hi, strict=True)}


def recall_curves(
    scores: Mapping[str, torch.Tensor], truth: torch.Tensor, mask: torch.Tensor, ks: Sequence[float] = KS
) -> dict[str, dict[float, float]]:
    """Recall@K% (`causal_recall`) of the `truth` tokens under each score, per K."""
    return {name: causal_recall(s, truth, mask, ks) for name, s in scores.items()}


def recall_bands(
    scores: Mapping[str, torch.Tensor],
    truth: torch.Tensor,
    mask: torch.Tensor,
    ks: Sequence[float] = KS,
    *,
    seed: int,
) -> dict[str, dict[float, tuple[float, float]]]:
    """95% bootstrap intervals (`recall_interval`, over trajectories) of each score's recall curve."""
    return {name: recall_interval(s, truth, mask, ks, seed=seed) for name, s in scores.items()}


def control_differences(
    scores: Mapping[str, torch.Tensor],
    truth: torch.Tensor,
    mask: torch.Tensor,
    ks: Sequence[float] = KS,
    *,
    seed: int,
    controls: Sequence[str] = CONTROLS,
) -> dict[str, dict[float, tuple[float, float, float]]]:
    """Paired recall difference (`recall_difference`: difference, 95% low, high) of every signal that is
    not a control against each control in `scores`, named 'oar-p/as-mean − position'."""
    return {
        f"{name} − {c}": recall_difference(s, scores[c], truth, mask, ks, seed=seed)
        for name, s in scores.items()
        if name not in controls
        for c in controls
        if c in scores
    }


def recall_summary(
    scores: Mapping[str, torch.Tensor],
    truth: torch.Tensor,
    mask: torch.Tensor,
    ks: Sequence[float] = KS,
    *,
    seed: int,
    paired_ks: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The JSON of one recall table: each signal's curve ("recall"), its 95% bootstrap band
    ("recall_ci95") and its paired differences to the controls at `paired_ks` (default `ks`)."""
    return {
        "recall": {name: curve_json(c) for name, c in recall_curves(scores, truth, mask, ks).items()},
        "recall_ci95": {
            name: band_json(b) for name, b in recall_bands(scores, truth, mask, ks, seed=seed).items()
        },
        "paired_difference": paired_json(
            control_differences(scores, truth, mask, ks if paired_ks is None else paired_ks, seed=seed)
        ),
    }


def curve_json(curve: Mapping[float, float]) -> dict[str, float]:
    """A recall curve with its K fractions as JSON keys ('0.05')."""
    return {f"{k:g}": v for k, v in curve.items()}


def band_json(band: Mapping[float, tuple[float, float]]) -> dict[str, list[float]]:
    """A curve's intervals with its K fractions as JSON keys ('0.05': [low, high])."""
    return {f"{k:g}": list(v) for k, v in band.items()}


def paired_json(paired: Mapping[str, Mapping[float, tuple[float, float, float]]]) -> dict[str, dict]:
    """Paired differences with their K fractions as JSON keys ('0.1': [difference, low, high])."""
    return {name: {f"{k:g}": list(v) for k, v in d.items()} for name, d in paired.items()}


def paired_table(
    paired: Mapping[str, Mapping[float, tuple[float, float, float]]], ks: Sequence[float]
) -> str:
    """A Markdown table of paired differences, 'difference (low, high)' per K."""
    lines = ["| paired difference (95% CI) | " + " | ".join(f"top {100 * k:g}%" for k in ks) + " |"]
    lines.append("|---" * (len(ks) + 1) + "|")
    for name, d in paired.items():
        cells = [f"{d[k][0]:+.2f} ({d[k][1]:+.2f}, {d[k][2]:+.2f})" for k in ks]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
