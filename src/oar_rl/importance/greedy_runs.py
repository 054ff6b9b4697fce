"""Greedy runs of a rollout: which cuts of first-error's search share one greedy continuation.

Let g(n) be the greedy continuation of a rollout's first n completion tokens y_<n (its budget is what the
prefix leaves of `max_new_tokens`). If y_n is the policy's greedy token after y_<n (and y_<n is not a
finished rollout), then g(n) = [y_n] + g(n + 1), so the two cuts give the same text and the same check:
the check is constant on every run of greedy tokens, and a flip can only sit at a token the rollout
*sampled* off the greedy path (or a finished prefix). At T = 1 most of a sharp policy's tokens are greedy
(85% of the long regime's warm-start rollouts, 28 of ~190 completion tokens off the path per wrong
rollout), so first-error's search (`oar_rl.importance.first_error`) answers a cut from the run it lies in:

- one teacher-forced forward pass over the searched rows gives the argmax, and the gap between the two
  best logits, at every completion position (at the positions ``generate`` uses);
- a token counts as greedy only if it is the argmax *by a margin* (:func:`margin`), so that rounding
  (batch composition, cached vs uncached attention) cannot turn a near-tie either way;
- cuts of one run share one answer, keyed by the tokens up to the run's first cut (so rows that share a
  prefix, e.g. every rollout of a prompt before its first sampled token, share it too), and the run is
  continued from its *last* cut, the shortest continuation.

The search therefore asks the same questions in the same order and gets the same answers as without
the reuse, in exact arithmetic; it only generates fewer and shorter continuations. The premise is
checked on every continuation generated: its first token must be the teacher-forced argmax there
(where that argmax has the margin). A disagreement means the forward pass and ``generate`` do not
compute the same policy (an architecture whose positions or cache oar-rl does not model): the caller
then warns and redoes the search without the reuse, never guesses. A model whose generation config makes
greedy decoding depart from the argmax (:func:`greedy_departures`: a repetition penalty, banned tokens,
a minimum length, ...) is searched without the reuse from the start.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from oar_rl.importance.token_head import head_block
from oar_rl.model_parts import body_hidden, head_logits

_NEUTRAL = {  # generation-config settings at which greedy generate() takes the raw argmax
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0), "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,), "force_words_ids": (None,), "constraints": (None,),
    "suppress_tokens": (None,), "begin_suppress_tokens": (None,), "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,), "min_length": (None, 0), "min_new_tokens": (None, 0),
    "sequence_bias": (None,), "exponential_decay_length_penalty": (None,), "guidance_scale": (None, 1.0),
    "dola_layers": (None,), "watermarking_config": (None,), "num_beams": (None, 1),
    "penalty_alpha": (None,),
}  # fmt: skip


def greedy_departures(model: nn.Module) -> list[str]:
    """The settings of `model`'s generation config under which greedy ``generate`` may not take the raw
    argmax of the logits (a repetition penalty, banned or forced tokens, a minimum length, beams, ...):
    the runs' premise does not hold there, so the search does not reuse them."""
    config = getattr(model, "generation_config", None)
    if config is None:
        return []
    found = []
    for name, neutral in _NEUTRAL.items():
        value = getattr(config, name, None)
        if not any(value is n or value == n for n in neutral) and not (name.endswith("_ids") and not value):
            found.append(f"{name}={value!r}")
    return found


def margin(top: Tensor, dtype: torch.dtype) -> Tensor:
    """The gap between the two best logits that makes the argmax sure: max(1e-4, 8 ε(dtype)) × max(1,
    |best logit|). float32: 1e-4 relative, about 100× the logits' rounding between a batched cached decode
    and a full forward; bfloat16: 6% relative."""
    rel = max(1e-4, 8 * torch.finfo(dtype).eps)
    return rel * top.abs().clamp(min=1.0)


@dataclass
class GreedyRuns:
    """One row's runs. Cut n (0..L) keeps n completion tokens; cuts n and n + 1 are `linked` (same
    continuation, same text) when token n is surely greedy after a prefix that is not finished.

    Attributes:
        start: (L + 1) per cut, the first cut of its run.
        end: (L + 1) per cut, the last cut of its run.
        top: (L + 1) per cut, the teacher-forced argmax after the kept prefix where it is sure, else -1.
    """

    start: list[int]
    end: list[int]
    top: list[int]


def greedy_runs(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    prompt_len: int,
    lengths: Sequence[int],
    eos: Collection[int],
    *,
    batch_size: int,
    hidden: Tensor | None = None,
) -> list[GreedyRuns]:
    """The runs of each row of a (N, P + C) left-padded prompt + right-padded completion batch whose
    completions are valid on their first `lengths[i]` tokens; `eos`: ids that finish a rollout.
    `hidden`: the body's (N, P + C, H) last hidden states of the batch, if already computed (first-error's
    cached decode runs that pass, :func:`oar_rl.importance.greedy_decode.rollout_cache`)."""
    P = prompt_len
    N = input_ids.shape[0]
    if N == 0:
        return []
    block = head_block(model)  # positions per LM-head call, logits under 64 MiB in float32 as the scorers'
    dtype = next(model.parameters()).dtype
    tops, sure = [], []
    with torch.no_grad():
        for a in range(0, N, batch_size):
            ids, att = input_ids[a : a + batch_size], attention_mask[a : a + batch_size]
            h = body_hidden(model, att, input_ids=ids) if hidden is None else hidden[a : a + batch_size]
            h = h[:, P - 1 :]  # predicts completion 0..C
            flat = h.reshape(-1, h.shape[-1])
            for i in range(0, flat.shape[0], block):
                best = head_logits(model, flat[i : i + block]).topk(2, dim=-1)  # (m, 2)
                gap = best.values[:, 0] - best.values[:, 1]
                tops.append(best.indices[:, 0].cpu())
                sure.append((gap > margin(best.values[:, 0], dtype)).cpu())
    width = input_ids.shape[1] - P + 1  # positions P - 1 .. P + C - 1 of every row
    top, ok = torch.cat(tops).reshape(N, width), torch.cat(sure).reshape(N, width)
    comp = input_ids[:, P:].cpu()
    stop = set(int(t) for t in eos)
    out = []
    for i, L in enumerate(lengths):
        t_row, ok_row, c_row = top[i, : L + 1].tolist(), ok[i, : L + 1].tolist(), comp[i, :L].tolist()
        linked = [
            ok_row[n] and t_row[n] == c_row[n] and not (n > 0 and c_row[n - 1] in stop) for n in range(L)
        ]
        start = [0] * (L + 1)
        for n in range(1, L + 1):
            start[n] = start[n - 1] if linked[n - 1] else n
        end = [L] * (L + 1)
        for n in range(L - 1, -1, -1):
            end[n] = end[n + 1] if linked[n] else n
        out.append(GreedyRuns(start, end, [t if s else -1 for t, s in zip(t_row, ok_row, strict=True)]))
    return out
