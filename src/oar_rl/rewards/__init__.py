"""Reward functions for math RL: accuracy (math-verify, bounded in time), format, and a safety wrapper.

All functions follow TRL 1.16's reward contract: ``fn(completions, **dataset_columns) -> list[float | None]``
where ``completions`` are strings (standard format) or lists of message dicts (conversational format), the
gold answers arrive as the ``answer`` dataset column (``solution``, TRL's name, is accepted as a fallback),
and ``None`` tells TRL to skip that completion for this reward.

The package, along its seams:

* `oar_rl.rewards.extract` -- which part of a completion is its answer: one rule for every prompt format
  (the last-ending of ``<answer>…</answer>``, ``\\boxed{…}``, "final answer is X"); pure text.
* `oar_rl.rewards.verify` -- math-verify scoring of one completion (runs in a worker process).
* `oar_rl.rewards.pool` -- the `pebble` process pool that kills and replaces a worker past its timeout.
* `oar_rl.rewards.functions` -- ``accuracy_reward`` / ``make_accuracy_reward`` and ``format_reward``.
* `oar_rl.rewards.safe` -- ``safe_reward``: a reward that raises costs ``None``, not the run.
"""

from __future__ import annotations

from oar_rl.rewards.extract import (
    answer_char_span,
    as_number,
    completion_text,
    extract_prediction,
    normalise_answer,
)
from oar_rl.rewards.functions import accuracy_reward, format_reward, make_accuracy_reward
from oar_rl.rewards.pool import (
    DEFAULT_TIMEOUT,
    DEFAULT_WORKERS,
    VerifierPool,
    get_pool,
    shutdown_pools,
)
from oar_rl.rewards.safe import MAX_FAILED_BATCHES, safe_reward
from oar_rl.rewards.verify import score_math

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_WORKERS",
    "MAX_FAILED_BATCHES",
    "VerifierPool",
    "accuracy_reward",
    "answer_char_span",
    "as_number",
    "completion_text",
    "extract_prediction",
    "format_reward",
    "get_pool",
    "make_accuracy_reward",
    "normalise_answer",
    "safe_reward",
    "score_math",
    "shutdown_pools",
]
