"""The credit modes, in one registry: name -> scorer, reshaping, needs a model, draws noise, help text.

Modelled on verl's `register_adv_est`: every place that lists or dispatches credit modes reads
:data:`CREDIT_MODES` -- `OARConfig.credit`'s choices and help, `OARTrainer`'s dispatch, `oar-rl
attribute`/`oracle` (through :func:`compute_importance`), `oar-rl bench`'s methods and the study's
method list. A new mode is one :func:`register_credit` call here plus its branch in the trainer's
reshaping (`reshape` below names which one it takes).

Every scorer takes one :class:`oar_rl.probes.ScoringBatch` (ids, masks and answer span, laid out and
validated once by `prepare_batch`); :func:`compute_importance` and the trainer build it, and OAR-GP's
two passes share it. :func:`grail_credit` is GRAIL's scoring and reshaping of a standalone batch.

The registration order is the order of :data:`CREDITS` (the study's method order; do not reorder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from torch import Tensor, nn

from oar_rl.importance.baselines import entropy_scores, random_scores
from oar_rl.importance.first_error import first_error_scores
from oar_rl.importance.gradient import gradient_scores
from oar_rl.importance.grail import batch_reasoning, grail_scores
from oar_rl.importance.hybrid import hybrid_scores
from oar_rl.importance.perturbation import perturbation_scores
from oar_rl.importance.rows import score_rows
from oar_rl.probes import ScoringBatch, prepare_batch
from oar_rl.reshape import check_grail_options, grail_rollout_rows, grail_token_advantages

Reshape = Literal["none", "uniform", "entropy", "bilevel", "grail"]


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
    """(model, batch: `oar_rl.probes.ScoringBatch`, **kwargs) -> raw (B, C) scores; None for 'none'. The
    batch is built and validated once (`prepare_batch`, with the answer span where the mode needs one)
    and every scorer takes it as is."""
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
        "random", "U(0,1) weights rescaled to sum to T (paper §4.2 baseline)", "uniform", random_scores
    )
)
register_credit(
    CreditMode(
        "entropy",
        "Eq. 6 entropy shaping (Cheng et al. 2025)",
        "entropy",
        entropy_scores,
        needs_model=True,
    )
)
register_credit(
    CreditMode(
        "oar-g",
        "gradient importance (Eq. 9-13)",
        "bilevel",
        gradient_scores,
        needs_model=True,
        noisy=True,
    )
)
register_credit(
    CreditMode("oar-p", "perturbation importance (Eq. 7-8)", "bilevel", perturbation_scores, needs_model=True)
)
register_credit(
    CreditMode(
        "grail",
        "GRAIL, gradient-activation saliency of the answer span (Pala, Toh & Poria 2026; needs answer "
        "spans, see answer_pattern and the grail_* fields)",
        "grail",
        grail_scores,
        needs_model=True,
    )
)
register_credit(
    CreditMode(
        "oar-gp",
        "OAR-G ranks every token, OAR-P rescores each row's top oar_gp_fraction (not in the paper; "
        "oar_rl.importance.hybrid)",
        "bilevel",
        hybrid_scores,
        needs_model=True,
        noisy=True,
    )
)

register_credit(
    CreditMode(
        "first-error",
        "blame a wrong rollout's first token after which the policy's own greedy continuation misses the "
        "gold answer (binary search; not in the paper, oar_rl.importance.first_error); correct rollouts "
        "keep GRPO's uniform advantage",
        "bilevel",
        first_error_scores,
        needs_model=True,
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
    answer_mask: Tensor | None = None,
    reasoning_mask: Tensor | None = None,
    **kwargs: Any,
) -> Tensor:
    """Raw (B, C) importance of one of :data:`SCORED_CREDITS`; extra keyword arguments go to the scorer.

    The standalone scoring call of `oar-rl attribute`/`oracle` and the study's recall analysis; the
    trainer calls each mode's `scorer` itself with the options of its `OARConfig`.

    Args:
        kind: ``"random"`` (:func:`~oar_rl.importance.random_importance`, takes ``generator``),
            ``"entropy"``, ``"oar-g"``, ``"oar-p"`` or ``"grail"`` (needs ``answer_mask``): the scorers
            of :func:`~oar_rl.importance.entropy_importance`, ``gradient_importance``,
            ``perturbation_importance`` and ``grail_importance``.
        rows: optional (B,) bool; only these rows are scored, the others get 0 (e.g. skip rows whose
            sequence advantage is exactly 0, DESIGN §3). None scores every row.
        answer_mask: optional (B, C) answer span (the AS probes and GRAIL need one); validated with the
            batch, and sliced to `rows` along with it.
        reasoning_mask: optional (B, C) reasoning tokens (:func:`oar_rl.answer_span.reasoning_mask`): only
            they are scored (OAR-G noises only them), as the trainer does by default
            (`OARConfig.scored_tokens="reasoning"`). None scores every token the probe allows.
        **kwargs: passed through (probe, noise_std, noise_scale, num_draws, generator, batch_size, ...).
    """
    if kind not in SCORED_CREDITS:
        raise ValueError(f"kind={kind!r} is not a known importance kind; valid: {list(SCORED_CREDITS)}")
    scorer = CREDIT_MODES[kind].scorer
    batch = prepare_batch(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, answer_mask, reasoning_mask
    )
    if rows is not None:
        return score_rows(scorer, model, batch, rows, **kwargs)
    return scorer(model, batch, **kwargs)


def grail_rows(batch: ScoringBatch, advantages: Tensor, rollouts: str) -> tuple[Tensor, Tensor]:
    """(rows GRAIL scores (B,), tokens it reweights (B, C)) of a batch with an answer span: the rollouts
    `rollouts` selects (:func:`~oar_rl.reshape.grail_rollout_rows`) that have a reasoning token, and the
    reasoning tokens (:func:`~oar_rl.importance.reasoning_positions`)."""
    reasoning = batch_reasoning(batch)  # (B, C)
    return grail_rollout_rows(advantages.to(reasoning.device), rollouts) & reasoning.any(dim=1), reasoning


def grail_credit(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    advantages: Tensor,
    *,
    answer_mask: Tensor,
    mask: Tensor | None = None,
    rollouts: str = "wrong",
    mu: float = 1.0,
    sigma: float = 0.5,
    w_min: float = 0.5,
    w_max: float = 5.0,
    temperature: float = 1.0,
    batch_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """GRAIL token advantages of a batch, scoring only the rows it reweights: the scores
    (:func:`~oar_rl.importance.grail_importance`) then :func:`~oar_rl.reshape.grail_token_advantages`,
    as the trainer does for ``credit="grail"``.

    Args:
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, answer_mask, temperature,
            batch_size: as :func:`~oar_rl.importance.grail_importance`.
        advantages: (B,) sequence advantages A_i.
        mask: (B, C) the tokens that get an advantage (e.g. completion mask without tool outputs);
            None: `completion_mask`.
        rollouts, mu, sigma, w_min, w_max: as :func:`oar_rl.reshape.grail_token_advantages`.

    Returns:
        (token_advantages (B, C), weights (B, C)), float32 on `mask`'s device, 0 on padding.
    """
    check_grail_options(mu, sigma, w_min, w_max, rollouts)  # before any forward pass
    mask = completion_mask if mask is None else mask
    batch = prepare_batch(model, prompt_ids, prompt_mask, completion_ids, completion_mask, answer_mask)
    if not isinstance(advantages, Tensor) or advantages.shape != completion_mask.shape[:1]:
        shape = tuple(advantages.shape) if isinstance(advantages, Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be a (B,) tensor with B={completion_mask.shape[0]}, got {shape}")
    selected, reasoning = grail_rows(batch, advantages, rollouts)  # (B,), (B, C)
    scores = score_rows(grail_scores, model, batch, selected, temperature=temperature, batch_size=batch_size)
    return grail_token_advantages(
        advantages,
        scores.to(mask.device),
        mask,
        reasoning.to(mask.device),
        rollouts=rollouts,
        mu=mu,
        sigma=sigma,
        w_min=w_min,
        w_max=w_max,
    )
