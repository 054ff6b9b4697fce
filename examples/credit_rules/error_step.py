"""A credit rule that reads the outcome: blame the whole reasoning *step* that holds a wrong rollout's first
error (a step-level first-error, after Math-Shepherd's and OmegaPRM's step labels).

    oar-rl study --credit-module examples/credit_rules/error_step.py --credits grpo,error-step ...
    oar-rl blame --credit-module examples/credit_rules/error_step.py --credits first-error,error-step ...
    oar-rl train --credit-module examples/credit_rules/error_step.py --credit error-step ...

The rule gets the whole `oar_rl.ScoringContext` (``options=lambda ctx: {"ctx": ctx}``). Its outcome
fields say how each rollout ended: ``ctx.advantages`` (each row's sequence advantage; negative = wrong),
``ctx.gold`` (each row's gold answer), ``ctx.check`` (the task's answer check) and ``ctx.max_new_tokens``
(the completion budget); ``ctx.need("gold", rule)`` reads one and refuses loudly where the caller has
none. `oar_rl.locate_first_errors` runs oar-rl's own first-error search on the wrong rows with those
fields, so this file does not copy it. The steps are oar-rl's sentence-or-line steps
(`oar_rl.importance.span.reasoning_steps`, what `oar-p-span` masks).

Scores: 1 on every scored token of the step holding the located error, 0 elsewhere; `reshape="bilevel"`
sends them through OAR's Eq. 14-17 (so the step shares a larger part of the row's negative advantage).
Right rollouts, and wrong ones with no located error, score 0 everywhere: GRPO's uniform advantage.
`standalone=False`: the analyses that have no outcome (attribute, oracle, recall) do not score it.

The guide: docs/guides/own-credit-rule.md ("Rules that read the outcome").
"""

from __future__ import annotations

import torch

import oar_rl
from oar_rl.importance.span import reasoning_steps


def error_step(model, batch: oar_rl.ScoringBatch, *, ctx: oar_rl.ScoringContext) -> torch.Tensor:
    """(B, C) float: 1 on the scored tokens of the step that holds each wrong row's first error."""
    out = torch.zeros(batch.completion_mask.shape)
    scored = batch.scored("lt-logits")  # (B, C) bool: the reasoning tokens
    located = oar_rl.locate_first_errors(model, batch, ctx, rule="error-step")  # {row: token or None}
    rows = [b for b, t in located.items() if t is not None]
    if not rows:
        return out
    tokenizer = ctx.need("tokenizer", "error-step")
    steps = reasoning_steps(tokenizer, batch.input_ids[:, batch.prompt_len :].cpu(), scored.cpu())  # (B, C)
    for b in rows:
        out[b] = ((steps[b] == steps[b, located[b]]) & scored[b].cpu()).float()
    return out


oar_rl.register_credit(
    "error-step",
    error_step,
    reshape="bilevel",
    needs_model=True,  # the search continues prefixes with the policy
    options=lambda ctx: {"ctx": ctx},
    standalone=False,
    help="the reasoning step holding a wrong rollout's located first error "
    "(examples/credit_rules/error_step.py)",
)
