"""Credit-concentration metrics: the paper's Eq. 27 (ESS ratio) and Eq. 28 (top-10% advantage mass).

Both are per row, vectorised over the batch, and return float32 (B,). Conventions where the paper's
formula is undefined (documented and tested rather than a silent NaN):

- a row with no valid token, or whose valid weights are all 0: ESS ratio 1.0 (nothing is concentrated);
- a row with no valid token: top-mass 0.0; a row whose |A_t| are all 0: top-mass K/T (the value for
  equal advantages, the limit of uniform credit).

Callers that average over a batch usually want rows with a non-zero sequence advantage only.
"""

from __future__ import annotations

import math

import torch

from oar_rl.reshape import _check_finite, _check_mask, _check_scores


def ess_ratio(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 27: ESS(w) / T = (Σ w)² / (T · Σ w²) over each row's valid tokens.

    Args:
        weights: (B, C) non-negative token weights. mask: (B, C) 0/1.

    Returns:
        (B,) float32 in (0, 1]; 1 means uniform weights.
    """
    _check_scores(weights, "weights")
    mask = _check_mask(mask, weights.shape)
    _check_finite(weights, mask, "weights")
    if bool((weights < 0)[mask].any()):
        raise ValueError(f"weights must be non-negative on valid tokens; found {weights[mask].min().item()}")
    w = torch.where(mask, weights.float(), torch.zeros((), device=weights.device))  # (B, C)
    total = w.sum(dim=1)  # (B,)
    squares = (w * w).sum(dim=1)  # (B,)
    count = mask.sum(dim=1).float()  # (B,)
    defined = (count > 0) & (squares > 0)
    ratio = total.square() / (count * squares).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.where(defined, ratio, torch.ones_like(ratio))


def top_advantage_mass(
    token_advantages: torch.Tensor, mask: torch.Tensor, fraction: float = 0.1
) -> torch.Tensor:
    """Eq. 28: share of Σ|A_t| carried by the K = max(1, ⌊fraction·T⌋) largest |A_t| of each row.

    Args:
        token_advantages: (B, C) token-level advantages. mask: (B, C) 0/1. fraction: in (0, 1].

    Returns:
        (B,) float32 in [K/T, 1] (0 for rows with no valid token).
    """
    _check_scores(token_advantages, "token_advantages")
    mask = _check_mask(mask, token_advantages.shape)
    _check_finite(token_advantages, mask, "token_advantages")
    if not (0.0 < float(fraction) <= 1.0):
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    mag = torch.where(mask, token_advantages.float().abs(), torch.zeros((), device=mask.device))  # (B, C)
    count = mask.sum(dim=1)  # (B,)
    k = torch.clamp(torch.floor(float(fraction) * count.double()).long(), min=1)  # (B,)
    ranked = mag.sort(dim=1, descending=True).values  # (B, C): padding (0) sorts last
    top = ranked.cumsum(dim=1).gather(1, (k - 1).clamp(max=mag.shape[1] - 1)[:, None]).squeeze(1)  # (B,)
    total = mag.sum(dim=1)  # (B,)
    share = top / total.clamp_min(torch.finfo(torch.float32).tiny)
    uniform = k.float() / count.clamp_min(1).float()
    out = torch.where(total > 0, share, uniform)
    return torch.where(count > 0, out, torch.zeros_like(out))


# ----------------------------------------------------------------------------------------------------
# Ground-truth credit metrics, for tasks whose completions have known token roles (`oar_rl.roles`).
# Reasoning tokens are the pivot and filler tokens; the answer span is not ranked by credit assignment.
# Per row, (B,) float32; rows without a reasoning token (or, for recall, without a pivot) give 0.0 and
# should be left out by the caller (`reasoning_rows` / `pivot_rows`).
# ----------------------------------------------------------------------------------------------------


def _role_masks(pivot: torch.Tensor, filler: torch.Tensor, shape: torch.Size) -> tuple[torch.Tensor, ...]:
    pivot = _check_mask(pivot, shape, "pivot_mask")
    filler = _check_mask(filler, shape, "filler_mask")
    if bool((pivot & filler).any()):
        raise ValueError("pivot_mask and filler_mask overlap: a token has one role")
    return pivot, filler


def pivot_fraction(pivot_mask: torch.Tensor, filler_mask: torch.Tensor) -> torch.Tensor:
    """Share of each row's reasoning tokens that are pivots: n_pivot / (n_pivot + n_filler), (B,)."""
    pivot, filler = _role_masks(pivot_mask, filler_mask, pivot_mask.shape)
    n_pivot = pivot.sum(dim=1).float()  # (B,)
    n_reason = (pivot | filler).sum(dim=1).float()  # (B,)
    return n_pivot / n_reason.clamp_min(1.0)


def pivot_advantage_share(
    token_advantages: torch.Tensor, pivot_mask: torch.Tensor, filler_mask: torch.Tensor
) -> torch.Tensor:
    """Share of each row's reasoning |A_t| mass on pivot tokens: Σ_pivot |A_t| / Σ_reasoning |A_t|, (B,).

    Plain GRPO (A_t = A_i on every token) gives exactly `pivot_fraction`; credit that moves advantage
    onto the decisive tokens raises it. A row whose reasoning |A_t| are all 0 gives its pivot fraction
    (the limit of uniform credit).
    """
    _check_scores(token_advantages, "token_advantages")
    pivot, filler = _role_masks(pivot_mask, filler_mask, token_advantages.shape)
    _check_finite(token_advantages, pivot | filler, "token_advantages")
    mag = token_advantages.float().abs()  # (B, C)
    on_pivot = torch.where(pivot, mag, torch.zeros_like(mag)).sum(dim=1)  # (B,)
    total = torch.where(pivot | filler, mag, torch.zeros_like(mag)).sum(dim=1)  # (B,)
    share = on_pivot / total.clamp_min(torch.finfo(torch.float32).tiny)
    return torch.where(total > 0, share, pivot_fraction(pivot, filler))


def top_k_probability(scores: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """(B, C) float64: each token's chance of being among its row's `keep` (B,) highest-scoring tokens of
    `mask` when ties are broken uniformly at random (the exact expectation, no draw).

    A token scored above the row's keep-th score is in (1.0); the n_tie tokens tied at that score share
    the `slots` places left (slots / n_tie each); the others and tokens outside `mask` are out (0.0).
    The one tie rule of every top-K figure (:func:`pivot_recall_at_k`, `oar_rl.importance.hybrid.topk_recall`,
    `oar_rl.analysis.recall_stats.causal_recall`).
    """
    mask = mask.bool()
    nan = int(torch.isnan(scores[mask]).sum())
    if nan:  # a NaN at the cut would silently count its row as 0
        raise ValueError(f"top-K: the scores have NaN on {nan} tokens of the mask")
    B, C = mask.shape
    if B == 0 or C == 0:
        return torch.zeros(mask.shape, dtype=torch.float64, device=mask.device)
    keep = torch.minimum(keep.long(), mask.sum(dim=1))  # (B,)
    keyed = torch.where(mask, scores.double(), -math.inf)  # (B, C)
    ranked = keyed.sort(dim=1, descending=True).values  # (B, C)
    cut = ranked.gather(1, (keep - 1).clamp(min=0)[:, None])  # (B, 1): the keep-th score
    above, tied = mask & (keyed > cut), mask & (keyed == cut)  # (B, C)
    slots = (keep - above.sum(dim=1)).double()  # (B,)
    share = slots / tied.sum(dim=1).clamp_min(1).double()  # (B,)
    return above.double() + tied.double() * share[:, None]


def pivot_recall_at_k(
    scores: torch.Tensor, pivot_mask: torch.Tensor, filler_mask: torch.Tensor, fraction: float
) -> torch.Tensor:
    """Expected recall of ground-truth pivots in each row's top-K% reasoning tokens by `scores`, (B,).

    K = max(1, round(fraction · T)) with T the row's reasoning tokens. Ties at the cut are broken
    uniformly at random and the *expected* recall is returned (exact, no sampling): with n_tie tokens
    tied at the K-th score, of which p_tie are pivots, and `slots` places left for them, the tie
    contributes slots · p_tie / n_tie hits. So constant scores give exactly K/T (chance), never a
    position-dependent value.
    """
    _check_scores(scores, "scores")
    pivot, filler = _role_masks(pivot_mask, filler_mask, scores.shape)
    reason = pivot | filler  # (B, C)
    _check_finite(scores, reason, "scores")
    if not 0.0 < float(fraction) <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    count = reason.sum(dim=1)  # (B,)
    k = torch.clamp(torch.round(float(fraction) * count.double()).long(), min=1)  # (B,)
    hits = (top_k_probability(scores.float(), reason, k) * pivot).sum(dim=1).float()  # (B,): expected hits
    n_pivot = pivot.sum(dim=1).float()  # (B,)
    return torch.where(n_pivot > 0, hits / n_pivot.clamp_min(1), torch.zeros_like(hits))
