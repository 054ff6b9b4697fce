"""The credit modes, in one registry: name -> scorer, reshaping, needs a model, draws noise, help text.

Modelled on verl's `register_adv_est`: every place that lists or dispatches credit modes reads
:data:`CREDIT_MODES` -- `OARConfig.credit`'s choices and help, `OARTrainer`'s dispatch, `oar-rl
attribute`/`oracle` (through :func:`compute_importance`), `oar-rl bench`'s methods and the study's
method list. A new mode is one :func:`register_credit` call here plus its branch in the trainer's
reshaping (`reshape` below names which one it takes).

The registration order is the order of :data:`CREDITS` (the study's method order; do not reorder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from torch import Tensor, nn

from oar_rl.importance.baselines import entropy_importance, random_importance
from oar_rl.importance.gradient import gradient_importance
from oar_rl.importance.grail import grail_importance
from oar_rl.importance.hybrid import hybrid_importance
from oar_rl.importance.perturbation import perturbation_importance
from oar_rl.importance.rows import score_rows

Reshape = Literal["none", "uniform", "entropy", "bilevel", "grail"]


def _random_scorer(model: nn.Module, prompt_ids, prompt_mask, completion_ids, completion_mask, **kwargs):
    return random_importance(completion_mask, **kwargs)


@dataclass(frozen=True)
class CreditMode:
    """One credit mode (`OARConfig.credit`)."""

    name: str
    help: str
    """One clause for `OARConfig.credit`'s help."""
    reshape: Reshape
    """How the trainer turns scores into token advantages: 'none' (plain GRPO), 'uniform' (Eq. 17 on
    the raw scores), 'entropy' (Eq. 6), 'bilevel' (Eq. 14-17) or 'grail' (GRAIL's weights)."""
    scorer: Callable[..., Tensor] | None = None
    """(model, prompt_ids, prompt_mask, completion_ids, completion_mask, **kwargs) -> raw (B, C) scores;
    None for 'none'."""
    needs_model: bool = False
    """Runs policy forwards (rejected under ZeRO-3 without gathered parameters)."""
    noisy: bool = False
    """Draws OAR-G embedding noise from the trainer's row-keyed generators."""


CREDIT_MODES: dict[str, CreditMode] = {}


def register_credit(mode: CreditMode) -> CreditMode:
    """Add a credit mode (a name may be registered once)."""
    if mode.name in CREDIT_MODES:
        raise ValueError(f"credit mode {mode.name!r} is already registered")
    CREDIT_MODES[mode.name] = mode
    return mode


register_credit(CreditMode("none", "plain GRPO (sequence advantage on every token)", "none"))
register_credit(
    CreditMode(
        "random", "U(0,1) weights rescaled to sum to T (paper §4.2 baseline)", "uniform", _random_scorer
    )
)
register_credit(
    CreditMode(
        "entropy",
        "Eq. 6 entropy shaping (Cheng et al. 2025)",
        "entropy",
        entropy_importance,
        needs_model=True,
    )
)
register_credit(
    CreditMode(
        "oar-g",
        "gradient importance (Eq. 9-13)",
        "bilevel",
        gradient_importance,
        needs_model=True,
        noisy=True,
    )
)
register_credit(
    CreditMode(
        "oar-p", "perturbation importance (Eq. 7-8)", "bilevel", perturbation_importance, needs_model=True
    )
)
register_credit(
    CreditMode(
        "grail",
        "GRAIL, gradient-activation saliency of the answer span (Pala, Toh & Poria 2026; needs answer "
        "spans, see answer_pattern and the grail_* fields)",
        "grail",
        grail_importance,
        needs_model=True,
    )
)
register_credit(
    CreditMode(
        "oar-gp",
        "OAR-G ranks every token, OAR-P rescores each row's top oar_gp_fraction (not in the paper; "
        "oar_rl.importance.hybrid)",
        "bilevel",
        hybrid_importance,
        needs_model=True,
        noisy=True,
    )
)

CREDITS: tuple[str, ...] = tuple(CREDIT_MODES)
MODEL_CREDITS: tuple[str, ...] = tuple(n for n, m in CREDIT_MODES.items() if m.needs_model)
NOISY_CREDITS: tuple[str, ...] = tuple(n for n, m in CREDIT_MODES.items() if m.noisy)
SCORED_CREDITS: tuple[str, ...] = ("random", "entropy", "oar-g", "oar-p", "grail")
"""The modes :func:`compute_importance` scores standalone (`oar-gp` needs its two scorers' options)."""


def credit_help() -> str:
    """`OARConfig.credit`'s help: every registered mode with its clause."""
    clauses = "; ".join(f"'{m.name}': {m.help}" for m in CREDIT_MODES.values())
    return f"Token-level credit assignment. {clauses}."


def compute_importance(
    kind: str,
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    rows: Tensor | None = None,
    **kwargs: Any,
) -> Tensor:
    """Raw (B, C) importance of one of :data:`SCORED_CREDITS`; extra keyword arguments go to the scorer.

    The standalone scoring call of `oar-rl attribute`/`oracle` and the study's recall analysis; the
    trainer calls each mode's `scorer` itself with the options of its `OARConfig`.

    Args:
        kind: ``"random"`` (:func:`random_importance`, takes ``generator``), ``"entropy"``
            (:func:`entropy_importance`), ``"oar-g"`` (:func:`gradient_importance`), ``"oar-p"``
            (:func:`perturbation_importance`) or ``"grail"`` (:func:`grail_importance`, needs
            ``answer_mask``).
        rows: optional (B,) bool; only these rows are scored, the others get 0 (e.g. skip rows whose
            sequence advantage is exactly 0, DESIGN §3). None scores every row.
        **kwargs: passed through (probe, answer_mask, noise_std, noise_scale, num_draws, generator,
            batch_size, ...). A (B, C) ``answer_mask`` is sliced to `rows` along with the batch.
    """
    if kind not in SCORED_CREDITS:
        raise ValueError(f"kind={kind!r} is not a known importance kind; valid: {list(SCORED_CREDITS)}")
    scorer = CREDIT_MODES[kind].scorer
    batch = (model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    if rows is not None:
        return score_rows(scorer, *batch, rows, **kwargs)
    return scorer(*batch, **kwargs)
