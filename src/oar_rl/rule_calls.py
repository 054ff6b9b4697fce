"""Calling a credit rule: its `options`, its scorer and the check of its scores, each failure one line.

Every caller of a rule's scorer (the trainer, `oar-rl blame`, `compute_importance` for attribute, oracle
and the recall) goes through :func:`checked_scorer` / :func:`run_scorer`. A failure there is a
:class:`oar_rl.scoring.RuleError` naming the rule, the value and what is valid: keyword arguments its
`options` gave that the scorer does not take, an exception the scorer raised, scores of the wrong
type, shape or dtype, non-finite, or negative where the reshaping needs them non-negative
(:func:`check_scores`). `oar-rl` prints such an error as one line (`--debug`: the traceback).

:func:`zero_weight_rows` finds the rows a ``reshape="weights"`` rule silenced: under 'weights' a score
is the token's weight, so a row scored 0 on every scored token gets no gradient there, where under
'bilevel' and 'uniform' the same zeros mean GRPO's advantage. The trainer warns of them by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from oar_rl.importance.rows import score_rows
from oar_rl.probes import ScoringBatch
from oar_rl.reshape import ENTROPY_ROUNDING
from oar_rl.scoring import RuleError, ScoringContext

NON_NEGATIVE: tuple[str, ...] = ("uniform", "entropy", "bilevel", "weights")
"""Reshapings that need scores >= 0 on the scored tokens (:func:`check_scores`). Down to −1e-6 passes as
rounding (× the largest |score| of the scored tokens for 'bilevel', 'uniform'; absolute for 'weights'; for
'entropy' −ENTROPY_ROUNDING): clamped to 0 for 'uniform' and 'weights', by Eq. 14 for 'bilevel', kept for
'entropy' (built-in rules score as before); further below, Eq. 6's bonus would be a penalty."""
NEGATIVE_TOLERANCE = 1e-6


def _scorer_name(mode: Any) -> str:
    return str(getattr(mode.scorer, "__qualname__", mode.scorer))


def rule_kwargs(mode: Any, ctx: ScoringContext) -> dict[str, Any]:
    """`mode.options(ctx)` as a dict; RuleError naming the rule when it raises or gives no dict."""
    try:
        kw = mode.options(ctx)
    except RuleError:
        raise
    except Exception as err:
        raise RuleError(
            f"credit rule {mode.name!r}: its options(ctx) raised {type(err).__name__}: {err}"
        ) from err
    if not isinstance(kw, dict):
        raise RuleError(
            f"credit rule {mode.name!r}: its options(ctx) returned {type(kw).__name__}, expected a dict of "
            "the scorer's keyword arguments"
        )
    return kw


def check_call(mode: Any, kw: dict[str, Any]) -> None:
    """RuleError unless the rule's scorer takes ``(model, batch, **kw)``: e.g. a keyword its `options`
    gave that the scorer has no parameter for, named with the parameters it has. A scorer whose signature
    cannot be read (a builtin) passes."""
    try:
        sig = inspect.signature(mode.scorer)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(None, None, **kw)
    except TypeError as err:
        params = list(sig.parameters.values())
        takes = ", ".join(str(p) for p in params[2:]) or "no keyword arguments"
        names = {p.name for p in params}
        open_ = any(p.kind is p.VAR_KEYWORD for p in params)  # takes **kw: no keyword is unknown
        unknown = [] if open_ else [k for k in kw if k not in names]
        given = "its options gave" if mode.options is not None else "it is given"
        scorer = f"scorer {_scorer_name(mode)}{sig}"
        if unknown:
            raise RuleError(
                f"credit rule {mode.name!r}: {given} the keyword(s) {', '.join(unknown)}, which {scorer} has "
                f"no parameter for; it takes: {takes}"
            ) from None
        raise RuleError(
            f"credit rule {mode.name!r}: {scorer} cannot be called with the keyword arguments {given} "
            f"({', '.join(kw) or 'none'}): {err}; it takes: {takes}"
        ) from None


def check_scores(mode: Any, scores: Any, batch: ScoringBatch, scored: Tensor | None = None) -> Tensor:
    """`scores` as detached float32 (B, C), 0 on padding, after checking what the rule returned: a floating
    tensor of the batch's shape, finite on the scored tokens (`scored`; None: every valid token), and
    non-negative there where the rule's reshaping needs it. RuleError naming the rule otherwise.

    Detached: a scorer may run the model with grad enabled (OAR-G needs it), but a graph left on its
    scores would reach TRL's loss through the advantages (a wrong gradient, or a second backward through
    a freed graph). Non-finite values on valid tokens that are not scored (never read) become 0; for
    'uniform' and 'weights', values within the rounding tolerance below 0 become 0 (:data:`NON_NEGATIVE`)."""
    valid = batch.completion_mask
    what = f"credit rule {mode.name!r} (scorer {_scorer_name(mode)})"
    if not isinstance(scores, Tensor):
        raise RuleError(f"{what} returned {type(scores).__name__}, expected a (B, C) float torch.Tensor")
    if tuple(scores.shape) != tuple(valid.shape):
        raise RuleError(
            f"{what}: scores have shape {tuple(scores.shape)}, expected (B, C) = {tuple(valid.shape)} "
            "(one score per completion position)"
        )
    if not scores.is_floating_point():
        raise RuleError(f"{what}: scores have dtype {scores.dtype}, expected a floating-point dtype")
    scores = scores.detach().float().to(valid.device)
    where = valid if scored is None else scored.to(valid.device).bool() & valid
    finite = torch.isfinite(scores)
    bad = ~finite & where
    if bool(bad.any()):
        r, c = (int(i) for i in bad.nonzero()[0])
        raise RuleError(
            f"{what}: scores must be finite on the scored tokens; found {scores[r, c].item()} at row {r}, "
            f"position {c} ({int(bad.sum())} such tokens)"
        )
    zero = torch.zeros((), device=scores.device)
    scores = torch.where(valid & (finite | where), scores, zero)
    if mode.reshape in NON_NEGATIVE:
        tol = ENTROPY_ROUNDING if mode.reshape == "entropy" else NEGATIVE_TOLERANCE
        if mode.reshape in ("uniform", "bilevel") and bool(where.any()):
            tol *= max(1.0, float(scores[where].abs().max()))
        neg = (scores < -tol) & where
        if bool(neg.any()):
            r, c = (int(i) for i in neg.nonzero()[0])
            raise RuleError(
                f"{what}: reshape={mode.reshape!r} needs non-negative scores on the scored tokens; found "
                f"{scores[r, c].item()} at row {r}, position {c} ({int(neg.sum())} such tokens)"
            )
        if mode.reshape in ("uniform", "weights"):  # they take the values as they are: no Eq. 14 clamp
            scores = torch.where(where, scores.clamp_min(0.0), scores)
    return scores


def checked_scorer(mode: Any, probe: str = "lt-logits") -> Callable[..., Tensor]:
    """The rule's scorer ``(model, batch, **kw) -> (B, C)``: its keyword arguments checked against its
    signature (:func:`check_call`), what it raises named with the rule (a RuleError; out-of-memory errors
    pass as they are), each output checked (:func:`check_scores`, on the tokens `probe` scores) before
    `score_rows` writes it into a (B, C) buffer (so none broadcasts)."""
    if mode.scorer is None:
        raise ValueError(f"credit rule {mode.name!r} has no scorer (reshape='none')")
    scorer = mode.scorer
    passthrough = (RuleError, MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))

    def checked(model: nn.Module | None, batch: ScoringBatch, **kw: Any) -> Tensor:
        check_call(mode, kw)
        try:
            raw = scorer(model if mode.needs_model else None, batch, **kw)
        except passthrough:
            raise
        except Exception as err:
            raise RuleError(f"credit rule {mode.name!r} (scorer {_scorer_name(mode)}) raised "
                            f"{type(err).__name__}: {err}") from err  # fmt: skip
        return check_scores(mode, raw, batch, batch.scored(probe if mode.probe else "lt-logits"))

    return checked


def run_scorer(
    mode: Any, model: nn.Module | None, batch: ScoringBatch, ctx: ScoringContext, *,
    rows: Tensor | None = None, **extra: Any,
) -> Tensor:  # fmt: skip
    """The rule's checked (B, C) scores of `batch` (:func:`checked_scorer`), the kwargs of `ctx` updated by
    `extra`; `rows` (a (B,) bool): only those rows are scored (in one call), the others get 0."""
    score = checked_scorer(mode, ctx.probe)
    kw = {**mode.kwargs(ctx), **extra}
    if rows is not None:
        return score_rows(score, model, batch, rows, **kw)
    return score(model, batch, **kw)


def zero_weight_rows(scores: Tensor, scored: Tensor) -> int:
    """How many rows of (R, C) `scores` are 0 on every one of their (R, C) `scored` tokens (rows with
    none scored aside): under ``reshape="weights"`` those rows get no gradient on their scored tokens."""
    has = scored.any(dim=1)
    silent = ~((scores != 0) & scored).any(dim=1) & has
    return int(silent.sum())


def zero_weights_message(name: str, rows: int, of: int, step: int) -> str:
    """The trainer's warning for :func:`zero_weight_rows` (said once per run)."""
    return (
        f"credit rule {name!r} (reshape='weights') scored {rows} of {of} rows 0 on every scored token at "
        f"step {step}: under 'weights' a score is the token's weight (A_t = A_i * w_t), so those rows get no "
        "gradient on their reasoning tokens; under 'bilevel' and 'uniform' an all-zero row keeps GRPO's "
        "advantage instead. Return 1 where the rule leaves a token alone (said once per run)"
    )
