"""Credit-concentration metrics: the paper's Eq. 27 (ESS ratio) and Eq. 28 (top-10% advantage mass).

Both are per row, vectorised over the batch, and return float32 (B,). Conventions where the paper's
formula is undefined (documented and tested rather than a silent NaN):

- a row with no valid token, or whose valid weights are all 0: ESS ratio 1.0 (nothing is concentrated);
- a row with no valid token: top-mass 0.0; a row whose |A_t| are all 0: top-mass K/T (the value for
  equal advantages, the limit of uniform credit).

Callers that average over a batch usually want rows with a non-zero sequence advantage only.
"""

from __future__ import annotations

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
