"""Rules that read the outcome, built on the first-error locator (issues 46 and 48; none is in the paper).

Each scorer takes the whole :class:`oar_rl.scoring.ScoringContext` (``options=lambda ctx: {"ctx": ctx}``)
and reads its outcome fields with ``ctx.need(...)``: the rows' sequence advantages say which rollouts are
wrong (A_i < 0), the gold answers and the answer check let the locator continue a prefix and check it.

- :func:`locate_first_errors`: the public building block, and ``first-error``'s own path
  (:func:`first_error_rule_scores`: 1 at each located error, then Eq. 14-17). The first-error search
  (:func:`oar_rl.importance.first_error.first_error_positions`) over the wrong rows of a batch, its
  inputs taken from the context (gold, check, completion budget, tokenizer; the search's branching and
  greedy-run reuse from the settings). A rule built on the first error (a saved prefix, a step-level
  variant, a reset) calls it instead of copying the search.
- ``save-prefix`` (:func:`save_prefix_scores`, reshaping 'weights'): the shape of VPPO ("Save the Good
  Prefix", arXiv 2601.18984): in a wrong rollout whose first error is located, the reasoning tokens
  before it get weight 0 (no penalty for the good prefix), the error and every later token keep GRPO's
  negative advantage (weight 1). Departs from VPPO: the error is located by the policy's own greedy
  continuation (first-error's search), not by a process reward model, and the prefix gets exactly 0,
  no positive reward; rows without a located error, and right rollouts, stay GRPO's.
- ``lowest-prob`` (:func:`lowest_prob_scores`, bi-level): in every wrong rollout, the reasoning token
  the policy found least likely (its log-probability at the sampling temperature, one forward pass, no
  continuation) gets importance 1, the others 0; then Eq. 14-17 as first-error. The cheap stand-in for
  the located error: "surprise" found the labelled first error about as often as the locator (issue 48).
- ``random-departure`` (:func:`random_departure_scores`, bi-level): the control for *location*. It runs
  the same search as first-error, on the same rows, and in each row where the search located an error
  it gives importance 1 to a token drawn uniformly from that row's *off-greedy* reasoning tokens (those
  whose sampled token is not the policy's argmax; the located error is always one), not to the located
  one. Same rows, same sparsity, same targeting of departures from the greedy path: only where in the
  rollout the blame lands differs. Its cost is first-error's.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from oar_rl.importance import first_error as fe
from oar_rl.importance.first_error import DEFAULT_BRANCHING, SearchStats
from oar_rl.importance.token_head import completion_token_stats
from oar_rl.model_parts import eval_mode
from oar_rl.probes import ScoringBatch
from oar_rl.scoring import ScoringContext


def wrong_rows(ctx: ScoringContext, rule: str, batch: ScoringBatch) -> list[int]:
    """The rows whose sequence advantage is negative (the wrong rollouts), from `ctx.advantages`, which
    must hold one value per row of `batch` (a ValueError otherwise: never a misaligned guess)."""
    adv = ctx.need("advantages", rule)
    B = batch.completion_mask.shape[0]
    if tuple(adv.shape) != (B,):
        raise ValueError(
            f"credit rule {rule!r}: ScoringContext.advantages has shape {tuple(adv.shape)}, expected ({B},): "
            "one sequence advantage per row of the scored batch"
        )
    return [b for b, a in enumerate(adv.detach().cpu().tolist()) if a < 0]


def locate_first_errors(
    model: nn.Module,
    batch: ScoringBatch,
    ctx: ScoringContext,
    *,
    rule: str = "first-error",
    rows: list[int] | None = None,
    stats: SearchStats | None = None,
) -> dict[int, int | None]:
    """{row: completion index of its located first error, or None} for the wrong rows of `batch`.

    The first-error search (`first_error_positions`) with its inputs from `ctx`: ``gold``, ``check``,
    ``max_new_tokens`` and ``tokenizer`` (each required: a missing one is a ValueError naming it, for
    `rule`), ``batch_size``, and the settings ``first_error_branching``, ``first_error_reuse_greedy`` and
    ``first_error_decode``.
    `rows`: the rows to search (default: those with a negative advantage, :func:`wrong_rows`). Only the
    batch's scored tokens (``batch.scored("lt-logits")``: the reasoning tokens) are candidates.
    """
    rows = wrong_rows(ctx, rule, batch) if rows is None else list(rows)
    gold = ctx.need("gold", rule)
    B = batch.completion_mask.shape[0]
    if len(gold) != B:
        raise ValueError(f"credit rule {rule!r}: ScoringContext.gold has {len(gold)} answers for {B} rows")
    budget = int(ctx.need("max_new_tokens", rule))
    if budget < 1:
        raise ValueError(f"credit rule {rule!r}: max_new_tokens must be >= 1, got {budget}")
    if not rows:
        return {}
    settings = ctx.settings
    with torch.no_grad(), eval_mode(model):
        return fe.first_error_positions(  # looked up at call time (a spy or a patch takes effect)
            model,
            batch,
            tokenizer=ctx.need("tokenizer", rule),
            gold=[str(g) for g in gold],
            check=ctx.need("check", rule),
            rows=rows,
            max_new_tokens=budget,
            batch_size=ctx.batch_size or 64,
            branching=int(settings.get("first_error_branching", DEFAULT_BRANCHING)),
            reuse_greedy=bool(settings.get("first_error_reuse_greedy", True)),
            decode=settings.get("first_error_decode"),
            stats=stats,
        )


def first_error_rule_scores(
    model: nn.Module, batch: ScoringBatch, *, ctx: ScoringContext, **_: object
) -> Tensor:
    """(B, C) float32: 1 at each wrong row's located first error, 0 elsewhere: the registry's scorer for
    ``first-error`` (`oar_rl.importance.first_error.first_error_scores` with its inputs from `ctx`)."""
    out = torch.zeros(batch.completion_mask.shape, dtype=torch.float32, device=batch.input_ids.device)
    for b, t in locate_first_errors(model, batch, ctx, rule="first-error").items():
        if t is not None:
            out[b, t] = 1.0
    return out


def save_prefix_scores(model: nn.Module, batch: ScoringBatch, *, ctx: ScoringContext, **_: object) -> Tensor:
    """(B, C) float32 weights (reshaping 'weights'): 0 on the scored tokens before each wrong row's located
    first error, 1 on every other valid token (module docstring)."""
    out = batch.completion_mask.float().clone()  # (B, C): weight 1 where nothing changes
    scored = batch.scored("lt-logits")  # (B, C)
    for b, t in locate_first_errors(model, batch, ctx, rule="save-prefix").items():
        if t is not None:
            before = scored[b].clone()
            before[t:] = False
            out[b][before] = 0.0
    return out


def token_logprobs(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    temperature: float = 1.0,
    batch_size: int | None = None,
    rows: list[int] | None = None,
) -> tuple[Tensor, Tensor]:
    """((B, C) float32 log π(y_t | y_<t) of each sampled completion token at `temperature`, (B, C) bool
    whether it is the policy's argmax), 0 / False on padding and on rows not in `rows` (None: every row).
    One forward, the LM head in blocks."""
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")

    def logp_and_top(z: Tensor, picked: Tensor) -> tuple[Tensor, Tensor]:
        logp_all = torch.log_softmax(z.float() / temperature, dim=-1)  # (m, V)
        return logp_all.gather(1, picked[:, None])[:, 0], z.argmax(dim=-1) == picked

    logp, greedy = completion_token_stats(
        model, batch, logp_and_top, (torch.float32, torch.bool), rows=rows, batch_size=batch_size
    )
    return logp, greedy


def lowest_prob_scores(model: nn.Module, batch: ScoringBatch, *, ctx: ScoringContext, **_: object) -> Tensor:
    """(B, C) float32: 1 at each wrong row's least likely scored token (the first of ties), 0 elsewhere."""
    out = torch.zeros(batch.completion_mask.shape, dtype=torch.float32, device=batch.input_ids.device)
    rows = wrong_rows(ctx, "lowest-prob", batch)
    if not rows:
        return out
    logp, _ = token_logprobs(model, batch, temperature=ctx.temperature, batch_size=ctx.batch_size, rows=rows)
    scored = batch.scored("lt-logits")
    for b in rows:
        cand = scored[b].nonzero().flatten()
        if cand.numel():
            out[b, cand[int(logp[b, cand].argmin())]] = 1.0
    return out


def random_departure_scores(
    model: nn.Module, batch: ScoringBatch, *, ctx: ScoringContext, **_: object
) -> Tensor:
    """(B, C) float32: in each wrong row where the first-error search located an error, 1 at a token drawn
    uniformly from the row's off-greedy scored tokens (row-keyed generator), 0 elsewhere."""
    out = torch.zeros(batch.completion_mask.shape, dtype=torch.float32, device=batch.input_ids.device)
    found = locate_first_errors(model, batch, ctx, rule="random-departure")
    located = sorted(b for b, t in found.items() if t is not None)
    if not located:
        return out
    _, greedy = token_logprobs(model, batch, batch_size=ctx.batch_size, rows=located)
    scored = batch.scored("lt-logits")
    gens = ctx.generator
    for b in located:
        gen = gens[b] if isinstance(gens, (list, tuple)) else gens
        off = scored[b] & ~greedy[b]
        off[found[b]] = True  # the located error is off-greedy; a near-tie of this pass must not drop it
        cand = off.nonzero().flatten().cpu()
        if cand.numel():
            out[b, int(cand[int(torch.randint(cand.numel(), (1,), generator=gen))])] = 1.0
    return out
