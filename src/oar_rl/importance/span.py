"""Span-level OAR-P (credit mode ``oar-p-span``): mask each reasoning step as one unit.

Exact OAR-P (:mod:`oar_rl.importance.perturbation`) runs one perturbed copy per scored token: T copies
per row. Here the scored tokens of a row are cut into *steps* and each step is masked as a whole, one
copy per step (batched, ``batch_size`` copies per forward pass); every token of a step gets its step's
score, the shift of the outcome probe's distribution when the step is masked,
KL(P ‖ P^(step)) (the clamped score drop for AS-Joint), exactly as OAR-P scores one token
(:func:`oar_rl.probes.outcome_divergence`, same probes, same mask token, same attention mask and
positions). With S steps per row the cost is S copies instead of T.

Steps (:func:`reasoning_steps`): the completion is decoded (with the character range of every token,
:func:`oar_rl.answer_span.token_spans`, the answer-span code's decoding) and a new step starts after
every line break and after every sentence end, a ``.``, ``!`` or ``?`` followed by whitespace (so
``3.5`` does not split). A token belongs to the step its first character falls in: the whitespace
token that follows a full stop opens the next step, a token holding the line break closes its line.
Only scored tokens (the reasoning, as for OAR-P) are grouped; a step is the set of scored tokens with
one step index, whether or not they are adjacent. ``steps=`` takes a precomputed (B, C) index instead
(:func:`fixed_length_steps` cuts runs of n tokens, what `oar-rl bench` uses on its random-token shapes,
which have no text).

Reference: "Beyond Uniform Credit" (arXiv 2602.09331) masks each reasoning span and gives its tokens
the span's score, one forward per span. Departures from it, and why:

- The score is OAR's outcome probe (the KL shift of P_final, or the AS probes), not that paper's
  span score, so that ``oar-p-span`` differs from ``oar-p`` only in the unit that is masked: the
  question it answers is what the coarser unit costs in ranking, not which score is better.
- The spans go through OAR's bi-level reshaping (Eq. 14-17) like every OAR score, not that paper's
  advantage shaping.
- Steps are sentences or lines of the decoded text (defined above); that paper segments by its own
  step delimiters. Text without either (e.g. random tokens) is one step per row unless ``steps`` is given.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

import torch
from torch import Tensor, nn

from oar_rl.answer_span import token_spans
from oar_rl.importance.perturbation import _probe_chunk
from oar_rl.importance.prefix import clean_pass, suffix_hidden
from oar_rl.model_parts import base_model, eval_mode
from oar_rl.probes import (
    Probe,
    ProbeOutcome,
    ProbeSpec,
    ScoringBatch,
    build_probe_spec,
    check_probe,
    check_rows_per_pass,
    outcome_divergence,
    probe_outcome,
)

_BOUNDARY = re.compile(r"\n|[.!?](?=\s)")


def step_boundaries(text: str) -> list[int]:
    """Character indices where a new step starts: after each line break and after each ``.``/``!``/``?``
    that is followed by whitespace."""
    return [m.end() for m in _BOUNDARY.finditer(text)]


def reasoning_steps(tokenizer: Any, completion_ids: Tensor, scored: Tensor) -> Tensor:
    """(B, C) long: the step index of every scored token (module docstring), -1 elsewhere."""
    B, C = scored.shape
    out = torch.full((B, C), -1, dtype=torch.long)
    scored_cpu = scored.bool().cpu()
    lengths = [int(r.nonzero().max()) + 1 if r.any() else 0 for r in scored_cpu]
    rows = [completion_ids[i, : lengths[i]].tolist() for i in range(B)]
    for i, (text, spans) in enumerate(token_spans(tokenizer, rows)):
        bounds = step_boundaries(text)
        for k, (lo, _hi) in enumerate(spans):
            if scored_cpu[i, k]:
                out[i, k] = bisect.bisect_right(bounds, lo)
    return out.to(scored.device)


def fixed_length_steps(scored: Tensor, tokens: int) -> Tensor:
    """(B, C) long: runs of `tokens` consecutive scored tokens share a step index, -1 elsewhere."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be an int >= 1, got {tokens!r}")
    rank = scored.long().cumsum(dim=1) - 1  # (B, C): index among the row's scored tokens
    return torch.where(scored.bool(), torch.div(rank, tokens, rounding_mode="floor"), -1)


def span_groups(steps: Tensor) -> tuple[Tensor, Tensor]:
    """(rows (S,), token masks (S, C)) of every (row, step) group of a (B, C) step index, ordered by the
    group's first token (then row)."""
    groups = []
    for i in range(steps.shape[0]):
        for s in torch.unique(steps[i][steps[i] >= 0]).tolist():
            m = steps[i] == s
            groups.append((int(m.nonzero()[0]), i, m))
    groups.sort(key=lambda g: (g[0], g[1]))
    if not groups:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, steps.shape[1], dtype=torch.bool)
    return torch.tensor([g[1] for g in groups]), torch.stack([g[2] for g in groups])


def span_perturbation_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    probe: Probe = "lt-logits",
    tokenizer: Any = None,
    steps: Tensor | None = None,
    mask_token_id: int | None = None,
    batch_size: int = 64,
    prefix_reuse: bool = True,
) -> Tensor:
    """(B, C) float32: every scored token gets the probe shift of masking its whole step (module doc).

    Args:
        probe: the outcome probe, as for OAR-P.
        tokenizer: decodes the completions to find the steps (needed unless `steps` is given).
        steps: optional (B, C) int step index of each token (-1: not scored); only scored tokens count.
        mask_token_id: replacement token; default the model config's pad token id.
        batch_size: masked copies per forward pass (results do not depend on it).
        prefix_reuse: reuse each clean row's key/value cache up to the chunk's first masked token (as
            OAR-P's prefix reuse); False recomputes whole copies. Same scores within float rounding.
    """
    check_probe(probe)
    check_rows_per_pass(batch_size, optional=False)
    if mask_token_id is None:
        mask_token_id = getattr(getattr(model, "config", None), "pad_token_id", None)
        if mask_token_id is None:
            raise ValueError("mask_token_id is None and the model config has no pad_token_id; pass one")
    vocab = getattr(base_model(model).get_input_embeddings(), "num_embeddings", None)
    if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, int) or mask_token_id < 0:
        raise ValueError(f"mask_token_id must be a non-negative int, got {mask_token_id!r}")
    if vocab is not None and mask_token_id >= vocab:
        raise ValueError(f"mask_token_id={mask_token_id} is outside the embedding table [0, {vocab})")
    P = batch.prompt_len
    B, C = batch.completion_mask.shape
    scored = batch.scored(probe)  # (B, C)
    if steps is None:
        if tokenizer is None:
            raise ValueError("oar-p-span needs a tokenizer to find the reasoning steps (or steps=)")
        steps = reasoning_steps(tokenizer, batch.input_ids[:, P:].cpu(), scored)
    elif not isinstance(steps, Tensor) or steps.shape != (B, C):
        got = tuple(steps.shape) if isinstance(steps, Tensor) else type(steps).__name__
        raise ValueError(f"steps must be a (B, C) = {(B, C)} int tensor, got {got}")
    steps = torch.where(scored.cpu(), steps.cpu().long(), -1)  # (B, C)
    rows, masks = span_groups(steps)  # (S,), (S, C)
    out = torch.zeros(B, C, dtype=torch.float32, device=batch.input_ids.device)
    if rows.numel() == 0:
        return out
    rows, masks = rows.to(out.device), masks.to(out.device)
    spec = build_probe_spec(P, batch.attention_mask, batch.input_ids[:, P:], batch.span(probe), probe)
    work = torch.unique(rows)  # (B',)
    slot = torch.full((B,), -1, dtype=torch.long, device=out.device)
    slot[work] = torch.arange(work.shape[0], device=out.device)
    firsts = masks.long().argmax(dim=1)  # (S,) first masked column of each group
    with torch.no_grad(), eval_mode(model):
        clean, caches = _clean(model, batch, spec, work, batch_size, prefix_reuse)
        for lo in range(0, rows.shape[0], batch_size):
            r, m = rows[lo : lo + batch_size], masks[lo : lo + batch_size]  # (n,), (n, C)
            sub = spec.take(r)
            ids = batch.input_ids[r].clone()  # (n, L)
            ids[:, P:] = torch.where(m, torch.full_like(ids[:, P:], mask_token_id), ids[:, P:])
            if caches is None:
                pert = _probe_chunk(model, ids, batch.attention_mask[r], sub)
            else:
                start = P + int(firsts[lo : lo + batch_size].min())  # [0, start) from the cache
                stop = sub.max_index() + 1
                hidden = suffix_hidden(
                    model,
                    caches,
                    slot[r],
                    start,
                    batch.attention_mask[r, :stop],
                    input_ids=ids[:, start:stop],
                )
                pert = probe_outcome(
                    model, hidden, ProbeSpec(sub.kind, sub.row_ptr, sub.index - start, sub.target)
                )
            div = outcome_divergence(clean.take(slot[r]), pert, spec.kind[r], mode="perturbation")  # (n,)
            out.index_add_(0, r, m.float() * div.float()[:, None])  # a row's groups are disjoint
    return out


def _clean(model, batch: ScoringBatch, spec: ProbeSpec, work: Tensor, batch_size: int, reuse: bool):
    """(clean probe outcome of the rows `work`, their key/value caches or None)."""
    end = spec.max_index() + 1
    parts, caches = [], None
    for lo in range(0, work.shape[0], batch_size):
        r = work[lo : lo + batch_size]
        ids, attn = batch.input_ids[r, :end], batch.attention_mask[r, :end]
        if reuse:
            hidden, cache = clean_pass(model, attn, input_ids=ids)
            if cache is None:  # the model's cache cannot be reused: whole copies
                return _clean(model, batch, spec, work, batch_size, False)
            caches = cache if caches is None else caches.cat(cache)
            parts.append(probe_outcome(model, hidden, spec.take(r)))
        else:
            parts.append(_probe_chunk(model, batch.input_ids[r], batch.attention_mask[r], spec.take(r)))
    return ProbeOutcome(torch.cat([p.logp for p in parts]), torch.cat([p.phi for p in parts])), caches
