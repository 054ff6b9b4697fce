"""The paper's §5.1 oracle: a counterfactual labelling of causal tokens (Eq. 19).

Oracle (Eq. 19, after Ruan et al. 2025): for a correct trajectory y, replace token y_t by an alternative
token, greedily decode the rest, and label t a *causal pivot* when the final-answer correctness flips.
Recall@K% of these labels, its intervals and paired differences are `oar_rl.analysis.recall_stats`.

Departures from the paper, and why:
- The alternative is "the second most probable token under π(·|x, y<t)". Trajectories are sampled, so
  y_t need not be the most probable token; we take the most probable token *other than* y_t, which is
  the second most probable one whenever y_t is the mode, and a real substitution otherwise.
- If the alternative is the EOS (or pad) token the completion simply ends there and is checked as is.
- All counterfactual suffixes of a trajectory are decoded together as one left-padded greedy batch
  (chunks of `batch_size`), so the oracle costs ~T/batch_size generate calls per trajectory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Checker = Callable[[str], bool]


def _body_and_head(model):
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    return body, model.get_output_embeddings()


@torch.no_grad()
def alternative_tokens(model, prompt_ids: torch.Tensor, completion_ids: torch.Tensor) -> torch.Tensor:
    """For each completion position t, the most probable token under π(·|x, y<t) other than y_t.

    Args:
        prompt_ids: (P,) unpadded prompt. completion_ids: (T,) unpadded completion.

    Returns:
        (T,) long. Only the T rows of hidden states that predict completion tokens go through the LM head.
    """
    body, head = _body_and_head(model)
    device = next(model.parameters()).device
    ids = torch.cat([prompt_ids, completion_ids]).to(device)[None]  # (1, P+T)
    hidden = body(input_ids=ids).last_hidden_state[0]  # (P+T, H)
    p, t = prompt_ids.numel(), completion_ids.numel()
    logits = head(hidden[p - 1 : p + t - 1]).float()  # (T, V): position j predicts completion token j
    logits.scatter_(1, completion_ids.to(device)[:, None], float("-inf"))
    return logits.argmax(dim=-1).cpu()


@torch.no_grad()
def greedy_generate(
    model,
    tokenizer,
    seqs: Sequence[torch.Tensor],
    max_new_tokens: int,
    *,
    stop_strings: list[str] | None = None,
) -> tuple[torch.Tensor, int]:
    """Greedy continuations of unpadded id sequences, decoded as one left-padded `generate` batch (a row
    ends early once it has produced one of `stop_strings`, if given).

    Returns (output ids (N, W + new tokens), W): row i's new tokens start at column W.
    """
    kwargs = {"stop_strings": stop_strings, "tokenizer": tokenizer} if stop_strings else {}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(seq.numel() for seq in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):  # left padding, as for any batched generate
        ids[row, width - seq.numel() :] = seq
        attn[row, width - seq.numel() :] = 1
    device = next(model.parameters()).device
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad_id,
        eos_token_id=tokenizer.eos_token_id,
        **kwargs,
    )
    return out, width


@torch.no_grad()
def counterfactual_oracle(
    model,
    tokenizer,
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    is_correct: Checker,
    *,
    max_new_tokens: int | None = None,
    batch_size: int = 32,
    positions: Sequence[int] | None = None,
) -> torch.Tensor:
    """Oracle labels O_t (Eq. 19) for one trajectory: 1 where substituting y_t flips correctness.

    Args:
        prompt_ids: (P,) unpadded prompt ids. completion_ids: (T,) unpadded completion ids (no padding).
        is_correct: maps a completion *text* to final-answer correctness R(·).
        max_new_tokens: greedy budget after the substituted token (default: T + 16).
        batch_size: counterfactual sequences decoded per `generate` call.
        positions: completion positions to test (default: all T).

    Returns:
        (T,) bool; positions not tested are False.
    """
    if prompt_ids.dim() != 1 or completion_ids.dim() != 1:
        raise ValueError(
            f"prompt_ids and completion_ids must be 1-D unpadded id tensors, got shapes "
            f"{tuple(prompt_ids.shape)} and {tuple(completion_ids.shape)}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    t_len = completion_ids.numel()
    labels = torch.zeros(t_len, dtype=torch.bool)
    if t_len == 0:
        return labels
    positions = list(range(t_len)) if positions is None else [int(p) for p in positions]
    bad = [p for p in positions if not 0 <= p < t_len]
    if bad:
        raise ValueError(f"positions must lie in [0, {t_len}), got {bad[:5]}")
    original = is_correct(tokenizer.decode(completion_ids, skip_special_tokens=True))
    alt = alternative_tokens(model, prompt_ids, completion_ids)  # (T,)
    stop_ids = {i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None}
    budget = max_new_tokens if max_new_tokens is not None else t_len + 16
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(positions), batch_size):
            chunk = positions[start : start + batch_size]
            texts: dict[int, str] = {}
            prefixes = []
            for pos in chunk:
                prefix = completion_ids[:pos]
                if int(alt[pos]) in stop_ids:
                    texts[pos] = tokenizer.decode(prefix, skip_special_tokens=True)
                else:
                    prefixes.append((pos, torch.cat([prompt_ids, prefix, alt[pos : pos + 1]])))
            if prefixes:
                out, width = greedy_generate(model, tokenizer, [seq for _, seq in prefixes], budget)
                p_len = prompt_ids.numel()
                for row, (pos, seq) in enumerate(prefixes):
                    new = out[row, width - seq.numel() + p_len :].cpu()  # prefix + alt + greedy suffix
                    texts[pos] = tokenizer.decode(new, skip_special_tokens=True)
            for pos, text in texts.items():
                labels[pos] = is_correct(text) != original
    finally:
        model.train(was_training)
    return labels
