"""Token-importance scorers: OAR-P (perturbation), OAR-G (gradient), entropy and random baselines, GRAIL.

All return raw (B, C) float32 scores, 0 on padding; :func:`oar_rl.reshape.normalize_importance` and
:func:`oar_rl.reshape.bilevel_weights` turn them into weights (GRAIL's saliencies go through
:func:`oar_rl.reshape.grail_weights` instead). :func:`compute_importance` is the one
call the trainer makes.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from oar_rl.importance.baselines import entropy_importance, random_importance
from oar_rl.importance.gradient import gradient_importance
from oar_rl.importance.grail import grail_credit, grail_importance, reasoning_positions
from oar_rl.importance.hybrid import hybrid_importance
from oar_rl.importance.perturbation import perturbation_importance

ImportanceKind = Literal["random", "entropy", "oar-g", "oar-p", "grail"]
IMPORTANCE_KINDS: tuple[str, ...] = ("random", "entropy", "oar-g", "oar-p", "grail")

__all__ = [
    "IMPORTANCE_KINDS",
    "ImportanceKind",
    "compute_importance",
    "entropy_importance",
    "gradient_importance",
    "grail_credit",
    "grail_importance",
    "hybrid_importance",
    "perturbation_importance",
    "random_importance",
    "reasoning_positions",
]


def compute_importance(
    kind: ImportanceKind,
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    rows: Tensor | None = None,
    **kwargs: Any,
) -> Tensor:
    """Raw (B, C) importance of one of the four kinds; extra keyword arguments go to the scorer.

    Args:
        kind: ``"random"`` (:func:`random_importance`, takes ``generator``), ``"entropy"``
            (:func:`entropy_importance`), ``"oar-g"`` (:func:`gradient_importance`), ``"oar-p"``
            (:func:`perturbation_importance`) or ``"grail"`` (:func:`grail_importance`, needs
            ``answer_mask``).
        rows: optional (B,) bool; only these rows are scored, the others get 0 (e.g. skip rows whose
            sequence advantage is exactly 0, DESIGN §3). None scores every row.
        **kwargs: passed through (probe, answer_mask, noise_std, noise_scale, num_draws, generator,
            batch_size, ...). A (B, C) ``answer_mask`` is sliced to `rows` along with the batch.
    """
    if kind not in IMPORTANCE_KINDS:
        raise ValueError(f"kind={kind!r} is not a known importance kind; valid: {list(IMPORTANCE_KINDS)}")
    if rows is not None:
        if (
            not isinstance(rows, Tensor)
            or rows.dtype != torch.bool
            or rows.shape != completion_mask.shape[:1]
        ):
            got = (tuple(rows.shape), rows.dtype) if isinstance(rows, Tensor) else type(rows).__name__
            raise ValueError(f"rows must be a bool tensor of shape ({completion_mask.shape[0]},), got {got}")
        full = torch.zeros(completion_mask.shape, dtype=torch.float32, device=completion_mask.device)
        if not bool(rows.any()):
            return full
        idx = rows.to(completion_mask.device).nonzero().flatten()
        if kwargs.get("answer_mask") is not None:
            kwargs["answer_mask"] = kwargs["answer_mask"][idx.to(kwargs["answer_mask"].device)]
        sub = compute_importance(
            kind,
            model,
            prompt_ids[idx.to(prompt_ids.device)],
            prompt_mask[idx.to(prompt_mask.device)],
            completion_ids[idx.to(completion_ids.device)],
            completion_mask[idx],
            **kwargs,
        )
        full[idx] = sub.to(full.device)
        return full
    if kind == "random":
        return random_importance(completion_mask, **kwargs)
    elif kind == "entropy":
        return entropy_importance(model, prompt_ids, prompt_mask, completion_ids, completion_mask, **kwargs)
    elif kind == "oar-g":
        return gradient_importance(model, prompt_ids, prompt_mask, completion_ids, completion_mask, **kwargs)
    elif kind == "grail":
        return grail_importance(model, prompt_ids, prompt_mask, completion_ids, completion_mask, **kwargs)
    else:  # "oar-p"
        return perturbation_importance(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask, **kwargs
        )
