"""oar-rl: Outcome-grounded Advantage Reshaping (OAR) for GRPO, on top of Hugging Face TRL.

The public names below are imported lazily, so `import oar_rl` stays fast and the pure tensor
functions can be used without importing TRL.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # Eq. 6, 14, 16-17
    "normalize_importance": "oar_rl.reshape",
    "bilevel_weights": "oar_rl.reshape",
    "entropy_shaped_advantages": "oar_rl.reshape",
    "token_advantages": "oar_rl.reshape",
    "rescale_sum": "oar_rl.reshape",
    # Eq. 27-28
    "ess_ratio": "oar_rl.metrics",
    "top_advantage_mass": "oar_rl.metrics",
    # importance scorers and probes
    "perturbation_importance": "oar_rl.importance",
    "gradient_importance": "oar_rl.importance",
    "entropy_importance": "oar_rl.importance",
    "random_importance": "oar_rl.importance",
    "answer_span_mask": "oar_rl.answer_span",
    "answer_masks": "oar_rl.answer_span",
    "reasoning_mask": "oar_rl.answer_span",
    # GRAIL (Pala, Toh & Poria 2026)
    "grail_importance": "oar_rl.importance",
    "grail_credit": "oar_rl.importance.grail",
    "grail_weights": "oar_rl.reshape",
    "grail_token_advantages": "oar_rl.reshape",
    # analysis (paper §5.1)
    "counterfactual_oracle": "oar_rl.analysis.oracle",
    "causal_recall": "oar_rl.analysis.recall_stats",
    # evaluation
    "pass_at_k": "oar_rl.eval.evaluation",
    "mean_at_n": "oar_rl.eval.evaluation",
    # credit rules: register your own (docs/guides/own-credit-rule.md)
    "register_credit": "oar_rl.credits",
    "unregister_credit": "oar_rl.credits",
    "compute_importance": "oar_rl.credits",
    "ScoringContext": "oar_rl.scoring",
    "ScoringBatch": "oar_rl.probes",
    # the first-error locator, a building block for rules that read the outcome
    "first_error_positions": "oar_rl.importance.first_error",
    "locate_first_errors": "oar_rl.importance.outcome",
    "token_logprobs": "oar_rl.importance.outcome",
    # the TRL seam
    "OARConfig": "oar_rl.config",
    "OARTrainer": "oar_rl.trainer",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'oar_rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
