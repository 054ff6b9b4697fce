"""OAR-G: input-gradient importance under embedding noise (paper §3.2, Eq. 9-13).

E are the clean input embeddings of prompt+completion. The teacher P_0 is the clean probe (Eq. 9, no
grad); Gaussian noise ε ~ N(0, σ²I) is added to the completion embeddings (Eq. 10); the student P_ε is
the probe of E + ε; J = Σ_rows KL(P_0 ‖ P_ε) (Eq. 11); g = ∂J/∂E (Eq. 12) by ``torch.autograd.grad``
with respect to the embeddings only; I_t = |⟨g_t, e_t⟩| with e_t the *clean* embedding (Eq. 13).

Implementation notes:
- Noise is drawn per row, on the CPU in float32, from a generator seeded by one 63-bit seed per row
  (:func:`row_noise`); the per-row seeds come from ``generator``. So a seeded generator gives the same
  scores on any device and for any ``batch_size``, and memory stays O(batch_size · C · H). With a
  sequence of B generators (one per row, :func:`oar_rl.distributed.row_generators`), row i's seed comes
  from its own generator and its noise is drawn for the row's own length T_i (last valid token + 1),
  not the batch's padded width: it depends on the row alone, so a row gets the same noise on any rank
  and world size.
- The gradient never touches parameters: ``torch.autograd.grad(J, noisy)`` only, never
  ``.backward()``; the noisy embeddings are a fresh float32 leaf that requires grad, so this works with
  frozen (PEFT) or trainable parameters, and with gradient checkpointing (the model runs in eval mode,
  where transformers disables checkpointing). No parameter's ``requires_grad`` is changed.
- Cost: the work is the compute floor of Eq. 9-13 and nothing more -- one no-grad clean pass of
  prompt + completion (it gives P_0 and the prompt's key/value cache), one noisy forward over the
  completion on that cache, and the backward to the noisy embeddings. The backward computes no parameter
  gradient (``autograd.grad`` runs only the input-gradient half of every matmul; turning parameters'
  ``requires_grad`` off changes no measured time), the LM head runs only at probe positions ((N, V)
  logits, never (N, L, V)), and every pass stops at its chunk's last probe position. ``oar-rl bench``
  times that floor on the same batch beside OAR-G (``oar-g floor: clean`` / ``noisy``); OAR-G / floor
  was 1.00-1.03 with one thread on four Qwen2 shapes (10M-30M parameters, C = 128-256). The floor as a
  share of one training forward + backward depends on the shape: the training pass also runs the LM head
  over every position, so the larger the vocabulary relative to the body, the cheaper OAR-G looks.
- J is a sum over rows and rows do not interact, so ``batch_size`` rows at a time give the same g.
  The objective is never clamped (see :func:`oar_rl.probes.outcome_divergence`): at σ = 1e-3 the KL is
  ~1e-8 and rounding makes it negative about half the time, and a clamp would zero those rows.

Precision (bf16/fp16 models). The embedding + noise sum is formed in float32 and the probes and the KL
are float32, but the model itself sees its own dtype: a perturbation below the resolution of the
embeddings (bf16 keeps 8 significant bits, so ε_i is lost wherever |ε_i| < |e_i|/512) rounds away.
``noise_scale="rms"`` makes σ relative to the root-mean-square of each row's clean completion
embeddings (σ_row = noise_std · RMS), so the same ``noise_std`` means the same thing for Qwen's 0.02-scale
embeddings and Gemma's unit-scale ones. ``experiments/oar_g_precision`` measures the bf16-vs-float32
rank correlation on twelve tiny architectures: mean (min) Spearman ρ 0.58 (0.35) for the paper's
absolute σ = 1e-3, 0.92 (0.77) for 0.05 × RMS, 0.97 (0.91) for 0.1 × RMS (docs: OAR-G noise). So for bf16/fp16
models use ``noise_scale="rms"`` with ``noise_std`` 0.05-0.1; the default stays the paper's absolute
1e-3. Float32 arithmetic alone cannot rescue a σ below the model dtype's resolution, since the model
still sees its own dtype. The scorer warns when most of the noise is lost to rounding.
Where the noise does survive (Qwen-scale embeddings, std 0.02), bf16 still costs ρ ≈ 0.8 against
float64 at σ = 1e-3 on a 30-layer model: the bf16 forward's rounding is not small next to the change
σ makes in P_ε. Computing the LM head and KL in float32 changes nothing and bf16-rounded weights in
float32 arithmetic give ρ 0.999 (``experiments/oar_g_precision``, ``results/oar-g-precision/``); the
only remedies measured are float32 arithmetic in the body (far above OAR-G's cost) or a larger σ (a
different score: float64 at 4e-3 vs 1e-3 gives ρ 0.73), so nothing here changes.

Several draws (``num_draws`` = K). One draw is noisy: near the clean point g ≈ Hε, so |⟨g_t, e_t⟩| is a
single half-normal sample around its scale. With K > 1 every row is repeated K times in the same
batched pass, each copy with independent noise, and the score is the mean over draws of |⟨g_t, e_t⟩|,
an estimate of the expected Eq. 13 score. Averaging g first would be wrong: E[g] = E[Hε] = 0 to first
order, so the mean gradient shrinks towards 0 and keeps mostly the noise. The clean pass runs once per
row. On the embedded trained model (``experiments/oar_g_draws``) draw-to-draw ρ was 0.78 at K = 1
and 0.92 at K = 2, but recall of OAR-P's top-20% tokens stayed at 0.57-0.58 and cost grew ~linearly.
So the default is K = 1, the paper's.

Departures from the paper:
- AS-Joint has no distribution to take a KL of; its objective is ½(φ_0 − φ_ε)², the scalar analogue
  (≥ 0, flat at the clean point) -- see :func:`oar_rl.probes.outcome_divergence`.
- AS probes keep only the scores of tokens before the answer span (0 elsewhere); a row without a span
  falls back to LT-Logits.
- ``num_draws`` > 1 and ``noise_scale="rms"`` are options the paper does not have (it uses one draw of
  absolute σ).
- σ = 0 is allowed and gives all-zero scores (KL has zero gradient at P_ε = P_0).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from oar_rl.importance.prefix import clean_pass, suffix_hidden
from oar_rl.model_parts import base_model, body_hidden, eval_mode
from oar_rl.probes import (
    Probe,
    ProbeSpec,
    ScoringBatch,
    build_probe_spec,
    check_probe,
    check_rows_per_pass,
    outcome_divergence,
    prepare_probe_batch,
    probe_outcome,
)

NoiseScale = Literal["absolute", "rms"]
NOISE_SCALES: tuple[str, ...] = ("absolute", "rms")
# warn when more than this share of the completion's noise elements round away in the model dtype
_LOST_NOISE_WARN = 0.5


def row_noise(seed: int, num_draws: int, C: int, H: int) -> Tensor:
    """(num_draws, C, H) float32 standard-normal noise of one row, from its own seed (on the CPU)."""
    g = torch.Generator().manual_seed(int(seed))
    return torch.randn((num_draws, C, H), generator=g, dtype=torch.float32)


def _row_eps(seed: int, K: int, C: int, H: int, valid: Tensor | None) -> Tensor:
    """(K, C, H) noise of one row: drawn for width C, or (given the row's mask) for its own length T."""
    if valid is None:
        return row_noise(seed, K, C, H)
    idx = valid.nonzero()
    T = int(idx.max()) + 1 if idx.numel() else 0
    eps = torch.zeros(K, C, H, dtype=torch.float32)
    eps[:, :T] = row_noise(seed, K, T, H)
    return eps


def row_seeds(generator: torch.Generator | Sequence[torch.Generator] | None, B: int) -> list[int]:
    """One 63-bit seed per row, drawn from `generator` (None: the global CPU RNG), or from each row's own
    generator when `generator` is a sequence of B of them."""
    if isinstance(generator, (list, tuple)):
        if len(generator) != B:
            raise ValueError(f"got {len(generator)} generators for {B} rows; pass one per row")
        return [int(torch.randint(0, 2**63 - 1, (1,), generator=g, dtype=torch.long)) for g in generator]
    return torch.randint(0, 2**63 - 1, (B,), generator=generator, dtype=torch.long).tolist()


def _check_options(noise_std, noise_scale, num_draws, batch_size, generator) -> None:
    if isinstance(noise_std, bool) or not isinstance(noise_std, (int, float)) or not math.isfinite(noise_std):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    if noise_scale not in NOISE_SCALES:
        raise ValueError(f"noise_scale={noise_scale!r} is not valid; choose one of {list(NOISE_SCALES)}")
    if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws < 1:
        raise ValueError(f"num_draws must be a positive int, got {num_draws!r}")
    check_rows_per_pass(batch_size)
    for gen in generator if isinstance(generator, (list, tuple)) else [generator]:
        if gen is not None and (not isinstance(gen, torch.Generator) or gen.device.type != "cpu"):
            raise ValueError(
                f"generator must be a CPU torch.Generator (noise is drawn on the CPU), got {gen!r}"
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
    reasoning_mask: Tensor | None = None,
    **options: Any,
) -> Tensor:
    """OAR-G raw importance I_t = mean over draws of |⟨∂J/∂e_t, e_t⟩| (Eq. 9-13).

    Args:
        model: a Hugging Face causal LM (plain or PEFT-wrapped), the policy that generated the batch.
        prompt_ids: (B, P) prompt token ids, left-padded.
        prompt_mask: (B, P) 1 on real prompt tokens.
        completion_ids: (B, C) completion token ids, right-padded.
        completion_mask: (B, C) 1 on real completion tokens.
        probe: ``"lt-logits"``, ``"as-mean"`` or ``"as-joint"``.
        answer_mask: (B, C) answer-span mask; required for AS probes, ignored by LT-Logits.
        reasoning_mask: (B, C) reasoning tokens (:func:`oar_rl.answer_span.reasoning_mask`) or None; when
            given only they are scored (and, for OAR-G, noised).
        **options: the options of :func:`gradient_scores` (listed there), which scores the batch once
            :func:`~oar_rl.probes.prepare_batch` has validated and laid it out.

    Returns:
        (B, C) float32 on the model's device; 0 on padding and unscored positions.
    """
    batch = prepare_probe_batch(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, probe, answer_mask, reasoning_mask
    )
    return gradient_scores(model, batch, probe=probe, **options)


def gradient_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    probe: Probe = "lt-logits",
    noise_std: float = 1e-3,
    noise_scale: NoiseScale = "absolute",
    num_draws: int = 1,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    batch_size: int | None = None,
    progress: bool = False,
    prefix_reuse: bool = True,
) -> Tensor:
    """:func:`gradient_importance` of a prepared batch (the registry's scorer for ``oar-g``); the answer
    span, for the AS probes, is the batch's.

    Args:
        noise_std: σ of the embedding noise (finite, ≥ 0).
        noise_scale: ``"absolute"`` (σ = noise_std, the paper) or ``"rms"`` (σ = noise_std times the RMS
            of the row's clean completion embeddings).
        num_draws: K independent noise draws per row, run in the same batched pass (each row repeated
            K times); the score is the mean of the K values of |⟨g_t, e_t⟩|.
        generator: a CPU ``torch.Generator`` for the per-row noise seeds (None: the global CPU RNG), or
            a sequence of B of them, one per row (noise independent of batching and padding).
        batch_size: sequences per forward/backward, where each row counts K (so memory does not grow
            with K); at least one row per chunk. None: all rows at once. Does not change the result.
        progress: show a tqdm bar over the row chunks.
        prefix_reuse: the noisy pass reuses the clean pass's key/value cache of the prompt (noise is
            zero there) and runs forward and backward over the completion only; same result within
            float rounding. False: the noisy pass runs over the whole sequence.
    """
    check_probe(probe)
    _check_options(noise_std, noise_scale, num_draws, batch_size, generator)
    if torch.is_inference_mode_enabled():
        raise RuntimeError("gradient_importance needs autograd; call it outside torch.inference_mode()")
    P = batch.prompt_len
    B, C = batch.completion_mask.shape
    device = batch.input_ids.device
    answer, scored = batch.span(probe), batch.scored(probe)  # None / (B, C), (B, C)

    embed = base_model(model).get_input_embeddings()
    H = embed.weight.shape[1]
    K = num_draws
    seeds = row_seeds(generator, B)  # drawn for all rows first: results do not depend on batch_size
    # per-row generators: draw each row's noise for its own length, so padding cannot change it
    own = isinstance(generator, (list, tuple))
    out = torch.zeros(B, C, dtype=torch.float32, device=device)
    if B == 0 or C == 0 or noise_std == 0 or not bool(scored.any()):
        return out
    spec = build_probe_spec(P, batch.attention_mask, batch.input_ids[:, P:], answer, probe)
    step = max(1, batch_size // K) if batch_size else B  # rows per chunk: a row is K sequences
    rows_all = scored.any(dim=1).nonzero().flatten()  # (B',) rows with something to score
    # chunks of rows with similar last probe positions, so each chunk's pass stops early (order-free)
    counts = spec.row_ptr[1:] - spec.row_ptr[:-1]  # (B,) entries are sorted by position within a row
    ends = torch.where(counts > 0, spec.index[(spec.row_ptr[1:] - 1).clamp(min=0)], 0)  # (B,) last probe
    rows_all = rows_all[torch.argsort(ends[rows_all], stable=True)]
    lost = kept = 0

    with eval_mode(model):
        for lo in tqdm(range(0, rows_all.shape[0], step), desc="OAR-G", unit="chunk", disable=not progress):
            rows = rows_all[lo : lo + step]  # (n,)
            n = rows.shape[0]
            rep = rows.repeat_interleave(K)  # (n K,): row r's K copies are adjacent
            sub = spec.take(rep)
            L = sub.max_index() + 1  # causal: positions after the last probe cannot matter
            ids, attn = batch.input_ids[rows, :L], batch.attention_mask[rows, :L]  # (n, L)
            cache = None  # prompt-cache reuse (oar_rl.importance.prefix): noise is zero on the prompt
            with torch.no_grad():  # the clean pass runs once per row, not once per draw
                emb = embed(ids)  # (n, L, H) clean embeddings e_t, model dtype
                if prefix_reuse and P >= 1 and int(sub.index.min()) >= P:
                    hidden, cache = clean_pass(model, attn, inputs_embeds=emb)
                else:
                    hidden = body_hidden(model, attn, inputs_embeds=emb)
                clean = probe_outcome(model, hidden, spec.take(rows))
                del hidden
            clean = clean.take(torch.arange(n, device=device).repeat_interleave(K))  # (nK) rows
            emb, attn = emb.repeat_interleave(K, dim=0), attn.repeat_interleave(K, dim=0)  # (nK, L, .)
            valid = batch.noised[rep, : L - P].cpu()  # (nK, L - P): reasoning tokens when given
            eps = torch.cat(
                [
                    _row_eps(seeds[int(r)], K, C, H, batch.completion_mask[r] if own else None)[:, : L - P]
                    for r in rows.tolist()
                ]
            )  # (nK, ., H)
            eps = eps * valid[..., None]
            if noise_scale == "rms":
                e32 = emb[:, P:].detach().float().cpu()  # (nK, L - P, H)
                ms = (e32.square().sum(dim=-1) * valid).sum(dim=1) / (valid.sum(dim=1) * H).clamp(min=1)
                eps = eps * (noise_std * ms.sqrt())[:, None, None]  # (nK,) per-row σ
            else:
                eps = eps * noise_std
            start = P if cache is not None else 0  # first position the noisy pass recomputes
            wide = torch.promote_types(emb.dtype, torch.float32)
            noisy = emb[:, start:].detach().to(wide, copy=True)  # (nK, L - start, H) float32 (or f64) leaf
            noisy[:, P - start :] += eps.to(device=device, dtype=wide)
            noisy.requires_grad_(True)
            model_in = noisy.to(emb.dtype)
            if emb.dtype != wide:  # how much of the noise survives the model's dtype
                moved = (model_in[:, P - start :].detach() != emb[:, P:]) & valid.to(device)[..., None].bool()
                lost += int(valid.sum() * H) - int(moved.sum())
                kept += int(moved.sum())
            with torch.enable_grad():
                if cache is not None:  # the prompt's keys/values do not depend on the completion
                    local = torch.arange(n, device=device).repeat_interleave(K)  # (nK,) cached row
                    hidden = suffix_hidden(model, cache, local, P, attn, inputs_embeds=model_in)
                    shifted = ProbeSpec(sub.kind, sub.row_ptr, sub.index - P, sub.target)
                    pert = probe_outcome(model, hidden, shifted)
                else:
                    pert = probe_outcome(model, body_hidden(model, attn, inputs_embeds=model_in), sub)
                J = outcome_divergence(clean, pert, sub.kind, mode="gradient").sum()
                (g,) = torch.autograd.grad(J, noisy)  # (nK, L - start, H) float32
            score = (g[:, P - start :] * emb[:, P:].to(wide)).sum(dim=-1).abs().float()  # (nK, L - P)
            out[rows, : L - P] = score.view(n, K, L - P).mean(dim=1)
    if lost + kept and lost / (lost + kept) > _LOST_NOISE_WARN:
        warnings.warn(
            f"OAR-G: {100 * lost / (lost + kept):.0f}% of the embedding noise (noise_std={noise_std}, "
            f"noise_scale={noise_scale!r}) rounds away in the model's {emb.dtype}; the scores are mostly "
            "rounding noise. Use noise_scale='rms' with a larger noise_std, or score in float32.",
            RuntimeWarning,
            stacklevel=2,
        )
    return out * scored
