"""Score only some rows of a batch: the others get 0 and cost no forward pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn


def score_rows(
    scorer: Callable[..., Tensor],
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    rows: Tensor,
    **kwargs: Any,
) -> Tensor:
    """(B, C) float32: `scorer(model, <the batch's rows `rows`>, **kwargs)` in those rows, 0 elsewhere.

    `rows` is a (B,) bool tensor; a (B, C) ``answer_mask`` keyword is sliced along with the batch.
    """
    if not isinstance(rows, Tensor) or rows.dtype != torch.bool or rows.shape != completion_mask.shape[:1]:
        got = (tuple(rows.shape), rows.dtype) if isinstance(rows, Tensor) else type(rows).__name__
        raise ValueError(f"rows must be a bool tensor of shape ({completion_mask.shape[0]},), got {got}")
    full = torch.zeros(completion_mask.shape, dtype=torch.float32, device=completion_mask.device)
    if not bool(rows.any()):
        return full
    idx = rows.to(completion_mask.device).nonzero().flatten()
    if kwargs.get("answer_mask") is not None:
        kwargs["answer_mask"] = kwargs["answer_mask"][idx.to(kwargs["answer_mask"].device)]
    sub = scorer(
        model,
        prompt_ids[idx.to(prompt_ids.device)],
        prompt_mask[idx.to(prompt_mask.device)],
        completion_ids[idx.to(completion_ids.device)],
        completion_mask[idx],
        **kwargs,
    )
    full[idx] = sub.to(full.device)
    return full
