"""OAR-P: counterfactual token-masking importance (paper §3.1, Eq. 7-8).

For every scored completion token t of every row, a copy of the sequence has token t replaced by a mask
token (Eq. 7); the importance is how far that moves the outcome probe, I_t = KL(P ‖ P^(t)) (Eq. 8) --
or the clamped score drop for AS-Joint (see :mod:`oar_rl.probes`).

Implementation (the paper's "parallelized batch decoding", made memory-safe):
- All perturbed copies of the whole batch are laid out as (row, t) pairs and run through the
  transformer *body* in chunks of ``batch_size`` copies; each chunk is cut after its last probe
  position (causal attention: later positions cannot change earlier hidden states).
- Only the probe positions' hidden states go through the LM head, so memory per chunk is
  O(batch_size · (L · H + V)), never the [copies, L, V] float32 logits that published code builds.
- Prefix reuse (default, ``prefix_reuse=True``): positions before the perturbed token t are those of
  the clean sequence, so the clean rows run once with their key/value cache kept and each copy
  recomputes only from t on (:mod:`oar_rl.importance.prefix`); copies are chunked in order of t so a
  chunk shares its prefix. ``prefix_reuse=False`` recomputes every copy from position 0.
- Attention mask and positions are those of the unperturbed sequence (the mask token is attended to,
  as in the paper's [PAD] replacement), the positions those it was generated with (:mod:`oar_rl.probes`).

Departures from the paper:
- AS probes score only the tokens before the answer span (span and later tokens get 0 here and keep
  weight 1 after reshaping); a row without a span falls back to LT-Logits.
- Rows with no valid completion token, and unscored positions, get 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from oar_rl.importance.prefix import clean_pass, suffix_hidden
from oar_rl.model_parts import base_model, body_hidden, eval_mode
from oar_rl.probes import (
    Probe,
    ProbeOutcome,
    ProbeSpec,
    ScoringBatch,
    build_probe_spec,
    check_probe,
    check_rows_per_pass,
    outcome_divergence,
    prepare_probe_batch,
    probe_outcome,
)


def _probe_chunk(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, spec: ProbeSpec
) -> ProbeOutcome:
    """Probe outcome of N sequences (N, L), running the body only up to the last probe position."""
    L = spec.max_index() + 1
    hidden = body_hidden(model, attention_mask[:, :L], input_ids=input_ids[:, :L])  # (N, L', H)
    return probe_outcome(model, hidden, spec)


def perturbation_importance(
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
    """OAR-P raw importance I_t = D(P ‖ P^(t)) for every scored completion token (Eq. 7-8).

    Args:
        model: a Hugging Face causal LM (plain or PEFT-wrapped), the policy that generated the batch.
        prompt_ids: (B, P) prompt token ids, left-padded.
        prompt_mask: (B, P) 1 on real prompt tokens.
        completion_ids: (B, C) completion token ids, right-padded.
        completion_mask: (B, C) 1 on real completion tokens.
        probe: ``"lt-logits"``, ``"as-mean"`` or ``"as-joint"``.
        answer_mask: (B, C) answer-span mask (:func:`oar_rl.answer_span.answer_span_mask`); required for AS
            probes, ignored by LT-Logits.
        reasoning_mask: (B, C) reasoning tokens (:func:`oar_rl.answer_span.reasoning_mask`) or None; when
            given only they are scored (and, for OAR-G, noised).
        **options: the options of :func:`perturbation_scores` (listed there), which scores the batch once
            :func:`~oar_rl.probes.prepare_batch` has validated and laid it out.

    Returns:
        (B, C) float32 on the model's device; 0 on padding and on unscored positions.
    """
    batch = prepare_probe_batch(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, probe, answer_mask, reasoning_mask
    )
    return perturbation_scores(model, batch, probe=probe, **options)


def perturbation_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    probe: Probe = "lt-logits",
    mask_token_id: int | None = None,
    batch_size: int = 64,
    progress: bool = False,
    prefix_reuse: bool = True,
    positions: Tensor | None = None,
) -> Tensor:
    """:func:`perturbation_importance` of a prepared batch (the registry's scorer for ``oar-p``); the
    answer span, for the AS probes, is the batch's.

    Args:
        mask_token_id: the replacement token; default ``model.config.pad_token_id``.
        batch_size: perturbed copies per forward pass (results do not depend on it).
        progress: show a tqdm bar over the chunks.
        prefix_reuse: run each clean row once with its key/value cache and recompute a perturbed copy
            only from the perturbed position on (:func:`_prefix_reuse_scores`); False recomputes every
            copy from position 0 (the paper's batching). Same result within float rounding.
        positions: optional (B, C) bool; only these tokens (among the scored ones) are perturbed, the
            others get 0 (the hybrid ``oar-gp`` rescoring a pre-selected subset). None: all of them.
    """
    check_probe(probe)
    check_rows_per_pass(batch_size, optional=False)
    if mask_token_id is None:
        mask_token_id = getattr(getattr(model, "config", None), "pad_token_id", None)
        if mask_token_id is None:
            raise ValueError(
                "mask_token_id is None and the model config has no pad_token_id; pass mask_token_id "
                "(e.g. tokenizer.pad_token_id) explicitly"
            )
    vocab = getattr(base_model(model).get_input_embeddings(), "num_embeddings", None)
    if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, int) or mask_token_id < 0:
        raise ValueError(f"mask_token_id must be a non-negative int, got {mask_token_id!r}")
    if vocab is not None and mask_token_id >= vocab:
        raise ValueError(f"mask_token_id={mask_token_id} is outside the embedding table [0, {vocab})")

    P = batch.prompt_len
    B, C = batch.completion_mask.shape
    answer, scored = batch.span(probe), batch.scored(probe)  # None / (B, C), (B, C)

    out = torch.zeros(B, C, dtype=torch.float32, device=batch.input_ids.device)
    if positions is not None:
        if not isinstance(positions, Tensor) or positions.shape != scored.shape:
            got = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
            raise ValueError(f"positions must be a (B, C) = {tuple(scored.shape)} bool tensor, got {got}")
        scored = scored & positions.bool().to(scored.device)
    pairs = scored.nonzero()  # (R, 2): (row, t), sorted by row
    if pairs.shape[0] == 0:
        return out
    spec = build_probe_spec(P, batch.attention_mask, batch.input_ids[:, P:], answer, probe)
    rows_with_work = torch.unique(pairs[:, 0])  # (B',)
    # --- prefix reuse (oar_rl.importance.prefix): same scores, ~half the token-forwards ---
    if prefix_reuse and _prefix_reuse_scores(
        model, batch, spec, pairs, rows_with_work, mask_token_id, batch_size, out, progress
    ):
        return out
    # --- full recomputation of every perturbed copy ---

    with torch.no_grad(), eval_mode(model):
        # clean probe of the rows that have scored tokens
        clean_rows: list[ProbeOutcome] = []
        for lo in range(0, rows_with_work.shape[0], batch_size):
            rows = rows_with_work[lo : lo + batch_size]
            clean_rows.append(
                _probe_chunk(model, batch.input_ids[rows], batch.attention_mask[rows], spec.take(rows))
            )
        clean = ProbeOutcome(
            torch.cat([c.logp for c in clean_rows]), torch.cat([c.phi for c in clean_rows])
        )  # B' rows
        slot = torch.full((B,), -1, dtype=torch.long, device=out.device)
        slot[rows_with_work] = torch.arange(rows_with_work.shape[0], device=out.device)

        # all perturbed copies, chunked
        starts = range(0, pairs.shape[0], batch_size)
        for lo in tqdm(starts, desc="OAR-P", unit="chunk", disable=not progress):
            rows, ts = pairs[lo : lo + batch_size, 0], pairs[lo : lo + batch_size, 1]  # (n,), (n,)
            ids = batch.input_ids[rows].clone()  # (n, L)
            ids[torch.arange(rows.shape[0], device=ids.device), P + ts] = mask_token_id
            pert = _probe_chunk(model, ids, batch.attention_mask[rows], spec.take(rows))
            div = outcome_divergence(
                clean.take(slot[rows]), pert, spec.kind[rows], mode="perturbation"
            )  # (n,)
            out[rows, ts] = div.float()
    return out


def _prefix_reuse_scores(
    model: nn.Module,
    batch: ScoringBatch,
    spec: ProbeSpec,
    pairs: Tensor,
    rows_with_work: Tensor,
    mask_token_id: int,
    batch_size: int,
    out: Tensor,
    progress: bool,
) -> bool:
    """OAR-P with the clean rows' key/value cache reused; fills `out`, False if the cache is unusable.

    The clean rows run once (``batch_size`` rows per pass) up to the batch's last probe position,
    keeping their caches. The (row, t) pairs are sorted by t, so a chunk of ``batch_size`` copies
    spans few positions; the chunk reuses the cached positions [0, P + t_min) of its rows and
    recomputes [P + t_min, its last probe position] with each copy's token replaced. Token-forwards
    per copy: (last probe position + 1) − (P + t_min) instead of last probe position + 1.

    Memory: the clean rows' keys/values (rows × layers × 2 × KV width × L) live for the whole call,
    and each chunk holds its own (``batch_size`` × layers × 2 × KV width × its length) -- all layers
    at once, where whole-copy recomputation holds one layer's at a time. Lower ``batch_size`` if
    that is too much.
    """
    P = batch.prompt_len
    end = spec.max_index() + 1
    with torch.no_grad(), eval_mode(model):
        caches, clean_parts = None, []
        for lo in range(0, rows_with_work.shape[0], batch_size):
            rows = rows_with_work[lo : lo + batch_size]
            hidden, cache = clean_pass(
                model, batch.attention_mask[rows, :end], input_ids=batch.input_ids[rows, :end]
            )
            if cache is None:
                return False
            clean_parts.append(probe_outcome(model, hidden, spec.take(rows)))
            caches = cache if caches is None else caches.cat(cache)
            del hidden
        clean = ProbeOutcome(
            torch.cat([c.logp for c in clean_parts]), torch.cat([c.phi for c in clean_parts])
        )  # B' rows, in rows_with_work order
        slot = torch.full((out.shape[0],), -1, dtype=torch.long, device=out.device)
        slot[rows_with_work] = torch.arange(rows_with_work.shape[0], device=out.device)

        order = torch.argsort(pairs[:, 1] * out.shape[0] + pairs[:, 0])  # by position t, then row
        by_t = pairs[order]
        for lo in tqdm(range(0, by_t.shape[0], batch_size), desc="OAR-P", unit="chunk", disable=not progress):
            rows, ts = by_t[lo : lo + batch_size, 0], by_t[lo : lo + batch_size, 1]  # (n,), (n,)
            sub = spec.take(rows)
            start = P + int(ts.min())  # shared prefix [0, start) comes from the cache
            stop = sub.max_index() + 1  # causal: nothing after the last probe position matters
            ids = batch.input_ids[rows, start:stop].clone()  # (n, S)
            ids[torch.arange(rows.shape[0], device=ids.device), P + ts - start] = mask_token_id
            hidden = suffix_hidden(
                model, caches, slot[rows], start, batch.attention_mask[rows, :stop], input_ids=ids
            )  # (n, S, H), position start + j at column j
            shifted = ProbeSpec(sub.kind, sub.row_ptr, sub.index - start, sub.target)
            if bool((shifted.index < 0).any()):  # a probe before its own perturbation: a bug, not input
                raise RuntimeError("OAR-P prefix reuse: a probe position lies before the recomputed suffix")
            pert = probe_outcome(model, hidden, shifted)
            div = outcome_divergence(clean.take(slot[rows]), pert, spec.kind[rows], mode="perturbation")
            out[rows, ts] = div.float()
    return True
