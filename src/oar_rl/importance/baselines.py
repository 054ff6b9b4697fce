"""Baseline importance scores: token entropy (Cheng et al. 2025) and uniform random (paper §4).

- :func:`entropy_importance`: H_t of the old policy's next-token distribution that produced token t,
  i.e. the softmax of the logits at full position P + t − 1 (divided by the sampling temperature, as
  TRL does for its entropies). The body runs ``batch_size`` rows at a time and the LM head
  ``chunk_size`` positions at a time, so memory is O(chunk_size · V), never (B, C, V).
- :func:`random_importance`: w ~ U(0, 1) per valid token (the paper's "GRPO + Random Credit"), from one
  generator or from one generator per row (the trainer's row-keyed draws); the sum-preserving rescale of
  Eq. 17 is applied downstream like for every other score.
- :func:`position_importance`: the token's 1-based index in its completion (later tokens score higher,
  no ties). Not a credit mode and not in the paper: a *control* for the analyses. Where the tokens an
  analysis counts as pivots cluster near the answer, "later matters more" finds them without reading the
  model; every recall or attribution table reports it beside random (DESIGN §4, "Controls before
  claims"). Eq. 14's log1p and min-max keep its order, so its ranking is the position order.
  :func:`position_scores` is the same definition as the credit rule ``position`` (over the scored
  reasoning tokens, through OAR's bi-level reshaping): the training control for "OAR only weights late
  tokens". After Eq. 14 a row's token t gets log((t+2)/2) / log((T+1)/2), T its scored tokens.
- :func:`reasoning_entropy_scores`: the entropy H_t over the scored reasoning tokens, the importance the
  analyses read for the rule ``entropy-80-20`` (whose training is TRL's ``top_entropy_quantile``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from oar_rl.answer_span import _check_mask
from oar_rl.importance.token_head import completion_token_stats
from oar_rl.probes import ScoringBatch, check_rows_per_pass, prepare_batch


def entropy_importance(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    **options: Any,
) -> Tensor:
    """Entropy H_t = −Σ_v π(v) log π(v) of the distribution that sampled completion token t.

    Args:
        model: a Hugging Face causal LM (plain or PEFT-wrapped), the policy that generated the batch.
        prompt_ids: (B, P) left-padded, P ≥ 1 (the first completion token is predicted from the prompt).
        prompt_mask: (B, P).
        completion_ids: (B, C) right-padded.
        completion_mask: (B, C).
        **options: the options of :func:`entropy_scores` (listed there), which scores the batch once
            :func:`~oar_rl.probes.prepare_batch` has validated and laid it out.

    Returns:
        (B, C) float32 on the model's device; 0 on padding.
    """
    batch = prepare_batch(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    return entropy_scores(model, batch, **options)


def entropy_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    chunk_size: int | None = None,
    batch_size: int | None = None,
    temperature: float = 1.0,
    progress: bool = False,
) -> Tensor:
    """:func:`entropy_importance` of a prepared batch (the registry's scorer for ``entropy``).

    Args:
        chunk_size: completion positions per LM-head call (None: as many as keep one block of logits
            under 2**24 elements, 64 MiB in float32).
        batch_size: rows per body forward (None: all rows at once).
        temperature: sampling temperature (> 0); logits are divided by it.
        progress: show a tqdm bar over the row chunks.
    """
    check_rows_per_pass(chunk_size, "chunk_size")
    check_rows_per_pass(batch_size)
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")

    def entropy(z: Tensor, _: Tensor) -> tuple[Tensor]:
        z = z / temperature  # (m, V)
        # H = logsumexp(z) - sum_v softmax(z)_v z_v: two (m, V) blocks live at a time
        return ((torch.logsumexp(z, dim=-1) - torch.softmax(z, dim=-1).mul_(z).sum(dim=-1)).float(),)

    (out,) = completion_token_stats(
        model, batch, entropy, (torch.float32,), batch_size=batch_size, chunk_size=chunk_size,
        progress=progress, desc="entropy",
    )  # fmt: skip
    return out


def random_importance(
    completion_mask: Tensor, *, generator: torch.Generator | Sequence[torch.Generator] | None = None
) -> Tensor:
    """(B, C) float32: U(0, 1) on valid tokens, 0 on padding, drawn on the CPU.

    The one definition of random credit, for the trainer and the analyses alike. `generator`: one CPU
    generator (None: the global RNG) that draws the whole (B, C) block, or a sequence of B of them, one per
    row: row i then draws T_i values (up to its last valid token) from its own generator, so its weights do
    not depend on the batch it sits in or on its padding (the trainer's row-keyed generators,
    :func:`oar_rl.distributed.row_generators`).
    """
    _check_mask(completion_mask, "completion_mask")
    if completion_mask.ndim != 2:
        raise ValueError(f"completion_mask must be 2-D (B, C), got shape {tuple(completion_mask.shape)}")
    per_row = isinstance(generator, (list, tuple))
    for gen in generator if per_row else [generator]:
        if gen is not None and gen.device.type != "cpu":
            raise ValueError(f"generator must be a CPU torch.Generator, got {gen.device}")
    valid = completion_mask.bool().cpu()  # (B, C)
    if not per_row:
        u = torch.rand(completion_mask.shape, generator=generator, dtype=torch.float32)  # (B, C)
        return (u * valid).to(completion_mask.device)
    B = completion_mask.shape[0]
    if len(generator) != B:
        raise ValueError(f"got {len(generator)} generators for {B} rows; pass one per row")
    u = torch.zeros(completion_mask.shape, dtype=torch.float32)  # (B, C)
    for i, gen in enumerate(generator):
        idx = valid[i].nonzero()
        if idx.numel():
            T = int(idx.max()) + 1
            u[i, :T] = torch.rand(T, generator=gen)
    return (u * valid).to(completion_mask.device)


def random_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> Tensor:
    """:func:`random_importance` of a prepared batch's completion mask (the registry's scorer for
    ``random``; the model is not run), 0 outside the reasoning tokens when the batch has them (the draws
    are the same either way)."""
    u = random_importance(batch.completion_mask, generator=generator)
    return u if batch.reasoning_mask is None else u * batch.reasoning_mask


CONTROLS: tuple[str, ...] = ("position", "random")
"""The control signals every recall or attribution table carries (module docstring)."""


def position_importance(completion_mask: Tensor) -> Tensor:
    """(B, C) float32: the 1-based position t + 1 of each valid token in its completion, 0 on padding.

    The position control (module docstring): ranking by it puts the last tokens first, with no ties.
    """
    _check_mask(completion_mask, "completion_mask")
    if completion_mask.ndim != 2:
        raise ValueError(f"completion_mask must be 2-D (B, C), got shape {tuple(completion_mask.shape)}")
    idx = torch.arange(1, completion_mask.shape[1] + 1, dtype=torch.float32, device=completion_mask.device)
    return idx[None, :] * completion_mask.bool()  # (B, C)


def position_scores(model: nn.Module | None, batch: ScoringBatch, **_: Any) -> Tensor:
    """:func:`position_importance` on the batch's scored tokens (the reasoning tokens when the batch has
    them), 0 elsewhere: the registry's scorer for ``position`` (no model, no probe, no noise)."""
    return position_importance(batch.completion_mask) * batch.scored("lt-logits")


def reasoning_entropy_scores(model: nn.Module, batch: ScoringBatch, **options: Any) -> Tensor:
    """:func:`entropy_scores` (options as there) on the batch's scored tokens, 0 elsewhere: the importance
    the analyses read for ``entropy-80-20`` (its training uses TRL's ``top_entropy_quantile``, which ranks
    every completion token of the micro-batch; the analyses rank the reasoning tokens like every rule)."""
    return entropy_scores(model, batch, **options) * batch.scored("lt-logits")
