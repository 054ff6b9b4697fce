"""OAR-GP: OAR-G screens every token, OAR-P rescores the top fraction (not in the paper).

OAR-P (Eq. 7-8) is the paper's most faithful importance but costs one recomputed suffix per token;
OAR-G (Eq. 9-13) costs about three passes per sequence. The hybrid spends OAR-P only where it can
change the outcome of reshaping: per row, the ``fraction`` of scored tokens with the highest OAR-G
score (at least one token) get their exact OAR-P score; the other tokens keep their OAR-G order,
scaled to sit at or below every rescored token.

The splice (a choice, documented here because Eq. 14-17 see magnitudes, not only ranks): in a row,
with S the rescored tokens and p_min = min over S of the OAR-P score, an unscreened token t gets
``g_t · p_min / max_{u∉S} g_u``. So (1) the rescored tokens keep their OAR-P scores and order, (2) the
unscreened tokens keep OAR-G's order among themselves, (3) no unscreened token outranks a rescored
one, and (4) the two scales meet at p_min, so the row's log1p/min-max normalisation (Eq. 14) is not
dominated by a scale mismatch between a KL of the outcome and a gradient inner product. When
p_min = 0 (OAR-P finds a screened token irrelevant) the unscreened tokens get 0, the floor of Eq. 16.
``fraction=1`` is exact OAR-P; a small fraction approaches OAR-G's ranking with OAR-P's top.

:func:`topk_recall` measures how much of exact OAR-P's top-K% per row a score recovers (the issue's
"recall of exact OAR-P's top-20% tokens").
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from oar_rl.importance.gradient import gradient_scores
from oar_rl.importance.perturbation import perturbation_scores
from oar_rl.metrics import top_k_probability
from oar_rl.probes import Probe, ScoringBatch, prepare_probe_batch


def _check_fraction(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def top_fraction_mask(scores: Tensor, mask: Tensor, fraction: float) -> Tensor:
    """(B, C) bool: per row, the ceil(fraction · n) highest-scoring tokens of `mask` (n = tokens in mask).

    Ties are broken by position (earlier first), so the result is deterministic.
    """
    fraction = _check_fraction(fraction, "fraction")
    mask = mask.bool()
    B, C = mask.shape
    if B == 0 or C == 0:
        return torch.zeros_like(mask)
    n = mask.sum(dim=1)  # (B,)
    k = torch.ceil(n.double() * fraction).long().clamp(max=n)  # (B,)
    keyed = torch.where(mask, scores.double(), -math.inf)  # (B, C)
    order = torch.sort(keyed, dim=1, descending=True, stable=True).indices  # (B, C)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(C, device=order.device).expand(B, C))  # rank of each position
    return mask & (rank < k[:, None])


def top_fraction_probability(scores: Tensor, mask: Tensor, fraction: float) -> Tensor:
    """:func:`top_k_probability` with keep = ceil(fraction · n) of each row's n tokens in `mask`."""
    fraction = _check_fraction(fraction, "fraction")
    n = mask.bool().sum(dim=1)  # (B,)
    return top_k_probability(scores, mask, torch.ceil(n.double() * fraction).long())


def topk_recall(scores: Tensor, reference: Tensor, mask: Tensor, fraction: float = 0.2) -> float:
    """Share of `reference`'s per-row top-`fraction` tokens that are also in `scores`' top-`fraction`.

    Both top sets have ceil(fraction · n_row) tokens of `mask`; the figure is pooled over rows:
    Σ_rows |top(scores) ∩ top(reference)| / Σ_rows |top(reference)|. Ties at either cut are broken
    uniformly at random, independently for the two sets, and the *expected* figure is returned (exact:
    Σ_t P(t in top(scores)) · P(t in top(reference)), :func:`top_fraction_probability`). Breaking ties by
    position, as before, made a signal that ties whole runs of tokens (span-level OAR-P, one score per
    step) look better or worse by where in its steps the reference's top tokens fall. NaN if `mask` is
    empty.
    """
    if scores.shape != reference.shape or scores.shape != mask.shape:
        raise ValueError(
            f"scores, reference and mask must share a shape, got {tuple(scores.shape)}, "
            f"{tuple(reference.shape)}, {tuple(mask.shape)}"
        )
    mask = mask.bool()
    ours = top_fraction_probability(scores, mask, fraction)
    ref = top_fraction_probability(reference, mask, fraction)
    total = float(ref.sum())
    return float("nan") if total == 0 else float((ours * ref).sum()) / total


def splice_scores(grad: Tensor, pert: Tensor, selected: Tensor, scored: Tensor) -> Tensor:
    """The hybrid's (B, C) scores from OAR-G `grad`, OAR-P `pert` on `selected`, over `scored` tokens.

    See the module docstring: selected tokens keep `pert`; the others get grad · p_min / g_max (row-wise).
    """
    grad, pert = grad.float(), pert.float()
    selected, scored = selected.bool() & scored.bool(), scored.bool()
    rest = scored & ~selected  # (B, C)
    p_min = torch.where(selected, pert, math.inf).amin(dim=1, keepdim=True)  # (B, 1)
    g_max = torch.where(rest, grad, -math.inf).amax(dim=1, keepdim=True)  # (B, 1)
    has = torch.isfinite(p_min) & torch.isfinite(g_max) & (g_max > 0)  # (B, 1)
    scale = torch.where(has, p_min / torch.where(has, g_max, 1.0), 0.0)  # (B, 1)
    out = torch.where(selected, pert, grad.clamp_min(0) * scale)  # (B, C)
    return torch.where(scored, out, 0.0)


def hybrid_importance(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    probe: Probe = "lt-logits",
    answer_mask: Tensor | None = None,
    reasoning_mask: Tensor | None = None,
    **options: Any,
) -> Tensor:
    """OAR-GP raw importance: OAR-G everywhere, OAR-P on each row's top `fraction` by OAR-G.

    Args:
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, probe, answer_mask,
            reasoning_mask: as for
            :func:`~oar_rl.importance.gradient_importance` and
            :func:`~oar_rl.importance.perturbation_importance` (the same probe for both).
        **options: the options of :func:`hybrid_scores` (listed there), which scores the batch once
            :func:`~oar_rl.probes.prepare_batch` has validated and laid it out.

    Returns:
        (B, C) float32 on the model's device; 0 on padding and on unscored positions.
    """
    batch = prepare_probe_batch(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, probe, answer_mask, reasoning_mask
    )
    return hybrid_scores(model, batch, probe=probe, **options)


def hybrid_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    probe: Probe = "lt-logits",
    fraction: float = 0.25,
    gradient_kwargs: dict[str, Any] | None = None,
    perturbation_kwargs: dict[str, Any] | None = None,
) -> Tensor:
    """:func:`hybrid_importance` of a prepared batch (the registry's scorer for ``oar-gp``): both passes
    score the same batch, validated once.

    Args:
        fraction: share of each row's scored tokens rescored by OAR-P, in (0, 1] (at least one token).
        gradient_kwargs: extra arguments for the OAR-G pass (noise_std, generator, batch_size, ...).
        perturbation_kwargs: extra arguments for the OAR-P pass (mask_token_id, batch_size, ...).
    """
    fraction = _check_fraction(fraction, "fraction")
    for name, kw in (("gradient_kwargs", gradient_kwargs), ("perturbation_kwargs", perturbation_kwargs)):
        clash = {"probe", "answer_mask", "positions"} & set(kw or {})
        if clash:
            raise ValueError(f"{name} must not set {sorted(clash)}: hybrid_importance passes them itself")
    scored = batch.scored(probe)  # (B, C)
    grad = gradient_scores(model, batch, probe=probe, **(gradient_kwargs or {}))  # (B, C)
    selected = top_fraction_mask(grad, scored, fraction)  # (B, C)
    pert = perturbation_scores(
        model, batch, probe=probe, positions=selected, **(perturbation_kwargs or {})
    )  # (B, C), 0 off `selected`
    return splice_scores(grad, pert, selected, scored)
