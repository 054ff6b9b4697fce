"""Score only some rows of a batch: the others get 0 and cost no forward pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from oar_rl.probes import ScoringBatch


def score_rows(
    scorer: Callable[..., Tensor], model: nn.Module, batch: ScoringBatch, rows: Tensor, **kwargs: Any
) -> Tensor:
    """(B, C) float32: `scorer(model, <the rows `rows` of `batch`>, **kwargs)` in those rows, 0 elsewhere.

    `scorer` takes a prepared batch (a registry scorer, :mod:`oar_rl.credits`); `rows` is a (B,) bool
    tensor. The rows' answer span is sliced along with the batch.
    """
    mask = batch.completion_mask
    if not isinstance(rows, Tensor) or rows.dtype != torch.bool or rows.shape != mask.shape[:1]:
        got = (tuple(rows.shape), rows.dtype) if isinstance(rows, Tensor) else type(rows).__name__
        raise ValueError(f"rows must be a bool tensor of shape ({mask.shape[0]},), got {got}")
    full = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    if not bool(rows.any()):
        return full
    idx = rows.to(mask.device).nonzero().flatten()
    full[idx] = scorer(model, batch.take(idx), **kwargs).to(full.device)
    return full
