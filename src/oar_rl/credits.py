"""The credit rules, in one registry: name -> scorer, reshaping, needs a model, draws noise, help text.

Modelled on verl's `register_adv_est`: every place that lists or dispatches credit modes reads
:data:`CREDIT_MODES` -- `OARConfig.credit`'s choices and help, `OARTrainer`'s dispatch, `oar-rl
attribute`/`oracle` (through :func:`compute_importance`), `oar-rl blame`, `oar-rl bench`'s methods and
the study's method list. A rule is a scorer ``(model, batch: ScoringBatch, **kw) -> (B, C)`` scores plus
the existing reshaping it takes (:data:`RESHAPES`); :func:`register_credit` adds one, and is the public
call (``oar_rl.register_credit``) that the built-in rules below use too. A rule that takes an existing
reshaping needs no edit of the trainer; a rule in the user's own file is loaded with
``--credit-module PATH_OR_MODULE`` (:mod:`oar_rl.credit_modules`; docs/guides/own-credit-rule.md).

Every scorer takes one :class:`oar_rl.probes.ScoringBatch` (laid out and validated by `prepare_batch`);
its keyword arguments come from the rule's `options`, of the one `oar_rl.scoring.ScoringContext` every
rule gets (outcome included); its output is checked on every call (:func:`check_scores`), naming the rule.
:func:`~oar_rl.importance.grail.grail_credit` is GRAIL's scoring and reshaping of a standalone batch.

The registration order is the order of :data:`CREDITS` (the study's method order; do not reorder).
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from torch import Tensor, nn

from oar_rl.importance.baselines import (
    entropy_scores,
    position_scores,
    random_scores,
    reasoning_entropy_scores,
)
from oar_rl.importance.gradient import gradient_scores
from oar_rl.importance.grail import grail_credit, grail_rows, grail_scores  # noqa: F401 (public here too)
from oar_rl.importance.hybrid import hybrid_scores
from oar_rl.importance.outcome import (
    first_error_rule_scores,
    lowest_prob_scores,
    random_departure_scores,
    save_prefix_scores,
)
from oar_rl.importance.perturbation import perturbation_scores
from oar_rl.importance.rows import score_rows
from oar_rl.importance.span import span_perturbation_scores
from oar_rl.probes import prepare_batch
from oar_rl.rule_calls import (  # noqa: F401 (public here too: oar_rl.credits.check_scores, ...)
    NEGATIVE_TOLERANCE,
    NON_NEGATIVE,
    check_scores,
    checked_scorer,
    rule_kwargs,
    run_scorer,
)
from oar_rl.scoring import MissingOutcome, NotStandalone, ScoringContext

Reshape = Literal["none", "uniform", "entropy", "bilevel", "grail", "weights"]
RESHAPES: tuple[str, ...] = ("none", "uniform", "entropy", "bilevel", "grail", "weights")
"""How the trainer turns a rule's scores into token advantages:

- 'none': plain GRPO advantages (the scorer, if any, serves the analyses only; e.g. ``entropy-80-20``,
  whose training effect is TRL's `top_entropy_quantile`, set through the rule's `config`);
- 'uniform': Eq. 17 on the raw scores over the scored tokens (the others keep weight 1);
- 'entropy': Eq. 6, A_t = A_i + min(α·H_t, |A_i|/κ), over every token;
- 'bilevel': OAR's Eq. 14-17 (τ, β, threshold, floor of `OARConfig`) over the scored tokens;
- 'grail': GRAIL's weights;
- 'weights': the scores *are* the final weights w_t on the scored tokens, A_t = A_i·w_t (the others
  keep 1; no renormalisation)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class CreditMode:
    """One credit rule (a value of `OARConfig.credit`); made by :func:`register_credit`."""

    name: str
    help: str
    """One clause for `OARConfig.credit`'s help."""
    reshape: Reshape
    """How the trainer turns scores into token advantages (:data:`RESHAPES`)."""
    scorer: Callable[..., Tensor] | None = None
    """(model, batch: `oar_rl.probes.ScoringBatch`, **kwargs) -> raw (B, C) scores; None for 'none'. The
    batch is built and validated once (`prepare_batch`, with the answer span where the rule reads a
    probe) and every scorer takes it as is."""
    needs_model: bool = False
    """Runs policy forwards (rejected under ZeRO-3 without gathered parameters). False: the scorer gets
    ``model=None`` and the trainer neither unwraps nor gathers the policy for it."""
    noisy: bool = False
    """Draws random numbers: the scorer gets ``generator`` (the trainer's row-keyed CPU generators)."""
    probe: bool = False
    """Reads the outcome probe: the scorer gets ``probe``, the batch the answer span an answer-span probe
    needs, and the scored tokens are those the probe allows (`ScoringBatch.scored`)."""
    options: Callable[[ScoringContext], dict[str, Any]] | None = None
    """ScoringContext -> the scorer's keyword arguments (``probe`` is added when `probe`). None:
    ``settings``, ``batch_size``, ``temperature``, ``tokenizer`` and, when `noisy`, ``generator`` (so
    such a scorer takes ``**kw``)."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """`OARConfig` fields this rule sets (applied in `OARConfig.__post_init__` where the field is at its
    default; a conflicting value given by the user is an error)."""
    standalone: bool = True
    """Scored by :func:`compute_importance` (attribute, oracle, recall: no gold answers, no answer check);
    False for a rule that reads the outcome fields of :class:`ScoringContext`. `oar-rl blame` and the
    trainer give every rule the whole context, outcome included."""
    modules: tuple[str, ...] = ()
    """Where the rule comes from: the module being imported when it was registered, the module that
    called :func:`register_credit`, and the scorer's own module (a ``functools.partial`` unwrapped), each
    once, in that order. `--credit-module M` counts the rules whose origins include M as M's."""

    def kwargs(self, ctx: ScoringContext) -> dict[str, Any]:
        """The scorer's keyword arguments for `ctx` (see `options`)."""
        if self.options is not None:
            kw = rule_kwargs(self, ctx)  # what options raises or returns, named with the rule
        else:
            kw = {"settings": ctx.settings, "batch_size": ctx.batch_size, "temperature": ctx.temperature,
                  "tokenizer": ctx.tokenizer}  # fmt: skip
            if self.noisy:
                kw["generator"] = ctx.generator
        if self.probe:
            kw["probe"] = ctx.probe
        return kw


CREDIT_MODES: dict[str, CreditMode] = {}
BUILTIN_CREDITS: frozenset[str] = frozenset()
"""The rules registered below (set once they all are): a user's rule may not take their names."""
CREDITS: tuple[str, ...] = ()
"""The registered rule names, in registration order (refreshed by every registration)."""
MODEL_CREDITS: tuple[str, ...] = ()
NOISY_CREDITS: tuple[str, ...] = ()
SCORED_CREDITS: tuple[str, ...] = ()
"""The rules :func:`compute_importance` scores standalone (a scorer and `standalone`)."""


def _refresh() -> None:
    global CREDITS, MODEL_CREDITS, NOISY_CREDITS, SCORED_CREDITS
    CREDITS = tuple(CREDIT_MODES)
    MODEL_CREDITS = tuple(n for n, m in CREDIT_MODES.items() if m.needs_model)
    NOISY_CREDITS = tuple(n for n, m in CREDIT_MODES.items() if m.noisy)
    SCORED_CREDITS = tuple(n for n, m in CREDIT_MODES.items() if m.scorer is not None and m.standalone)


def register_credit(
    name: str,
    scorer: Callable[..., Tensor] | None = None,
    *,
    reshape: Reshape,
    help: str = "",
    needs_model: bool = False,
    noisy: bool = False,
    probe: bool = False,
    options: Callable[[ScoringContext], dict[str, Any]] | None = None,
    config: Mapping[str, Any] | None = None,
    standalone: bool = True,
) -> CreditMode:
    """Register a credit rule: `OARConfig(credit=name)`, `oar-rl train/study/blame/attribute/oracle/bench`.

    Args:
        name: the rule's name (letters, digits, '.', '_', '-'; not 'grpo', plain GRPO's name for 'none').
        scorer: ``(model, batch: oar_rl.probes.ScoringBatch, **kw) -> (B, C)`` float scores over the
            batch's completion positions; only the scored tokens (``batch.scored(probe)``: the reasoning
            tokens by default) are read. None only with ``reshape='none'``.
        reshape: one of :data:`RESHAPES` ('bilevel' is OAR's; 'weights' takes the scores as weights).
        help: one clause for `--credit`'s help.
        needs_model: the scorer runs the policy (else it gets ``model=None``).
        noisy: the scorer gets ``generator`` (one CPU generator per row in training).
        probe: the scorer reads the outcome probe (gets ``probe``; answer span in the batch).
        options: ScoringContext -> scorer kwargs (default: settings, batch_size, temperature, tokenizer).
        config: `OARConfig` fields the rule sets (e.g. ``{"top_entropy_quantile": 0.2}``).
        standalone: False: :func:`compute_importance` refuses it (see `CreditMode.standalone`).

    Returns:
        The registered :class:`CreditMode`. ValueError on a bad field, a name registered already, or a
        scorer whose signature cannot take ``(model, batch, **kw)`` as it will be called (where it can
        be read: ``inspect.signature``)
    """
    if not isinstance(name, str) or not _NAME.match(name) or name == "grpo":
        raise ValueError(
            f"credit rule name {name!r} is not valid: letters, digits, '.', '_' and '-' (not 'grpo', "
            "plain GRPO's name, oar_rl.credit_names; no '/', which the analyses use for <rule>/<probe>)"
        )
    origins = _origins(scorer)
    if name in BUILTIN_CREDITS:  # also after unregister_credit: a run would be labelled with its name
        raise ValueError(
            f"credit rule name {name!r} is a built-in rule's (oar_rl.credits; 'none' is plain GRPO, also "
            f"'grpo'): runs and studies would label your rule with it; give your rule another name"
        )
    if name in CREDIT_MODES:
        raise ValueError(
            f"credit rule {name!r} is already registered by {_where(CREDIT_MODES[name].modules[0])}; "
            f"registering it again from {_where(origins[0])}: give the new rule another name, or remove "
            f"the old one first with oar_rl.unregister_credit({name!r}) (e.g. to reload a changed file)"
        )
    if reshape not in RESHAPES:
        raise ValueError(f"credit rule {name!r}: reshape={reshape!r} is not valid; choose one of {RESHAPES}")
    if scorer is None and reshape != "none":
        raise ValueError(f"credit rule {name!r}: reshape={reshape!r} needs a scorer")
    if scorer is not None and not callable(scorer):
        raise ValueError(f"credit rule {name!r}: scorer must be callable, got {type(scorer).__name__}")
    if options is not None and not callable(options):
        raise ValueError(f"credit rule {name!r}: options must be callable (ScoringContext -> dict)")
    if probe and reshape == "entropy":
        raise ValueError(
            f"credit rule {name!r}: probe=True does not go with reshape='entropy' (Eq. 6 shapes every "
            "token, and the trainer scores it without an answer span); use reshape='bilevel', 'uniform' "
            "or 'weights' for a rule that reads the outcome probe"
        )
    mode = CreditMode(
        name, help or f"credit rule registered by {origins[0]}", reshape, scorer, bool(needs_model),
        bool(noisy), bool(probe), options, dict(config or {}), bool(standalone), origins,
    )  # fmt: skip
    if scorer is not None:
        _check_signature(mode)
    CREDIT_MODES[name] = mode
    _refresh()
    return mode


def unregister_credit(name: str) -> None:
    """Remove a registered rule (e.g. to reload a changed file in a notebook); not a built-in one."""
    if name in BUILTIN_CREDITS:
        raise ValueError(f"credit rule {name!r} is built in and cannot be removed (nor registered again)")
    if name not in CREDIT_MODES:
        raise ValueError(f"credit rule {name!r} is not registered; registered: {', '.join(CREDIT_MODES)}")
    del CREDIT_MODES[name]
    _refresh()


def _origins(scorer: Callable[..., Tensor] | None) -> tuple[str, ...]:
    """`CreditMode.modules` for a registration happening now (called from :func:`register_credit`)."""
    caller = frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    func = scorer
    while callable(getattr(func, "func", None)):  # functools.partial, possibly nested
        func = func.func
    names = [(frame or caller).f_globals.get("__name__"), caller.f_globals.get("__name__")]
    names.append(getattr(func, "__module__", None))
    return tuple(dict.fromkeys(n for n in names if n)) or ("?",)


def _where(module: str) -> str:
    """`module` and its source file (a file loaded by path, under a made-up name: the file only)."""
    file = getattr(sys.modules.get(module), "__file__", None)
    made_up = module.startswith("oar_rl_credit_module_")  # oar_rl.credit_modules' name for a file
    return file if file and made_up else f"{module} ({file})" if file else module


def _check_signature(mode: CreditMode) -> None:
    """ValueError unless the rule's scorer takes ``(model, batch, **kw)`` as its callers pass them, kw the
    default keyword arguments (`CreditMode.kwargs`), or with `options` (which may choose any) ``probe`` for
    a rule that reads one. A scorer whose signature cannot be read (a builtin) passes."""
    try:
        sig = inspect.signature(mode.scorer)
    except (TypeError, ValueError):
        return
    own = mode.options is not None
    keys = (["probe"] if mode.probe else []) if own else list(mode.kwargs(ScoringContext()))
    try:
        (sig.bind_partial if own else sig.bind)(None, None, **dict.fromkeys(keys))
    except TypeError as err:
        call = ", ".join(["model", "batch", *(f"{k}=..." for k in keys), *(["..."] if own else [])])
        raise ValueError(
            f"credit rule {mode.name!r}: scorer {getattr(mode.scorer, '__qualname__', mode.scorer)!s}{sig} "
            f"cannot be called as scorer({call}) ({err}); take **kw"
            + ("" if own else ", or give options= (ScoringContext -> the keyword arguments it takes)")
        ) from None


# ----------------------------------------------------------------------------------------------------
# the built-in rules, registered through the public call (registration order = CREDITS' order)


def _gradient_options(c: ScoringContext) -> dict[str, Any]:
    s = c.settings
    return dict(
        noise_std=s.get("noise_std", 1e-3), noise_scale=s.get("oar_noise_scale", "absolute"),
        num_draws=int(s.get("oar_noise_draws", 1)), batch_size=c.batch_size, generator=c.generator,
    )  # fmt: skip


def _perturbation_options(c: ScoringContext) -> dict[str, Any]:
    s = c.settings
    return dict(
        mask_token_id=s.get("mask_token_id"), batch_size=int(s.get("perturbation_batch_size", 64)),
        prefix_reuse=bool(s.get("perturbation_prefix_reuse", True)),
    )  # fmt: skip


def _hybrid_options(c: ScoringContext) -> dict[str, Any]:
    return dict(
        fraction=float(c.settings.get("oar_gp_fraction", 0.25)),
        gradient_kwargs=_gradient_options(c),
        perturbation_kwargs=_perturbation_options(c),
    )


def _forward_options(c: ScoringContext) -> dict[str, Any]:
    return {"batch_size": c.batch_size, "temperature": c.temperature}


register_credit("none", reshape="none", help="plain GRPO (sequence advantage on every token), also 'grpo'")
register_credit(
    "random", random_scores, reshape="uniform", noisy=True, options=lambda c: {"generator": c.generator},
    help="U(0,1) weights rescaled to sum to T (paper §4.2 baseline)",
)  # fmt: skip
register_credit(
    "entropy", entropy_scores, reshape="entropy", needs_model=True, options=_forward_options,
    help="Eq. 6 entropy shaping (Cheng et al. 2025)",
)  # fmt: skip
register_credit(
    "oar-g", gradient_scores, reshape="bilevel", needs_model=True, noisy=True, probe=True,
    options=_gradient_options, help="gradient importance (Eq. 9-13)",
)  # fmt: skip
register_credit(
    "oar-p", perturbation_scores, reshape="bilevel", needs_model=True, probe=True,
    options=_perturbation_options, help="perturbation importance (Eq. 7-8)",
)  # fmt: skip
register_credit(
    "grail", grail_scores, reshape="grail", needs_model=True, options=_forward_options,
    help="GRAIL, gradient-activation saliency of the answer span (Pala, Toh & Poria 2026; needs answer "
    "spans, see answer_pattern and the grail_* fields)",
)  # fmt: skip
register_credit(
    "oar-gp", hybrid_scores, reshape="bilevel", needs_model=True, noisy=True, probe=True,
    options=_hybrid_options, standalone=False,
    help="OAR-G ranks every token, OAR-P rescores each row's top oar_gp_fraction (not in the paper; "
    "oar_rl.importance.hybrid)",
)  # fmt: skip
register_credit(
    "first-error", first_error_rule_scores, reshape="bilevel", needs_model=True, standalone=False,
    options=lambda c: {"ctx": c},
    help="blame a wrong rollout's first token after which the policy's own greedy continuation misses the "
    "gold answer (binary search; not in the paper, oar_rl.importance.first_error); correct rollouts "
    "keep GRPO's uniform advantage",
)  # fmt: skip
register_credit(
    "position", position_scores, reshape="bilevel", options=lambda c: {},
    help="importance = the token's index in the reasoning (later tokens more; no model, no probe), through "
    "OAR's bi-level reshaping: the control for 'OAR only weights late tokens' (oar_rl.importance."
    "baselines.position_scores, the recall and blame position control)",
)  # fmt: skip
register_credit(
    "oar-p-span", span_perturbation_scores, reshape="bilevel", needs_model=True, probe=True,
    options=lambda c: {**_perturbation_options(c), "tokenizer": c.tokenizer},
    help="span-level OAR-P: each reasoning step (sentence or line) masked as one unit, one forward per "
    "step, its tokens share its score (after 'Beyond Uniform Credit', arXiv 2602.09331; oar_rl."
    "importance.span)",
)  # fmt: skip
register_credit(
    "entropy-80-20", reasoning_entropy_scores, reshape="none", needs_model=True, options=_forward_options,
    config={"top_entropy_quantile": 0.2},
    help="high-entropy-token training ('Beyond the 80/20 rule', arXiv 2506.01939): TRL's own "
    "top_entropy_quantile=0.2 (gradient only on the top 20 percent of tokens by entropy), GRPO's "
    "advantages; blame and recall score it as the entropy of the reasoning tokens (weights: the binary "
    "top-20-percent mask)",
)  # fmt: skip


# Rules that read the outcome (oar_rl.importance.outcome), each handed the whole context; none standalone.
register_credit(
    "save-prefix", save_prefix_scores, reshape="weights", needs_model=True, options=lambda c: {"ctx": c},
    standalone=False,
    help="VPPO's saved prefix ('Save the Good Prefix', arXiv 2601.18984): in a wrong rollout the reasoning "
    "before its located first error (first-error's search) gets no penalty, the error and what follows "
    "keep it (oar_rl.importance.outcome)",
)  # fmt: skip
register_credit(
    "lowest-prob", lowest_prob_scores, reshape="bilevel", needs_model=True, options=lambda c: {"ctx": c},
    standalone=False,
    help="in a wrong rollout the least likely reasoning token (one forward, no continuation) gets "
    "first-error's importance, then Eq. 14-17 (oar_rl.importance.outcome)",
)  # fmt: skip
register_credit(
    "random-departure", random_departure_scores, reshape="bilevel", needs_model=True, noisy=True,
    options=lambda c: {"ctx": c}, standalone=False,
    help="the control for first-error's location: same search and rows, the importance on a random "
    "off-greedy reasoning token of the row instead of the located one (oar_rl.importance.outcome)",
)  # fmt: skip


BUILTIN_CREDITS = frozenset(CREDIT_MODES)


def credit_help() -> str:
    """`OARConfig.credit`'s help: every registered mode with its clause."""
    clauses = "; ".join(f"'{m.name}': {m.help}" for m in CREDIT_MODES.values())
    return f"Token-level credit assignment (a rule from your own file: --credit-module). {clauses}."


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
    trainer calls each mode's `scorer` itself with the options of its `OARConfig`. The scores are checked
    as in training (:func:`check_scores`: shape, finite, non-negative where the rule's reshaping needs it).

    Args:
        kind: a registered rule with a standalone scorer, e.g. ``"random"`` (takes ``generator``),
            ``"entropy"``, ``"oar-g"``, ``"oar-p"``, ``"grail"`` (needs ``answer_mask``), ``"position"``,
            ``"oar-p-span"`` (takes ``tokenizer``) or ``"entropy-80-20"``; a rule's kwargs for a
            :class:`ScoringContext` are ``CREDIT_MODES[kind].kwargs(ctx)``.
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
    mode = CREDIT_MODES[kind]
    batch = prepare_batch(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, answer_mask, reasoning_mask
    )

    checked = checked_scorer(mode, kwargs.get("probe", "lt-logits"))
    try:
        if rows is not None:
            return score_rows(checked, model, batch, rows, **kwargs)
        return checked(model, batch, **kwargs)
    except MissingOutcome as err:
        raise NotStandalone(
            f"credit rule {kind!r} reads the rollouts' outcome (ScoringContext.{err.field}), which "
            "standalone scoring (oar-rl attribute, oracle, the study's recall) does not have: register it "
            "with standalone=False (train, the study's runs and blame still run it)"
        ) from err
