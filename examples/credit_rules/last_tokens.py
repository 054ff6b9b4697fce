"""A credit rule defined outside oar-rl: the last reasoning tokens of each rollout get the credit.

    oar-rl study --credit-module examples/credit_rules/last_tokens.py --credits grpo,last-tokens ...
    oar-rl blame --credit-module examples/credit_rules/last_tokens.py --credits position,last-tokens

The scorer gets the batch as `oar_rl.ScoringBatch` (prompt + completion ids, masks) and returns one
score per completion position, (B, C); only the scored tokens are read (``batch.scored(...)``: the
reasoning tokens, the tokens before the answer's format). Here: 1 on each row's last `LAST` scored
tokens, 0 on the others. `reshape="bilevel"` sends the scores through OAR's own reshaping (Eq. 14-17:
normalise, boost the top, suppress the rest, renormalise to the row's token count), so with τ = 0.4
every token outside the last `LAST` is suppressed to weight 0 and the last ones share the row's credit.
It runs no model (`needs_model=False`: the scorer gets model=None) and draws no noise.

The guide: docs/guides/own-credit-rule.md ("Add your own credit rule").
"""

from __future__ import annotations

import torch

import oar_rl

LAST = 8
"""Scored tokens at the end of each row's reasoning that get the credit."""


def last_tokens(model, batch: oar_rl.ScoringBatch, **kw) -> torch.Tensor:
    """(B, C) float: 1 on the last `LAST` scored tokens of each row, 0 elsewhere."""
    scored = batch.scored("lt-logits")  # (B, C) bool: the reasoning tokens (all valid ones without them)
    from_end = scored.flip(1).long().cumsum(1).flip(1)  # (B, C): 1 on the last scored token, 2 before it…
    return (scored & (from_end <= LAST)).float()


oar_rl.register_credit(
    "last-tokens",
    last_tokens,
    reshape="bilevel",
    help=f"the last {LAST} reasoning tokens get the credit (examples/credit_rules/last_tokens.py)",
)
