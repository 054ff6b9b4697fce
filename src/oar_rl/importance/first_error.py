"""First-error credit (``credit="first-error"``; not in the OAR paper, issue 26).

In a wrong rollout (A_i < 0) the blame goes to the *first* token after which the policy itself can no
longer reach the gold answer: the smallest t such that the greedy continuation of y_≤t is wrong while
that of y_<t is right. It is found by binary search over the row's scored (reasoning) tokens, a few
batched greedy continuations per row (⌈log2 T⌉ + 2 rounds). That token gets importance 1, every other
token 0, and the scores go through the same Eq. 14-17 reshaping as OAR's (with τ = 0.4, β = 2 the
first error gets 3× the weight of the others before the sum-preserving rescale). Correct rollouts,
rows the policy cannot solve even before their first scored token, and rows whose whole reasoning still
continues to the right answer (the slip is in the answer itself) get no score: uniform weights, as GRPO.

Why (issue 26, `results/blame/`): OAR-P and OAR-G score what the answer *reads from*. When an early
slip is carried forward by later, correct steps, the last result scores highest and the slip average:
on a wrong rollout OAR multiplies the penalty on correct work. The greedy continuation is a
one-sample Monte-Carlo value of the prefix (VinePPO, Kazemnejad et al. 2024, estimates it with several
samples); locating the first step whose value drops by binary search is OmegaPRM's (Luo et al. 2024)
divide-and-conquer search for the first error; Math-Shepherd (Wang et al. 2024) labels steps by the
same continuation test. Using the located token as an OAR-style importance (a larger share of the
sequence's negative advantage) is this project's construction.

Assumptions, stated: the search assumes the continuation value is monotone along the rollout (right
up to the first error, wrong after it); where it is not, it returns *a* flip point, not necessarily the
first. Greedy decoding stands in for the policy's expected value: exact for a policy that is greedy-
correct on its training problems (the testbed's warm start: 100% greedy accuracy), an approximation
elsewhere. Each continuation gets the completion budget the row had left (`max_new_tokens` − prefix).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from oar_rl.model_parts import eval_mode
from oar_rl.probes import ScoringBatch


def _continue_greedy(
    model: nn.Module,
    tokenizer,
    prefixes: list[Tensor],
    budgets: list[int],
    *,
    batch_size: int,
) -> list[list[int]]:
    """Greedy continuations (token ids) of each 1-D `prefixes[i]` (prompt + completion prefix), at most
    `budgets[i]` new tokens each (0: none)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[list[int]] = [[] for _ in prefixes]
    order = [i for i in range(len(prefixes)) if budgets[i] > 0]
    for a in range(0, len(order), batch_size):
        chunk = order[a : a + batch_size]
        width = max(prefixes[i].numel() for i in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        attn = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, i in enumerate(chunk):  # left padding, as generate expects
            n = prefixes[i].numel()
            ids[r, width - n :] = prefixes[i].cpu()
            attn[r, width - n :] = 1
        device = next(model.parameters()).device
        gen = model.generate(
            input_ids=ids.to(device),
            attention_mask=attn.to(device),
            max_new_tokens=max(budgets[i] for i in chunk),
            do_sample=False,
            pad_token_id=pad,
        )
        for r, i in enumerate(chunk):
            out[i] = gen[r, width : width + budgets[i]].tolist()
    return out


def first_error_positions(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    tokenizer,
    gold: Sequence[str],
    check: Callable[[str, str], bool],
    rows: Sequence[int],
    max_new_tokens: int,
    batch_size: int = 64,
) -> dict[int, int | None]:
    """{row: completion index of its first error, or None (no flip found)} for the rows `rows`.

    Binary search over each row's scored tokens (module docstring); all searching rows share each
    round's batched greedy continuations.
    """
    P = batch.prompt_len
    scored = batch.scored("lt-logits").cpu()  # (B, C) valid (reasoning) tokens
    cand = {b: scored[b].nonzero().flatten().tolist() for b in rows}
    prompt = {b: batch.input_ids[b, :P][batch.attention_mask[b, :P].bool()] for b in rows}
    comp = {b: batch.input_ids[b, P:] for b in rows}

    def correct(queries: list[tuple[int, int]]) -> list[bool]:
        """Whether the greedy continuation after completion[:n] of row b reaches the gold, per (b, n)."""
        prefixes = [torch.cat([prompt[b], comp[b][:n]]) for b, n in queries]
        budgets = [max(0, max_new_tokens - n) for _, n in queries]
        conts = _continue_greedy(model, tokenizer, prefixes, budgets, batch_size=batch_size)
        texts = tokenizer.batch_decode(
            [comp[b][:n].tolist() + c for (b, n), c in zip(queries, conts, strict=True)],
            skip_special_tokens=True,
        )
        return [bool(check(t, str(gold[b]))) for t, (b, _) in zip(texts, queries, strict=True)]

    live = [b for b in rows if cand[b]]
    # ends: right before the first candidate must be right, after the last one wrong
    ends = correct([(b, cand[b][0]) for b in live] + [(b, cand[b][-1] + 1) for b in live])  # one round
    first_ok, last_ok = ends[: len(live)], ends[len(live) :]
    searched = [b for b, a, z in zip(live, first_ok, last_ok, strict=True) if a and not z]
    lo = {b: -1 for b in searched}  # index into cand[b] known right (-1: before the first candidate)
    hi = {b: len(cand[b]) - 1 for b in searched}  # index known wrong
    live = [b for b in searched if hi[b] - lo[b] > 1]
    while live:
        mids = {b: (lo[b] + hi[b]) // 2 for b in live}
        ok = correct([(b, cand[b][mids[b]] + 1) for b in live])
        for b, good in zip(live, ok, strict=True):
            if good:
                lo[b] = mids[b]
            else:
                hi[b] = mids[b]
        live = [b for b in live if hi[b] - lo[b] > 1]
    out: dict[int, int | None] = {b: None for b in rows}  # rows dropped at the ends keep None
    out.update({b: cand[b][hi[b]] for b in searched})
    return out


def first_error_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    tokenizer,
    gold: Sequence[str],
    check: Callable[[str, str], bool],
    direction: Tensor,
    max_new_tokens: int,
    batch_size: int = 64,
    probe: str | None = None,
) -> Tensor:
    """(B, C) float32: 1 at each wrong row's first error (:func:`first_error_positions`), 0 elsewhere.

    Args:
        tokenizer: decodes prefixes and continuations for `check`.
        gold: per row, the gold answer the reward checks against.
        check: (completion text, gold) -> correct; the task's exact checker.
        direction: (B,) sign of each row's advantage; only rows with direction < 0 are searched.
        max_new_tokens: the completion budget (a continuation gets what the prefix left of it).
        probe: ignored (no outcome probe); accepted so the trainer calls every bi-level scorer alike.
    """
    del probe
    B, C = batch.completion_mask.shape
    if len(gold) != B:
        raise ValueError(f"gold has {len(gold)} answers for a batch of {B} rows")
    if tuple(direction.shape) != (B,):
        raise ValueError(f"direction must have shape ({B},), got {tuple(direction.shape)}")
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    out = torch.zeros(B, C, dtype=torch.float32, device=batch.input_ids.device)
    rows = [b for b in range(B) if float(direction[b]) < 0]
    if not rows:
        return out
    with torch.no_grad(), eval_mode(model):
        found = first_error_positions(
            model,
            batch,
            tokenizer=tokenizer,
            gold=gold,
            check=check,
            rows=rows,
            max_new_tokens=int(max_new_tokens),
            batch_size=batch_size,
        )
    for b, t in found.items():
        if t is not None:
            out[b, t] = 1.0
    return out
