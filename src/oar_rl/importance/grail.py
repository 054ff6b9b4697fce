"""GRAIL: gradient-activation saliency of the answer span, as one more credit mode.

Reference: T. D. Pala, V. Toh and S. Poria, "GRAIL: Gradient-Reweighted Advantages for Reinforcement
Learning with Verifiable Rewards", arXiv:2606.04889 (2026); released code: github.com/declare-lab/grail.

For a rollout whose completion has an answer span a_1..a_m (completion positions k_1 < … < k_m)::

    J   = −Σ_ℓ log π(a_ℓ | x, y_<k_ℓ)      the answer span's negative log-likelihood (at temperature T)
    g_t = ∂J/∂e_t                            gradient w.r.t. the input embedding of completion token t
    s_t = ‖g_t ⊙ e_t‖₂                       gradient-activation saliency, e_t the clean embedding

:func:`grail_importance` returns s_t on the row's *reasoning tokens* (valid tokens strictly before the
first span token; :func:`reasoning_positions`) and 0 elsewhere. The weights are pure math in
:mod:`oar_rl.reshape`: z_t is the z-score of log s_t over the row's reasoning tokens, w_t = clamp(μ_w +
σ_w·z_t, w_min, w_max) (published μ_w = 1.0, σ_w = 0.5, w_min = 0.5, w_max = 5.0), no renormalisation,
A_t = A_i·w_t on the rollouts selected (published: the wrong ones); every other valid token, and every
row without a span, keeps weight 1. This module only scores: the trainer turns the scores into token
advantages where it reshapes every credit mode (:func:`oar_rl.reshape.grail_token_advantages`), and
:func:`grail_credit` does both for a standalone batch.

Implementation (shared with OAR-G, :mod:`oar_rl.importance.gradient`): the batch is laid out and
validated by ``prepare_batch``; the model runs as TRL runs it (``body_hidden``: ``inputs_embeds``, the 2-D
attention mask and the positions ``generate`` used), in eval mode (``eval_mode``, every submodule's flag
restored); the span positions come from the AS-Joint probe spec (span token k is predicted at position
P + k − 1, the body is cut after the last one); the logits go through ``head_logits`` (soft-capping and
the model's other logit post-processing) in float32. The gradient is ``torch.autograd.grad(J, E)`` with E
a fresh leaf copy of the embeddings: no parameter gets a ``.grad``, ``requires_grad`` flags are left as
they are (frozen/PEFT models work), and with the model in eval mode transformers skips gradient
checkpointing. Rows do not interact, so ``batch_size`` rows at a time give the same scores.

How GRAIL differs from OAR (paper §3, Eq. 7-17):

- Signal: GRAIL differentiates the answer's likelihood itself at the clean point, deterministically.
  OAR-G differentiates a divergence between a clean and a noise-perturbed probe (zero and flat at the
  clean point, so it needs noise, and one draw is noisy); OAR-P masks tokens one by one.
- Score: ‖g_t ⊙ e_t‖₂ (per-dimension contributions cannot cancel) versus OAR-G's |⟨g_t, e_t⟩|.
- Weights: a z-score of log-saliency mapped affinely and clamped, *not* renormalised (a row's total
  advantage changes; its mean weight is about μ_w only when few weights are clamped), versus OAR's
  log1p + min-max, bi-level gate at the τ-quantile and sum-preserving renormalisation (Eq. 14-17).
- Rollouts: GRAIL by default reweights only wrong rollouts; OAR reweights every row with A_i ≠ 0.
- Rows without an answer span keep uniform weights; OAR's answer-span probes fall back to LT-Logits.
  GRAIL always needs the span (there is no LT-Logits form), whatever ``probe`` says.

Our reading where the paper leaves a choice, and where we depart from the released trainer
(``GrailTrainerV2.compute_grail_weights`` in ``src/train/grail_trainer.py``; this module follows the
method as issue 9 of this project specifies it):

- "Wrong" is a negative sequence advantage A_i < 0 and "correct" a positive one (the released code uses
  A_i ≤ 0 / A_i > 0: the same loss, since A_i = 0 gives zero token advantages). With a 0/1 accuracy
  reward and a group of mixed outcomes this is exactly the wrong answers; with extra reward terms it is
  "worse than its group", the rollouts whose tokens the update pushes down -- what the reweighting acts
  on -- and it needs no access to the individual reward functions.
- s_t uses token t's own embedding (position P + t), as OAR-G does here. The released code reads the
  gradient and the embedding one position early (token t gets token t−1's saliency; the first completion
  token gets the last prompt token's), the off-by-one its OAR-G baseline also has.
- The z-score runs over the reasoning tokens only; the span and later tokens keep weight 1. The released
  trainer z-scores over *all* valid completion tokens (span included), then sets the span's content
  tokens to w_max, its ``\\boxed{`` / ``}`` delimiters and the tokens after it to μ_w.
- The span is this library's (:func:`oar_rl.answer_span.answer_span_mask`: the content of the *last* match of
  ``answer_pattern``); the released code uses the first ``\\boxed{…}`` including the marker and braces.
- The logits are divided by the sampling temperature, as TRL's log-probs and the released code do.
- J sums over the span tokens (a mean would scale a row's s_t by 1/m and leave its weights unchanged).
- log(s_t + 1e-8) and the population standard deviation sqrt(var + 1e-8), as in the released code: a
  row with one reasoning token, or all-equal scores, gets z = 0, i.e. w = μ_w.
- w_min defaults to 0.5, the paper's value and the released training config's (its dataclass default
  is 0.1).
- Like every credit mode here, the scores are computed once per generation batch, on the policy that
  generated it (π_old), in eval mode. The released trainer recomputes them inside the loss with the
  live model at every micro-step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from oar_rl.answer_span import check_answer_mask, has_answer_span, scored_positions
from oar_rl.importance.rows import score_rows
from oar_rl.model_parts import base_model, body_hidden, eval_mode, head_logits
from oar_rl.probes import ScoringBatch, build_probe_spec, check_rows_per_pass, prepare_batch
from oar_rl.reshape import check_grail_options, grail_rollout_rows, grail_token_advantages


def reasoning_positions(completion_mask: Tensor, answer_mask: Tensor) -> Tensor:
    """(B, C) bool: valid completion tokens strictly before the first answer-span token.

    Rows without a span are all False (GRAIL leaves them uniform; unlike the OAR probes' fallback, which
    scores every token of such a row).
    """
    check_answer_mask(answer_mask, completion_mask)
    before = scored_positions(completion_mask, answer_mask)  # (B, C): all valid tokens in span-less rows
    return before & has_answer_span(answer_mask).to(before.device)[:, None]


def batch_reasoning(batch: ScoringBatch) -> Tensor:
    """:func:`reasoning_positions` of a prepared batch with an answer span (its masks are valid)."""
    return batch.scored("as-joint") & batch.answer_mask.any(dim=1)[:, None]


def grail_importance(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    answer_mask: Tensor | None = None,
    **options: Any,
) -> Tensor:
    """GRAIL saliency s_t = ‖∂J/∂e_t ⊙ e_t‖₂, J the answer span's negative log-likelihood.

    Args:
        model: a Hugging Face causal LM (plain or PEFT-wrapped), the policy that generated the batch.
        prompt_ids: (B, P) prompt token ids, left-padded.
        prompt_mask: (B, P) 1 on real prompt tokens.
        completion_ids: (B, C) completion token ids, right-padded.
        completion_mask: (B, C) 1 on real completion tokens.
        answer_mask: (B, C) answer-span mask (:func:`oar_rl.answer_span.answer_span_mask`), required.
        **options: the options of :func:`grail_scores` (listed there), which scores the batch once
            :func:`~oar_rl.probes.prepare_batch` has validated and laid it out.

    Returns:
        (B, C) float32 on the model's device: s_t on the reasoning tokens (:func:`reasoning_positions`),
        0 elsewhere (padding, the span and later tokens, rows without a span).
    """
    batch = prepare_batch(model, prompt_ids, prompt_mask, completion_ids, completion_mask, answer_mask)
    return grail_scores(model, batch, **options)


def grail_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    temperature: float = 1.0,
    batch_size: int | None = None,
    progress: bool = False,
) -> Tensor:
    """:func:`grail_importance` of a prepared batch with an answer span (the registry's scorer for
    ``grail``).

    Args:
        temperature: the sampling temperature (> 0); the logits are divided by it.
        batch_size: rows per forward/backward (None: all rows at once). Does not change the result.
        progress: show a tqdm bar over the row chunks.
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
    if not math.isfinite(temperature):
        raise ValueError(f"temperature must be finite, got {temperature!r}")
    check_rows_per_pass(batch_size)
    if batch.answer_mask is None:
        raise ValueError("GRAIL needs an answer_mask (see oar_rl.answer_span.answer_span_mask)")
    if torch.is_inference_mode_enabled():
        raise RuntimeError("grail_importance needs autograd; call it outside torch.inference_mode()")
    P = batch.prompt_len
    B, C = batch.completion_mask.shape
    device = batch.input_ids.device
    answer = batch.answer_mask  # (B, C)
    reasoning = batch_reasoning(batch)  # (B, C)
    out = torch.zeros(B, C, dtype=torch.float32, device=device)
    rows_all = reasoning.any(dim=1).nonzero().flatten()  # (B',) rows with a span and a token before it
    if rows_all.numel() == 0:
        return out
    # AS-Joint layout: span token k is predicted at position P + k - 1, its id is the target
    spec = build_probe_spec(P, batch.attention_mask, batch.input_ids[:, P:], answer, "as-joint")
    embed = base_model(model).get_input_embeddings()
    step = batch_size or B

    with eval_mode(model):
        for lo in tqdm(range(0, rows_all.shape[0], step), desc="GRAIL", unit="chunk", disable=not progress):
            rows = rows_all[lo : lo + step]  # (n,)
            sub = spec.take(rows)
            L = sub.max_index() + 1  # causal: positions after the last span prediction cannot matter
            ids, attn = batch.input_ids[rows, :L], batch.attention_mask[rows, :L]  # (n, L)
            with torch.no_grad():
                emb = embed(ids)  # (n, L, H) clean embeddings e_t
            leaf = emb.detach().requires_grad_(True)  # (n, L, H)
            with torch.enable_grad():
                hidden = body_hidden(model, attn, inputs_embeds=leaf)  # (n, L, H)
                logits = head_logits(model, hidden[sub.seq, sub.index]) / temperature  # (M, V)
                logp = torch.log_softmax(logits, dim=-1).gather(1, sub.target[:, None])  # (M, 1)
                (g,) = torch.autograd.grad(-logp.sum(), leaf)  # (n, L, H)
            score = (g[:, P:].float() * emb[:, P:].float()).norm(dim=-1)  # (n, L - P)
            out[rows, : L - P] = score
    return out * reasoning


def grail_rows(batch: ScoringBatch, advantages: Tensor, rollouts: str) -> tuple[Tensor, Tensor]:
    """(rows GRAIL scores (B,), tokens it reweights (B, C)) of a batch with an answer span: the rollouts
    `rollouts` selects (:func:`~oar_rl.reshape.grail_rollout_rows`) that have a reasoning token, and the
    reasoning tokens (:func:`~oar_rl.importance.reasoning_positions`)."""
    reasoning = batch_reasoning(batch)  # (B, C)
    return grail_rollout_rows(advantages.to(reasoning.device), rollouts) & reasoning.any(dim=1), reasoning


def grail_credit(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    advantages: Tensor,
    *,
    answer_mask: Tensor,
    mask: Tensor | None = None,
    rollouts: str = "wrong",
    mu: float = 1.0,
    sigma: float = 0.5,
    w_min: float = 0.5,
    w_max: float = 5.0,
    temperature: float = 1.0,
    batch_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """GRAIL token advantages of a batch, scoring only the rows it reweights: the scores
    (:func:`~oar_rl.importance.grail_importance`) then :func:`~oar_rl.reshape.grail_token_advantages`,
    as the trainer does for ``credit="grail"``.

    Args:
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, answer_mask, temperature,
            batch_size: as :func:`~oar_rl.importance.grail_importance`.
        advantages: (B,) sequence advantages A_i.
        mask: (B, C) the tokens that get an advantage (e.g. completion mask without tool outputs);
            None: `completion_mask`.
        rollouts, mu, sigma, w_min, w_max: as :func:`oar_rl.reshape.grail_token_advantages`.

    Returns:
        (token_advantages (B, C), weights (B, C)), float32 on `mask`'s device, 0 on padding.
    """
    check_grail_options(mu, sigma, w_min, w_max, rollouts)  # before any forward pass
    mask = completion_mask if mask is None else mask
    batch = prepare_batch(model, prompt_ids, prompt_mask, completion_ids, completion_mask, answer_mask)
    if not isinstance(advantages, Tensor) or advantages.shape != completion_mask.shape[:1]:
        shape = tuple(advantages.shape) if isinstance(advantages, Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be a (B,) tensor with B={completion_mask.shape[0]}, got {shape}")
    selected, reasoning = grail_rows(batch, advantages, rollouts)  # (B,), (B, C)
    scores = score_rows(grail_scores, model, batch, selected, temperature=temperature, batch_size=batch_size)
    return grail_token_advantages(
        advantages,
        scores.to(mask.device),
        mask,
        reasoning.to(mask.device),
        rollouts=rollouts,
        mu=mu,
        sigma=sigma,
        w_min=w_min,
        w_max=w_max,
    )
