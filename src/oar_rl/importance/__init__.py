"""Token-importance scorers: OAR-P (perturbation), OAR-G (gradient), entropy and random baselines, GRAIL.

All return raw (B, C) float32 scores, 0 on padding; :func:`oar_rl.reshape.normalize_importance` and
:func:`oar_rl.reshape.bilevel_weights` turn them into weights (GRAIL's saliencies go through
:func:`oar_rl.reshape.grail_weights` instead). Which scorer each credit mode uses is registered in
:mod:`oar_rl.credits` (with :func:`oar_rl.credits.compute_importance`, the standalone scoring call). Each
``*_importance`` function validates and lays out its batch (:func:`oar_rl.probes.prepare_batch`) and hands
it to its ``*_scores`` function, the registry's scorer, which takes a prepared batch as is.
"""

from __future__ import annotations

from oar_rl.importance.baselines import entropy_importance, position_importance, random_importance
from oar_rl.importance.gradient import gradient_importance
from oar_rl.importance.grail import grail_importance, reasoning_positions
from oar_rl.importance.hybrid import hybrid_importance
from oar_rl.importance.perturbation import perturbation_importance

__all__ = [
    "entropy_importance",
    "gradient_importance",
    "grail_importance",
    "hybrid_importance",
    "perturbation_importance",
    "position_importance",
    "random_importance",
    "reasoning_positions",
]
