"""OAR-G: input-gradient importance under embedding noise (paper §3.2, Eq. 9-13).

E are the clean input embeddings of prompt+completion. The teacher P_0 is the clean probe (Eq. 9, no
grad); Gaussian noise ε ~ N(0, σ²I) is added to the completion embeddings (Eq. 10); the student P_ε is
the probe of E + ε; J = Σ_rows KL(P_0 ‖ P_ε) (Eq. 11); g = ∂J/∂E (Eq. 12) by ``torch.autograd.grad``
with respect to the embeddings only; I_t = |⟨g_t, e_t⟩| with e_t the *clean* embedding (Eq. 13).

Implementation notes:
- The noise is ``torch.randn((B, C, H), generator=generator)`` drawn on the CPU in float32 (so a
  seeded generator gives the same scores on any device), times σ, zero on completion padding, none on
  the prompt; it is then cast to the embedding dtype and moved to the model's device. With a sequence
  of B generators (one per row), row i's noise is ``torch.randn((T_i, H), generator=generator[i])``
  with T_i the row's own length (last valid token + 1): it depends on the row alone, not on the batch
  it sits in or its padding, so a row gets the same noise on any rank or world size.
- The gradient never touches parameters: ``torch.autograd.grad(J, inputs_embeds)`` only, never
  ``.backward()``; the embeddings are a fresh leaf that requires grad, so this works with frozen
  (PEFT) or trainable parameters, and with gradient checkpointing (the model runs in eval mode, where
  transformers disables checkpointing). No parameter's ``requires_grad`` is changed.
- J is a sum over rows and rows do not interact, so ``batch_size`` rows at a time give the same g.

Departures from the paper:
- AS-Joint has no distribution to take a KL of; its objective is ½(φ_0 − φ_ε)², the scalar analogue
  (≥ 0, flat at the clean point) -- see :func:`oar_rl.probes.outcome_divergence`.
- AS probes keep only the scores of tokens before the answer span (0 elsewhere); a row without a span
  falls back to LT-Logits.
- σ = 0 is allowed and gives all-zero scores (KL has zero gradient at P_ε = P_0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from oar_rl.probes import (
    Probe,
    base_model,
    body_hidden,
    build_probe_spec,
    check_answer_mask,
    check_probe,
    eval_mode,
    outcome_divergence,
    prepare_batch,
    probe_outcome,
    scored_positions,
)


def gradient_importance(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    probe: Probe = "lt-logits",
    answer_mask: Tensor | None = None,
    noise_std: float = 1e-3,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    batch_size: int | None = None,
    progress: bool = False,
) -> Tensor:
    """OAR-G raw importance I_t = |⟨∂J/∂e_t, e_t⟩| (Eq. 9-13).

    Args:
        model: a Hugging Face causal LM (plain or PEFT-wrapped), the policy that generated the batch.
        prompt_ids: (B, P) prompt token ids, left-padded.
        prompt_mask: (B, P) 1 on real prompt tokens.
        completion_ids: (B, C) completion token ids, right-padded.
        completion_mask: (B, C) 1 on real completion tokens.
        probe: ``"lt-logits"``, ``"as-mean"`` or ``"as-joint"``.
        answer_mask: (B, C) answer-span mask; required for AS probes, ignored by LT-Logits.
        noise_std: σ of the embedding noise (finite, ≥ 0).
        generator: a CPU ``torch.Generator`` for the noise (None: the global CPU RNG), or a sequence of
            B of them, one per row (row-keyed noise, independent of batching and padding).
        batch_size: rows per forward/backward (None: all rows at once). Does not change the result.
        progress: show a tqdm bar over the row chunks.

    Returns:
        (B, C) float32 on the model's device; 0 on padding and unscored positions.
    """
    check_probe(probe)
    if isinstance(noise_std, bool) or not isinstance(noise_std, (int, float)) or not math.isfinite(noise_std):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
    gens = list(generator) if isinstance(generator, (list, tuple)) else [generator]
    for gen in gens:
        if gen is not None and (not isinstance(gen, torch.Generator) or gen.device.type != "cpu"):
            raise ValueError(
                f"generator must be a CPU torch.Generator (noise is drawn on the CPU), got {gen!r}"
            )
    if isinstance(generator, (list, tuple)) and len(gens) != completion_ids.shape[0]:
        raise ValueError(f"got {len(gens)} generators for {completion_ids.shape[0]} rows; pass one per row")
    if torch.is_inference_mode_enabled():
        raise RuntimeError("gradient_importance needs autograd; call it outside torch.inference_mode()")
    batch = prepare_batch(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    P = batch.prompt_len
    B, C = batch.completion_mask.shape
    device = batch.input_ids.device
    if probe == "lt-logits":
        answer = None
        scored = batch.completion_mask  # (B, C)
    else:
        if answer_mask is None:
            raise ValueError(f"probe={probe!r} needs an answer_mask (see oar_rl.probes.answer_span_mask)")
        check_answer_mask(answer_mask, completion_mask)
        answer = answer_mask.bool().to(device)
        scored = scored_positions(batch.completion_mask, answer)  # (B, C)

    embed = base_model(model).get_input_embeddings()
    H = embed.weight.shape[1]
    # noise first, for all rows, so the result does not depend on batch_size
    noise = _draw_noise(generator, batch.completion_mask.cpu(), H) * noise_std  # (B, C, H)
    out = torch.zeros(B, C, dtype=torch.float32, device=device)
    if B == 0 or C == 0 or noise_std == 0 or not bool(scored.any()):
        return out
    spec = build_probe_spec(P, batch.attention_mask, batch.input_ids[:, P:], answer, probe)
    step = batch_size or B
    rows_all = scored.any(dim=1).nonzero().flatten()  # (B',) rows with something to score

    with eval_mode(model):
        for lo in tqdm(range(0, rows_all.shape[0], step), desc="OAR-G", unit="chunk", disable=not progress):
            rows = rows_all[lo : lo + step]  # (n,)
            sub = spec.take(rows)
            L = sub.max_index() + 1  # causal: positions after the last probe cannot matter
            ids, attn = batch.input_ids[rows, :L], batch.attention_mask[rows, :L]  # (n, L)
            with torch.no_grad():
                emb = embed(ids)  # (n, L, H) clean embeddings e_t
                clean = probe_outcome(model, body_hidden(model, attn, inputs_embeds=emb), sub)
            eps = torch.zeros(rows.shape[0], L, H, dtype=torch.float32)  # (n, L, H), zero on the prompt
            eps[:, P:] = (noise[rows.cpu()] * batch.completion_mask[rows].cpu()[..., None])[:, : L - P]
            noisy = (emb.detach() + eps.to(device=device, dtype=emb.dtype)).requires_grad_(True)  # (n, L, H)
            with torch.enable_grad():
                pert = probe_outcome(model, body_hidden(model, attn, inputs_embeds=noisy), sub)
                J = outcome_divergence(clean, pert, sub.kind, mode="gradient").sum()
                (g,) = torch.autograd.grad(J, noisy)  # (n, L, H)
            score = (g[:, P:].float() * emb[:, P:].float()).sum(dim=-1).abs()  # (n, L - P)
            out[rows, : L - P] = score
    return out * scored


def _draw_noise(
    generator: torch.Generator | Sequence[torch.Generator] | None, completion_mask: Tensor, H: int
) -> Tensor:
    """(B, C, H) standard normal float32 on the CPU: one batch draw, or one draw per row of its own length."""
    B, C = completion_mask.shape
    if not isinstance(generator, (list, tuple)):
        return torch.randn((B, C, H), generator=generator, dtype=torch.float32, device="cpu")
    noise = torch.zeros(B, C, H, dtype=torch.float32)
    for i, gen in enumerate(generator):
        valid = completion_mask[i].nonzero()
        if valid.numel():
            T = int(valid.max()) + 1  # the row's own length: independent of the batch's padding
            noise[i, :T] = torch.randn((T, H), generator=gen, dtype=torch.float32)
    return noise
