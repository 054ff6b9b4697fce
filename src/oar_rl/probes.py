"""Outcome probes: what "the outcome" is and how it is read, and the batch every scorer prepares.

OAR scores a completion token by how much disturbing it moves an *outcome probe* φ(x, y), a summary
of the model's final-answer prediction (paper §6.2, Appendix A.1.3). Three probes are implemented:

- ``"lt-logits"`` (LT-Logits): the next-token distribution at the last non-pad position of
  prompt+completion. Divergence: KL(P ‖ P̃).
- ``"as-mean"`` (AS-Mean): softmax of the mean of the logits at the positions that *predict* the answer
  span tokens (the position of each span token minus one). Divergence: KL(P ‖ P̃).
- ``"as-joint"`` (AS-Joint): φ = mean log π(a_ℓ | x, y_<ℓ) over the answer span tokens a_ℓ.
  Perturbation importance is the score drop clamped at zero, max(φ − φ̃, 0): a perturbation that makes
  the answer *more* likely is not evidence that the token mattered for producing it (the paper writes
  φ − φ̃ and is silent on the sign; a negative importance cannot go through Eq. 14's log1p).

Answer spans, the scored positions they leave and mask validation live in :mod:`oar_rl.answer_span`
(import them from there).

The model plumbing the scorers share (body, LM head, positions, eval mode) is in
:mod:`oar_rl.model_parts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from oar_rl.answer_span import check_answer_mask, check_batch, positions_before
from oar_rl.model_parts import base_model, head_is_affine, head_logits, model_device, verify_head, vocab_size

PROBES: tuple[str, ...] = ("lt-logits", "as-mean", "as-joint")
Probe = Literal[PROBES]
ANSWER_SPAN_PROBES: tuple[str, ...] = ("as-mean", "as-joint")  # need an answer span

# Bound on the elements of one [rows, V] logits block (64 Mi float32 = 256 MiB).
_MAX_HEAD_ELEMENTS = 1 << 26

KIND_DIST = 0  # LT-Logits or AS-Mean: a distribution, compared by KL
KIND_JOINT = 1  # AS-Joint: a scalar log-likelihood, compared by the score drop


def check_probe(probe: str) -> None:
    """Raise ValueError unless `probe` is one of :data:`PROBES`."""
    if probe not in PROBES:
        raise ValueError(f"probe={probe!r} is not a known outcome probe; valid: {list(PROBES)}")


# ----------------------------------------------------------------------------------------------------
# probe positions and outcomes


@dataclass(frozen=True)
class ProbeSpec:
    """Where N sequences are probed, stored flat (CSR by sequence).

    Attributes:
        kind: (N,) long, KIND_DIST (LT-Logits / AS-Mean: a distribution) or KIND_JOINT (AS-Joint).
        row_ptr: (N + 1,) long; sequence n owns flat entries row_ptr[n]:row_ptr[n + 1].
        index: (M,) long, positions in the full prompt+completion sequence whose hidden state is used.
        target: (M,) long, the token predicted at that position (AS-Joint), else -1.
    """

    kind: Tensor
    row_ptr: Tensor
    index: Tensor
    target: Tensor

    @property
    def num_rows(self) -> int:
        return self.kind.shape[0]

    @property
    def seq(self) -> Tensor:
        """(M,) the sequence each flat entry belongs to."""
        counts = self.row_ptr[1:] - self.row_ptr[:-1]
        return torch.repeat_interleave(torch.arange(self.num_rows, device=counts.device), counts)

    def max_index(self) -> int:
        """Largest probed position (the body only needs positions 0..max_index)."""
        return int(self.index.max()) if self.index.numel() else 0

    def take(self, rows: Tensor) -> ProbeSpec:
        """The spec of the sequences `rows` (N',) of this one, in that order (rows may repeat)."""
        counts = (self.row_ptr[1:] - self.row_ptr[:-1])[rows]  # (N',)
        starts = self.row_ptr[:-1][rows]  # (N',)
        row_ptr = torch.zeros(rows.shape[0] + 1, dtype=torch.long, device=rows.device)
        row_ptr[1:] = torch.cumsum(counts, 0)
        total = int(row_ptr[-1])
        seq = torch.repeat_interleave(torch.arange(rows.shape[0], device=rows.device), counts)  # (M',)
        flat = starts[seq] + torch.arange(total, device=rows.device) - row_ptr[:-1][seq]  # (M',)
        return ProbeSpec(self.kind[rows], row_ptr, self.index[flat], self.target[flat])


def build_probe_spec(
    prompt_len: int,
    attention_mask: Tensor,
    completion_ids: Tensor,
    answer_mask: Tensor | None,
    probe: Probe,
) -> ProbeSpec:
    """The probe positions of each of the B sequences of a batch.

    Args:
        prompt_len: P, the (padded) prompt width; completion position k is full position P + k.
        attention_mask: (B, P + C) 0/1, prompt mask then completion mask.
        completion_ids: (B, C) completion token ids.
        answer_mask: (B, C) bool span mask (required for AS probes, ignored for LT-Logits).
        probe: which outcome probe.

    LT-Logits (and AS rows with no span): one position, the last non-pad one. AS-Mean / AS-Joint: the
    positions P + k - 1 for every span token k (the positions whose next-token prediction is the span).
    """
    check_probe(probe)
    B, L = attention_mask.shape
    device = attention_mask.device
    pos = torch.arange(L, device=device)
    last = (
        torch.where(attention_mask.bool(), pos, 0).amax(dim=1)
        if L
        else torch.zeros(B, dtype=torch.long, device=device)
    )  # (B,) last non-pad position
    if probe == "lt-logits" or answer_mask is None:
        if probe != "lt-logits":
            raise ValueError(
                f"probe={probe!r} needs an answer_mask (see oar_rl.answer_span.answer_span_mask)"
            )
        kind = torch.full((B,), KIND_DIST, dtype=torch.long, device=device)
        row_ptr = torch.arange(B + 1, dtype=torch.long, device=device)
        return ProbeSpec(kind, row_ptr, last.long(), torch.full((B,), -1, dtype=torch.long, device=device))
    span = answer_mask.bool().to(device)  # (B, C)
    has = span.any(dim=1)  # (B,)
    # flat entries: AS rows -> one per span token; fallback rows -> their last position
    span_b, span_k = span.nonzero(as_tuple=True)  # (S,), (S,) sorted by row
    fb_b = (~has).nonzero(as_tuple=True)[0]  # (F,)
    seq = torch.cat([span_b, fb_b])
    index = torch.cat([prompt_len + span_k - 1, last[fb_b]])
    target = torch.cat(
        [
            completion_ids.to(device)[span_b, span_k].long()
            if probe == "as-joint"
            else torch.full_like(span_b, -1),
            torch.full_like(fb_b, -1),
        ]
    )
    order = torch.argsort(seq * (L + 1) + index, stable=True)
    seq, index, target = seq[order], index[order], target[order]
    counts = torch.bincount(seq, minlength=B)
    row_ptr = torch.zeros(B + 1, dtype=torch.long, device=device)
    row_ptr[1:] = torch.cumsum(counts, 0)
    kind = torch.where(has & (probe == "as-joint"), KIND_JOINT, KIND_DIST).long()
    return ProbeSpec(kind, row_ptr, index.long(), target.long())


@dataclass(frozen=True)
class ProbeOutcome:
    """Probe values of N sequences.

    Attributes:
        logp: (N, V) log-softmax of the probe logits on KIND_DIST rows (0 on KIND_JOINT rows).
        phi: (N,) mean span log-likelihood on KIND_JOINT rows (0 on KIND_DIST rows).
    """

    logp: Tensor
    phi: Tensor

    def take(self, rows: Tensor) -> ProbeOutcome:
        return ProbeOutcome(self.logp[rows], self.phi[rows])


def probe_outcome(model: nn.Module, hidden: Tensor, spec: ProbeSpec) -> ProbeOutcome:
    """Turn hidden states (N, L, H) at the probe positions of `spec` into outcome distributions/scores.

    Only the M probe positions go through the LM head, in blocks of at most _MAX_HEAD_ELEMENTS logits;
    logits for all L positions are never formed.
    """
    N = spec.num_rows
    V = vocab_size(model)
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    seq = spec.seq  # (M,)
    h = hidden[seq, spec.index]  # (M, H)
    counts = (spec.row_ptr[1:] - spec.row_ptr[:-1]).clamp(min=1).to(dtype)  # (N,)
    joint_entry = spec.kind[seq] == KIND_JOINT  # (M,)
    dist_entry = ~joint_entry  # (M,)
    dist_rows = spec.kind == KIND_DIST  # (N,)

    # LT-Logits / AS-Mean: mean of the logits over each row's positions, then log-softmax
    if head_is_affine(model):  # mean(W h + b) = W mean(h) + b: one head row per sequence
        h_sum = torch.zeros(N, h.shape[-1], dtype=dtype, device=h.device)  # (N, H)
        h_sum.index_add_(0, seq[dist_entry], h[dist_entry].to(dtype))
        h_mean = (h_sum / counts[:, None]).to(hidden.dtype)  # (N, H)
        logits = torch.zeros(N, V, dtype=dtype, device=h.device)  # (N, V)
        for lo, blk in _offset_blocks(h_mean, V):
            logits[lo : lo + blk.shape[0]] = head_logits(model, blk)
    else:  # non-linear head (soft-capping): per-position logits, then the mean
        dh, dseq = h[dist_entry], seq[dist_entry]
        logits = torch.zeros(N, V, dtype=dtype, device=h.device)  # (N, V)
        for lo, blk in _offset_blocks(dh, V):
            logits.index_add_(0, dseq[lo : lo + blk.shape[0]], head_logits(model, blk).to(dtype))
        logits = logits / counts[:, None]
    logp = torch.log_softmax(logits, dim=-1) * dist_rows[:, None]  # (N, V)

    # AS-Joint: mean log pi(a_l | x, y_<l) over the span tokens
    phi = torch.zeros(N, dtype=dtype, device=h.device)  # (N,)
    if bool(joint_entry.any()):
        jh, jseq, jtgt = h[joint_entry], seq[joint_entry], spec.target[joint_entry]
        for lo, blk in _offset_blocks(jh, V):
            lp = torch.log_softmax(head_logits(model, blk).to(dtype), dim=-1)  # (m, V)
            tok_lp = lp.gather(1, jtgt[lo : lo + blk.shape[0], None]).squeeze(1)  # (m,)
            phi = phi.index_add(0, jseq[lo : lo + blk.shape[0]], tok_lp)
        phi = phi / counts
    return ProbeOutcome(logp, phi)


def _offset_blocks(x: Tensor, V: int) -> list[tuple[int, Tensor]]:
    step = max(1, _MAX_HEAD_ELEMENTS // max(V, 1))
    return [(lo, x[lo : lo + step]) for lo in range(0, x.shape[0], step)]


def outcome_divergence(
    clean: ProbeOutcome,
    perturbed: ProbeOutcome,
    kind: Tensor,
    *,
    mode: Literal["perturbation", "gradient"],
) -> Tensor:
    """(N,) divergence of each perturbed probe from its clean one.

    KIND_DIST rows: KL(P ‖ P̃) = Σ_v P (log P − log P̃), clamped at 0 (float rounding) in
    ``mode="perturbation"`` only: in ``mode="gradient"`` the value is a differentiable objective whose
    rounded value can be slightly negative near the clean point, and clamping it would kill the gradient.
    KIND_JOINT rows: ``mode="perturbation"`` gives the clamped score drop max(φ − φ̃, 0);
    ``mode="gradient"`` gives ½(φ − φ̃)², OAR-G's objective (like KL it is ≥ 0, zero and flat at the
    clean point, quadratic around it; its gradient is −(φ − φ̃)∇φ̃, so within a row OAR-G ranks
    tokens by |⟨∇φ, e_t⟩|).
    """
    if mode not in ("perturbation", "gradient"):
        raise ValueError(f"mode={mode!r}; valid: ['perturbation', 'gradient']")
    p = clean.logp.exp()  # (N, V)
    kl = (p * (clean.logp - perturbed.logp)).sum(dim=-1)  # (N,)
    drop = clean.phi - perturbed.phi  # (N,)
    if mode == "perturbation":
        # KL >= 0; clamp the float rounding that can make a ~0 KL come out slightly negative
        return torch.where(kind == KIND_JOINT, drop.clamp(min=0), kl.clamp(min=0))
    # gradient mode: never clamp. Near the clean point the KL is ~σ² (1e-8 at σ = 1e-3) and rounding
    # often makes it negative; a clamp there would zero the whole row's gradient (uniform weights).
    # The gradient P̃ - P of the unclamped KL is right whatever the sign of its rounded value.
    return torch.where(kind == KIND_JOINT, 0.5 * drop.square(), kl)


# ----------------------------------------------------------------------------------------------------
# batch preparation and model state, shared by the scorers


@dataclass(frozen=True)
class ScoringBatch:
    """A TRL batch laid out as one prompt+completion sequence per row, on the model's device.

    Built and validated once (:func:`prepare_batch`) and handed to every scorer (the registry's
    scorers in :mod:`oar_rl.credits` take it as is; the public ``*_importance`` functions build it).

    Attributes:
        input_ids: (B, P + C) long, left-padded prompt then right-padded completion.
        attention_mask: (B, P + C) long 0/1.
        prompt_len: P.
        completion_mask: (B, C) bool.
        answer_mask: (B, C) bool answer span inside `completion_mask`, or None (none was given: the
            answer-span probes and GRAIL need one).
        reasoning_mask: (B, C) bool reasoning tokens inside `completion_mask`
            (:func:`oar_rl.answer_span.reasoning_mask`), or None: every valid token may be scored. When
            given, only reasoning tokens are scored and OAR-G puts its noise on them alone.
    """

    input_ids: Tensor
    attention_mask: Tensor
    prompt_len: int
    completion_mask: Tensor
    answer_mask: Tensor | None = None
    reasoning_mask: Tensor | None = None

    def take(self, rows: Tensor) -> ScoringBatch:
        """The rows `rows` (a (n,) index tensor) of the batch, with the same prompt width P."""
        rows = rows.to(self.input_ids.device)
        answer = None if self.answer_mask is None else self.answer_mask[rows]
        reasoning = None if self.reasoning_mask is None else self.reasoning_mask[rows]
        return ScoringBatch(
            self.input_ids[rows],
            self.attention_mask[rows],
            self.prompt_len,
            self.completion_mask[rows],
            answer,
            reasoning,
        )

    @property
    def noised(self) -> Tensor:
        """(B, C) bool: where OAR-G adds embedding noise (the reasoning tokens when given, else every
        valid completion token)."""
        return self.completion_mask if self.reasoning_mask is None else self.reasoning_mask

    def span(self, probe: str) -> Tensor | None:
        """The answer span `probe` reads: None for LT-Logits, else `answer_mask` (ValueError if absent)."""
        if probe == "lt-logits":
            return None
        if self.answer_mask is None:
            raise ValueError(
                f"probe={probe!r} needs an answer_mask (see oar_rl.answer_span.answer_span_mask)"
            )
        return self.answer_mask

    def scored(self, probe: str) -> Tensor:
        """(B, C) bool: the tokens `probe` scores: every valid token under LT-Logits, else those before the
        answer span (every valid token of a row without one); only reasoning tokens when the batch has a
        `reasoning_mask`."""
        span = self.span(probe)
        scored = self.completion_mask if span is None else positions_before(self.completion_mask, span)
        return scored if self.reasoning_mask is None else scored & self.reasoning_mask


def check_rows_per_pass(value: int | None, name: str = "batch_size", *, optional: bool = True) -> None:
    """Raise ValueError unless `value` is a positive int (or None when `optional`): a scorer's chunking."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int{' or None' if optional else ''}, got {value!r}")


def prepare_batch(
    model: nn.Module | None,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    answer_mask: Tensor | None = None,
    reasoning_mask: Tensor | None = None,
) -> ScoringBatch:
    """Validate the batch (shapes, dtypes, 0/1 masks, ids inside the vocabulary, the answer span and the
    reasoning tokens inside the completion) and concatenate it: the one validation every scorer relies on.

    `model` None (a credit rule that runs no model, `CreditMode.needs_model=False`): the batch stays on
    the completion mask's device and the ids are not checked against an embedding table."""
    check_batch(prompt_ids, prompt_mask, completion_ids, completion_mask)
    if prompt_ids.shape[1] == 0:
        raise ValueError(
            "prompt_ids has width 0: the first completion token would have no predicting position"
        )
    if answer_mask is not None:
        check_answer_mask(answer_mask, completion_mask)
    if reasoning_mask is not None:
        check_answer_mask(reasoning_mask, completion_mask, name="reasoning_mask")
    if model is None:
        device = completion_mask.device
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1).to(device=device, dtype=torch.long)
        attention_mask = torch.cat([prompt_mask.bool(), completion_mask.bool()], dim=1).to(device).long()
        answer = None if answer_mask is None else answer_mask.bool().to(device)
        reasoning = None if reasoning_mask is None else reasoning_mask.bool().to(device)
        return ScoringBatch(
            input_ids,
            attention_mask,
            prompt_ids.shape[1],
            completion_mask.bool().to(device),
            answer,
            reasoning,
        )
    emb = base_model(model).get_input_embeddings()
    n_emb = getattr(emb, "num_embeddings", None)
    device = model_device(model)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1).to(device=device, dtype=torch.long)
    if n_emb is not None and input_ids.numel():
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= n_emb:
            raise ValueError(
                f"token ids must lie in [0, {n_emb}) (the embedding size); found min {lo}, max {hi}"
            )
    attention_mask = torch.cat([prompt_mask.bool(), completion_mask.bool()], dim=1).to(device).long()
    verify_head(model, input_ids, attention_mask)
    answer = None if answer_mask is None else answer_mask.bool().to(device)
    reasoning = None if reasoning_mask is None else reasoning_mask.bool().to(device)
    return ScoringBatch(
        input_ids, attention_mask, prompt_ids.shape[1], completion_mask.bool().to(device), answer, reasoning
    )


def prepare_probe_batch(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    probe: str,
    answer_mask: Tensor | None,
    reasoning_mask: Tensor | None = None,
) -> ScoringBatch:
    """:func:`prepare_batch` with the answer span `probe` reads: none under LT-Logits, which ignores a
    given `answer_mask` (unchecked)."""
    span = None if probe == "lt-logits" else answer_mask
    return prepare_batch(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, span, reasoning_mask
    )
