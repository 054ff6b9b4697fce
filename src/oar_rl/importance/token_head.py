"""Per-token statistics of the policy's next-token distribution over a batch's completion tokens, without
ever holding (B, C, V) logits: the loop that every one-forward per-token scorer shares (``entropy``,
``lowest-prob``, ``random-departure``'s off-greedy test).

The body runs ``batch_size`` rows at a time, cut at the last column any of them fills; the LM head runs
on the hidden states of the positions that predict a valid completion token only, ``chunk_size`` of them
at a time (by default as many as keep one block of logits under 2**24 elements, 64 MiB in float32).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from oar_rl.model_parts import body_hidden, eval_mode, head_logits, vocab_size
from oar_rl.probes import ScoringBatch

HEAD_BLOCK_ELEMENTS = 1 << 24
"""Logit elements of one LM-head block (64 MiB in float32)."""

TokenStat = Callable[[Tensor, Tensor], Sequence[Tensor]]
"""(logits (m, V) in the model's dtype, sampled tokens (m,)) -> one (m,) tensor per output."""


def head_block(model: nn.Module, chunk_size: int | None = None) -> int:
    """Positions per LM-head call: `chunk_size`, or as many as keep a block under HEAD_BLOCK_ELEMENTS."""
    return chunk_size or max(1, HEAD_BLOCK_ELEMENTS // vocab_size(model))


def completion_token_stats(
    model: nn.Module,
    batch: ScoringBatch,
    stat: TokenStat,
    dtypes: Sequence[torch.dtype],
    *,
    rows: Sequence[int] | None = None,
    batch_size: int | None = None,
    chunk_size: int | None = None,
    progress: bool = False,
    desc: str = "tokens",
) -> tuple[Tensor, ...]:
    """One (B, C) tensor per entry of `dtypes`: `stat`'s outputs at every valid completion token of the
    rows `rows` (None: every row), 0 / False on padding and on the other rows.

    `stat` sees the logits at full position P + t − 1, the ones that sampled completion token t, and the
    token itself; it is called under ``torch.no_grad()`` with the model in eval mode.
    """
    P = batch.prompt_len
    B, C = batch.completion_mask.shape
    device = batch.input_ids.device
    outs = tuple(torch.zeros(B, C, dtype=d, device=device) for d in dtypes)
    live = batch.completion_mask.any(dim=1)  # (B,)
    if rows is not None:
        keep = torch.zeros_like(live)
        keep[torch.as_tensor(list(rows), dtype=torch.long, device=device)] = True
        live = live & keep
    rows_all = live.nonzero().flatten()  # (B',)
    step = batch_size or B
    block = head_block(model, chunk_size)
    with torch.no_grad(), eval_mode(model):
        for lo in tqdm(range(0, rows_all.shape[0], step), desc=desc, unit="chunk", disable=not progress):
            idx = rows_all[lo : lo + step]  # (n,)
            valid = batch.completion_mask[idx]  # (n, C)
            last = int(valid.any(dim=0).nonzero().max())  # the last column with a valid token
            L = P + last  # positions P-1 .. P+last-1 predict completion tokens 0 .. last
            hidden = body_hidden(model, batch.attention_mask[idx, :L], input_ids=batch.input_ids[idx, :L])
            r, t = valid.nonzero(as_tuple=True)  # (M,), (M,)
            h = hidden[r, P + t - 1]  # (M, H): the positions that predict completion token t
            tok = batch.input_ids[idx[r], P + t]  # (M,)
            got = tuple(torch.empty(h.shape[0], dtype=d, device=device) for d in dtypes)
            for a in range(0, h.shape[0], block):
                vals = stat(head_logits(model, h[a : a + block]), tok[a : a + block])
                if len(vals) != len(dtypes):
                    raise ValueError(f"stat returned {len(vals)} outputs, expected {len(dtypes)}")
                for g, v in zip(got, vals, strict=True):
                    g[a : a + block] = v
            for o, g in zip(outs, got, strict=True):
                o[idx[r], t] = g
    return outs
