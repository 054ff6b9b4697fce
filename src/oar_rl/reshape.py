"""Advantage reshaping: the paper's Eq. 6, 14, 16 and 17 as pure tensor functions, and GRAIL's weights.

Shapes: B sequences, C completion positions. `mask` is 1 on real completion tokens and 0 on padding
(bool or any real dtype holding only 0/1). Every function is vectorised over the batch (no Python loop
over rows or tokens) and returns float32.

Where this departs from the paper, and why:

- Eq. 16 writes the threshold as a fixed value tau on the normalised scale but the text calls it "the
  70th percentile within a sequence"; the authors' released fragment uses a per-row quantile. Both are
  offered: `threshold="quantile"` (default, q = linear quantile of the row's valid scores at level tau,
  exactly `torch.quantile`) and `threshold="value"` (q = tau).
- The suppressed branch takes an optional `floor` (the released fragment uses 0.1) so that no token's
  advantage is zeroed outright; the default 0.0 is the paper's Eq. 16.
- Importance scores are non-negative by construction (a KL divergence, an absolute value); tiny negative
  values from float rounding are clamped to 0 before the log-transform. NaN or inf raise.
- A row whose gated weights are all 0 (possible with `threshold="value"` and floor 0) gets uniform
  weights 1: Eq. 17 would divide by zero there, and uniform weights are plain GRPO for that row.
- Rows with no valid token get all-zero outputs (there is nothing to weight).

GRAIL's weight math (:func:`grail_weights`, :func:`grail_token_advantages`, Pala, Toh & Poria 2026) is at
the end of this module; its reading of that paper is documented in :mod:`oar_rl.importance.grail`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Threshold = Literal["quantile", "value"]
EPS = 1e-8


# ----------------------------------------------------------------------------------------------------
# input checks (cheap, vectorised; they raise instead of letting a NaN through)
# ----------------------------------------------------------------------------------------------------
def _check_mask(mask: torch.Tensor, shape: torch.Size, name: str = "mask") -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of 0/1 values, got {type(mask).__name__}")
    if mask.shape != shape:
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)}, expected {tuple(shape)} (same as the scores)"
        )
    if mask.dtype != torch.bool:
        if mask.is_complex():
            raise ValueError(f"{name} must be bool or real-valued 0/1, got dtype {mask.dtype}")
        bad = (mask != 0) & (mask != 1)
        if bool(bad.any()):
            value = mask[bad].flatten()[0].item()
            raise ValueError(f"{name} must contain only 0 and 1 (1 = real token, 0 = padding); found {value}")
        mask = mask.bool()
    return mask


def _check_scores(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a floating-point torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (B, C), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def _check_finite(x: torch.Tensor, mask: torch.Tensor, name: str) -> None:
    bad = ~torch.isfinite(x) & mask
    if bool(bad.any()):
        row, col = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} must be finite on valid tokens; found {x[row, col].item()} at row {row}, position {col}"
        )


def _check_unit(value: float, name: str) -> None:
    if not (0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {value}")


# ----------------------------------------------------------------------------------------------------
# Eq. 14
# ----------------------------------------------------------------------------------------------------
def normalize_importance(scores: torch.Tensor, mask: torch.Tensor, *, eps: float = EPS) -> torch.Tensor:
    """Eq. 14 per row: I_bar = log(1 + I), then min-max over the row's valid tokens.

    Args:
        scores: (B, C) raw importance I_t >= 0 (tiny negative rounding errors are clamped to 0).
        mask: (B, C) 1 on valid completion tokens, 0 on padding.
        eps: the smoothing constant of Eq. 14's denominator.

    Returns:
        (B, C) float32 normalised importance in [0, 1); 0 on padding. A row whose valid scores are all
        equal (including a single-token row) maps to all zeros.
    """
    _check_scores(scores, "scores")
    mask = _check_mask(mask, scores.shape)
    _check_finite(scores, mask, "scores")
    bar = torch.log1p(scores.float().clamp_min(0.0))  # (B, C)
    big = torch.finfo(torch.float32).max
    row_min = torch.where(mask, bar, big).amin(dim=1, keepdim=True)  # (B, 1)
    row_max = torch.where(mask, bar, -big).amax(dim=1, keepdim=True)  # (B, 1)
    span = (row_max - row_min).clamp_min(0.0)  # (B, 1); rows without valid tokens are masked out below
    normalized = (bar - row_min) / (span + eps)  # (B, C)
    return torch.where(mask, normalized, torch.zeros_like(normalized))


# ----------------------------------------------------------------------------------------------------
# Eq. 16-17
# ----------------------------------------------------------------------------------------------------
def masked_quantile(values: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """Per-row linear quantile of the valid entries: `torch.quantile(row[mask_row], q)` for every row.

    Vectorised: invalid entries are sorted to the end, then the two order statistics around
    q·(T−1) are interpolated. Rows with no valid entry return 0 (`torch.quantile` would raise).

    Args:
        values: (B, C) float. mask: (B, C) bool. q: level in [0, 1].

    Returns:
        (B,) float32.
    """
    values = values.float()
    counts = mask.sum(dim=1)  # (B,)
    sorted_vals = (
        torch.where(mask, values, torch.full_like(values, float("inf"))).sort(dim=1).values
    )  # (B, C)
    pos = q * (counts - 1).clamp_min(0).to(values.dtype)  # (B,)
    lo = pos.floor().long()
    hi = pos.ceil().long()
    v_lo = sorted_vals.gather(1, lo[:, None]).squeeze(1)  # (B,)
    v_hi = sorted_vals.gather(1, hi[:, None]).squeeze(1)  # (B,)
    frac = pos - lo.to(values.dtype)
    out = v_lo + frac * (v_hi - v_lo)
    out = torch.where(frac == 0, v_lo, out)  # avoid inf - inf when lo == hi at a padded slot
    return torch.where(counts > 0, out, torch.zeros_like(out))


def rescale_sum(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 17: scale each row's valid weights so they sum to the row's token count T_i.

    Rows whose valid weights sum to 0 get uniform weights 1. Padding gets 0.

    Args:
        weights: (B, C) non-negative. mask: (B, C) 0/1.

    Returns:
        (B, C) float32 with `(out * mask).sum(1) == mask.sum(1)`.
    """
    _check_scores(weights, "weights")
    mask = _check_mask(mask, weights.shape)
    _check_finite(weights, mask, "weights")
    if bool((weights < 0)[mask].any()):
        raise ValueError(f"weights must be non-negative on valid tokens; found {weights[mask].min().item()}")
    w = torch.where(mask, weights.float(), torch.zeros((), dtype=torch.float32, device=weights.device))
    total = w.sum(dim=1, keepdim=True)  # (B, 1)
    count = mask.sum(dim=1, keepdim=True).float()  # (B, 1)
    uniform = mask.float()
    scaled = w * (count / total.clamp_min(torch.finfo(torch.float32).tiny))
    # a denormal total overflows count / total, a huge row overflows its sum: those rows in float64
    bad = (total > 0) & ~(torch.isfinite(total) & torch.isfinite(scaled).all(dim=1, keepdim=True))
    if bool(bad.any()):
        w64 = w.double()
        exact = (w64 * (count.double() / w64.sum(dim=1, keepdim=True))).float()
        scaled = torch.where(bad, exact, scaled)
    return torch.where(total > 0, scaled, uniform)


def bilevel_weights(
    normalized: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau: float = 0.4,
    beta: float = 2.0,
    threshold: Threshold = "quantile",
    floor: float = 0.0,
    eps: float = EPS,
) -> torch.Tensor:
    """Eq. 16-17: bi-level gating of normalised importance, then sum-preserving renormalisation.

    With cut q (the row's `tau`-quantile of valid Î for `threshold="quantile"`, or `tau` itself for
    `"value"`)::

        ω = max(Î / (q + ε), floor)          if Î < q      (noise suppression)
        ω = 1 + β (Î − q) / (1 − q + ε)      if Î ≥ q      (signal boosting)
        ω̃ = ω · T / Σ_valid ω                                (Eq. 17)

    Args:
        normalized: (B, C) Î in [0, 1] (from `normalize_importance`).
        mask: (B, C) 0/1. tau: level or value of the cut, in [0, 1]. beta: boost, >= 0.
        threshold: "quantile" or "value". floor: minimum suppressed weight, in [0, 1].

    Returns:
        (B, C) float32 ω̃: each row's valid weights sum to its token count; 0 on padding; a row whose
        gated weights are all 0 gets uniform weights 1.
    """
    _check_scores(normalized, "normalized")
    mask = _check_mask(mask, normalized.shape)
    _check_finite(normalized, mask, "normalized")
    _check_unit(tau, "tau")
    _check_unit(floor, "floor")
    if not float(beta) >= 0.0:
        raise ValueError(f"beta must be >= 0 (0 = no boosting), got {beta}")
    if threshold == "quantile":
        q = masked_quantile(normalized, mask, float(tau))[:, None]  # (B, 1)
    elif threshold == "value":
        q = torch.full((normalized.shape[0], 1), float(tau), device=normalized.device)  # (B, 1)
    else:
        raise ValueError(f"threshold must be 'quantile' or 'value', got {threshold!r}")
    x = normalized.float()  # (B, C)
    low = (x / (q + eps)).clamp_min(float(floor))  # (B, C)
    high = 1.0 + float(beta) * (x - q) / (1.0 - q + eps)  # (B, C)
    omega = torch.where(x < q, low, high)  # (B, C)
    return rescale_sum(torch.where(mask, omega, torch.zeros_like(omega)), mask)


def token_advantages(
    advantages: torch.Tensor,
    importance: torch.Tensor,
    mask: torch.Tensor,
    *,
    scored_mask: torch.Tensor | None = None,
    tau: float = 0.4,
    beta: float = 2.0,
    threshold: Threshold = "quantile",
    floor: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 14-17 then Eq. 15: A_t = A_i · ω̃_t.

    Only tokens in `scored_mask` (default: all valid tokens) are normalised and gated; they share
    their own count, and valid tokens outside it (e.g. the answer span under an answer-span probe)
    keep weight 1. Each row's valid weights therefore sum to its token count T_i, and the row's
    token advantages sum to A_i · T_i.

    Args:
        advantages: (B,) sequence advantages A_i.
        importance: (B, C) raw importance I_t.
        mask: (B, C) 0/1 valid completion tokens.
        scored_mask: (B, C) 0/1 subset of `mask` that was scored, or None for all of `mask`.

    Returns:
        (token_advantages (B, C), weights (B, C)), both float32 and 0 on padding.
    """
    _check_scores(importance, "importance")
    mask = _check_mask(mask, importance.shape)
    if not isinstance(advantages, torch.Tensor) or advantages.shape != importance.shape[:1]:
        shape = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be a (B,) tensor with B={importance.shape[0]}, got {shape}")
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError(f"advantages must be finite, got {advantages.tolist()}")
    scored = mask if scored_mask is None else _check_mask(scored_mask, importance.shape, "scored_mask") & mask
    normalized = normalize_importance(importance, scored)  # (B, C)
    gated = bilevel_weights(
        normalized, scored, tau=tau, beta=beta, threshold=threshold, floor=floor
    )  # (B, C)
    weights = torch.where(scored, gated, mask.float())  # (B, C): unscored valid tokens keep 1
    return advantages.float()[:, None] * weights, weights


# ----------------------------------------------------------------------------------------------------
# Eq. 6 (the entropy baseline, Cheng et al. 2025)
# ----------------------------------------------------------------------------------------------------
def check_kappa(kappa: float, name: str = "kappa") -> None:
    """κ of the entropy baseline must exceed 1 (Cheng et al.): below 1 the bonus |A|/κ can exceed |A| and
    turn a wrong rollout's high-entropy tokens positive; at 1 it zeroes them."""
    if not float(kappa) > 1.0:
        raise ValueError(
            f"{name} must be > 1 (the bonus is capped at |A|/{name}: at or below 1 it can cancel or flip "
            f"the sign of a negative advantage), got {kappa}"
        )


ENTROPY_ROUNDING = 1e-3
"""How far below 0 an entropy may be and still count as rounding: logsumexp(z) − Σ softmax(z)·z in float32
of a peaked distribution comes out a few float32 spacings of the largest logit below 0 (−3.8e-6 at logits
near 50, more with larger logits). Kept as it is, as before, so a training run reproduces bit for bit;
a rule returning log-probabilities or other signed values goes far below it."""


def entropy_shaped_advantages(
    advantages: torch.Tensor,
    entropies: torch.Tensor,
    mask: torch.Tensor,
    *,
    alpha: float = 0.4,
    kappa: float = 2.0,
) -> torch.Tensor:
    """Eq. 6: Ã_t = A + min(α · sg(H_t), |A| / κ).

    The bonus is non-negative whatever the sign of A (as in Cheng et al. 2025), and the result is not
    renormalised -- that is the baseline's documented weakness (paper, Appendix A.1.2).

    Args:
        advantages: (B,) sequence advantages. entropies: (B, C) token entropies H_t (detached here).
        mask: (B, C) 0/1. alpha: >= 0. kappa: > 1. Entropies must be >= 0 on valid tokens (down to
            −:data:`ENTROPY_ROUNDING`).

    Returns:
        (B, C) float32 token advantages; 0 on padding.
    """
    _check_scores(entropies, "entropies")
    mask = _check_mask(mask, entropies.shape)
    _check_finite(entropies, mask, "entropies")
    negative = (entropies < -ENTROPY_ROUNDING) & mask
    if bool(negative.any()):  # a negative "entropy" makes the bonus a penalty, which can flip A's sign
        row, col = (int(i) for i in negative.nonzero()[0])
        raise ValueError(
            f"entropies must be >= 0 on valid tokens (Eq. 6's bonus α·H_t; −{ENTROPY_ROUNDING:g} passes as "
            "float rounding); found "
            f"{entropies[row, col].item()} at row {row}, position {col} ({int(negative.sum())} such tokens)"
        )
    if not isinstance(advantages, torch.Tensor) or advantages.shape != entropies.shape[:1]:
        shape = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be a (B,) tensor with B={entropies.shape[0]}, got {shape}")
    if not float(alpha) >= 0.0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    check_kappa(kappa)
    a = advantages.detach().float()[:, None]  # (B, 1)
    bonus = torch.minimum(float(alpha) * entropies.detach().float(), a.abs() / float(kappa))  # (B, C)
    shaped = a + bonus  # (B, C)
    return torch.where(mask, shaped, torch.zeros_like(shaped))


# ----------------------------------------------------------------------------------------------------
# GRAIL (Pala, Toh & Poria 2026, "Gradient-Reweighted Advantages for RLVR"); the scorer and the
# reading of the paper are documented in oar_rl.importance.grail
# ----------------------------------------------------------------------------------------------------
GRAIL_ROLLOUTS: tuple[str, ...] = ("wrong", "correct", "all")
GRAIL_EPS = 1e-8  # added to s_t before the log, and to the variance before the square root


def check_grail_options(
    mu: float,
    sigma: float,
    w_min: float,
    w_max: float,
    rollouts: str | None = None,
    *,
    names: tuple[str, str, str, str, str] = ("mu", "sigma", "w_min", "w_max", "rollouts"),
) -> None:
    """Raise ValueError naming the bad GRAIL option (`names` are the caller's option names)."""
    values = {"mu": mu, "sigma": sigma, "w_min": w_min, "w_max": w_max}
    for key, name in zip(values, names[:4], strict=True):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if sigma < 0:
        raise ValueError(f"{names[1]} must be >= 0 (the spread of the weights), got {sigma}")
    if w_min < 0:
        raise ValueError(f"{names[2]} must be >= 0 (a negative weight would flip the advantage), got {w_min}")
    if w_max < w_min:
        raise ValueError(f"{names[3]} must be >= {names[2]}, got {names[3]}={w_max} < {names[2]}={w_min}")
    if rollouts is not None:
        _check_rollouts(rollouts, names[4])


def _check_rollouts(rollouts: str, name: str = "rollouts") -> None:
    if rollouts not in GRAIL_ROLLOUTS:
        raise ValueError(f"{name}={rollouts!r} is not valid; choose one of {', '.join(GRAIL_ROLLOUTS)}")


def grail_rollout_rows(advantages: torch.Tensor, rollouts: str) -> torch.Tensor:
    """(B,) bool: the rows GRAIL reweights. "wrong": A_i < 0; "correct": A_i > 0; "all": every row.

    A rollout is "wrong" when its sequence advantage is negative (worse than its group), "correct" when
    positive. Rows with A_i = 0 are neither (their token advantages are 0 whatever the weights).
    """
    _check_rollouts(rollouts)
    if not isinstance(advantages, torch.Tensor) or advantages.dim() != 1:
        shape = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be a (B,) tensor, got {shape}")
    if rollouts == "wrong":
        return advantages < 0
    if rollouts == "correct":
        return advantages > 0
    return torch.ones_like(advantages, dtype=torch.bool)


def grail_weights(
    scores: torch.Tensor,
    mask: torch.Tensor,
    scored_mask: torch.Tensor,
    *,
    rows: torch.Tensor | None = None,
    mu: float = 1.0,
    sigma: float = 0.5,
    w_min: float = 0.5,
    w_max: float = 5.0,
    eps: float = GRAIL_EPS,
) -> torch.Tensor:
    """GRAIL weights: w_t = clamp(μ + σ·z_t, w_min, w_max), z_t the row's z-score of log(s_t + eps).

    The z-score runs over each row's tokens in ``scored_mask & mask`` (the reasoning tokens), with the
    population standard deviation sqrt(mean((x − x̄)²) + eps). Every other valid token -- the answer
    span and later, rows without a span (an empty ``scored_mask`` row), rows outside `rows` -- keeps
    weight 1. No renormalisation: a row's weights do not sum to its token count.

    Args:
        scores: (B, C) saliency s_t >= 0 (finite on scored tokens; ignored elsewhere).
        mask: (B, C) 0/1 valid completion tokens. scored_mask: (B, C) 0/1 tokens to reweight.
        rows: optional (B,) bool, the rows to reweight (see :func:`grail_rollout_rows`); None: all.
        mu, sigma, w_min, w_max: the paper's μ_w, σ_w, w_min, w_max (published 1.0, 0.5, 0.5, 5.0).

    Returns:
        (B, C) float32 weights; 0 on padding.
    """
    _check_scores(scores, "scores")
    mask = _check_mask(mask, scores.shape)
    scored = _check_mask(scored_mask, scores.shape, "scored_mask") & mask  # (B, C)
    check_grail_options(mu, sigma, w_min, w_max)
    if rows is not None:
        if not isinstance(rows, torch.Tensor) or rows.dtype != torch.bool or rows.shape != scores.shape[:1]:
            got = (tuple(rows.shape), rows.dtype) if isinstance(rows, torch.Tensor) else type(rows).__name__
            raise ValueError(f"rows must be a bool tensor of shape ({scores.shape[0]},), got {got}")
        scored = scored & rows.to(scored.device)[:, None]
    _check_finite(scores, scored, "scores")
    if bool((scores < 0)[scored].any()):
        raise ValueError(
            f"scores must be >= 0 (a norm) on scored tokens; found {scores[scored].min().item()}"
        )
    x = torch.log(scores.float() + eps)  # (B, C)
    zero = torch.zeros((), dtype=torch.float32, device=scores.device)
    x = torch.where(scored, x, zero)
    n = scored.sum(dim=1, keepdim=True).clamp_min(1).float()  # (B, 1)
    mean = x.sum(dim=1, keepdim=True) / n  # (B, 1)
    dev = torch.where(scored, x - mean, zero)  # (B, C)
    std = torch.sqrt(dev.square().sum(dim=1, keepdim=True) / n + eps)  # (B, 1)
    w = (float(mu) + float(sigma) * dev / std).clamp(float(w_min), float(w_max))  # (B, C)
    return torch.where(scored, w, mask.float())


def grail_token_advantages(
    advantages: torch.Tensor,
    scores: torch.Tensor,
    mask: torch.Tensor,
    scored_mask: torch.Tensor,
    *,
    rollouts: str = "wrong",
    mu: float = 1.0,
    sigma: float = 0.5,
    w_min: float = 0.5,
    w_max: float = 5.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRAIL token advantages A_t = A_i · w_t, reweighting only the rows `rollouts` selects.

    Args:
        advantages: (B,) sequence advantages A_i (finite).
        scores, mask, scored_mask, mu, sigma, w_min, w_max: as :func:`grail_weights`.
        rollouts: "wrong" (A_i < 0, the published default), "correct" (A_i > 0) or "all".

    Returns:
        (token_advantages (B, C), weights (B, C)), float32, 0 on padding.
    """
    _check_scores(scores, "scores")
    if not isinstance(advantages, torch.Tensor) or advantages.shape != scores.shape[:1]:
        shape = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be a (B,) tensor with B={scores.shape[0]}, got {shape}")
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError(f"advantages must be finite, got {advantages.tolist()}")
    rows = grail_rollout_rows(advantages, rollouts)
    weights = grail_weights(
        scores, mask, scored_mask, rows=rows, mu=mu, sigma=sigma, w_min=w_min, w_max=w_max
    )  # (B, C)
    return advantages.float().to(weights.device)[:, None] * weights, weights


def top_quantile_mask(values: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """(B, C) bool: the valid tokens whose value is at least the batch's (1 − `fraction`) linear quantile
    of the valid values (`torch.quantile`), as TRL's `GRPOTrainer.get_high_entropy_mask` selects the
    tokens of `top_entropy_quantile` = `fraction` (one process; TRL gathers the values of every process).
    For the analyses of the rule ``entropy-80-20``; training uses TRL's own."""
    _check_scores(values, "values")
    mask = _check_mask(mask, values.shape)
    _check_unit(fraction, "fraction")
    if not bool(mask.any()):
        return torch.zeros_like(mask)
    cut = torch.quantile(values[mask].float(), 1.0 - float(fraction))
    return (values.float() * mask >= cut) & mask
