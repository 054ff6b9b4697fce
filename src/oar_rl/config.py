"""`OARConfig(GRPOConfig)`: oar-rl's credit-assignment fields, their validation, and the mode names.

The credit modes are registered in :mod:`oar_rl.credits` (the help of `credit` comes from there) and
the outcome probes in :mod:`oar_rl.probes`; how the trainer uses them, and where it departs from the
paper, is described in :mod:`oar_rl.trainer`. `credit` is validated in `__post_init__` against the live
registry, after the modules of `credit_module` are loaded (:mod:`oar_rl.credit_modules`), so a rule from
the user's own file is a valid `credit` (its type is `str`, not a `Literal` fixed at import); a rule's
`config` (e.g. entropy-80-20's `top_entropy_quantile=0.2`) is applied there too. Plain GRPO is
``credit='grpo'`` or its alias ``'none'`` (the registered name `credit` holds after `__post_init__`;
:mod:`oar_rl.credit_names`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from trl import GRPOConfig

from oar_rl import credits
from oar_rl.answer_span import compile_answer_pattern
from oar_rl.credit_modules import load_credit_modules
from oar_rl.credit_names import registered, unknown_message
from oar_rl.credits import credit_help
from oar_rl.importance.first_error import DEFAULT_BRANCHING, DEFAULT_DECODE, check_branching, check_decode
from oar_rl.probes import PROBES, Probe
from oar_rl.reshape import check_grail_options, check_kappa

Threshold = Literal["quantile", "value"]
GrailRollouts = Literal["wrong", "correct", "all"]  # credit="grail"
ScoredTokens = Literal["reasoning", "before-answer"]
ReshapeRows = Literal["all", "positive", "negative"]
SCORED_TOKENS: tuple[str, ...] = ("reasoning", "before-answer")
RESHAPE_ROWS: tuple[str, ...] = ("all", "positive", "negative")

THRESHOLDS: tuple[str, ...] = ("quantile", "value")
VLLM_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")


@dataclass
class OARConfig(GRPOConfig):
    """`GRPOConfig` plus oar-rl's credit-assignment fields.

    Defaults follow the paper §4.1: G = 8 generations, temperature 1.0, learning rate 1e-6, KL coefficient
    `beta` = 0, clip-higher with `epsilon` = 0.2 and `epsilon_high` = 0.28 (the last one is the only
    TRL default changed here), τ = 0.4, β = 2.0. The boosting coefficient of Eq. 16 is `oar_beta`, because
    `beta` is already TRL's KL coefficient.
    """

    credit: str = field(
        default="oar-g",
        metadata={"help": credit_help()},
    )
    credit_module: list[str] | None = field(
        default=None,
        metadata={
            "help": "Credit modules to load before `credit` is checked: .py files or dotted module names "
            "that register rules with oar_rl.register_credit (oar_rl.credit_modules; docs: Add your own "
            "credit rule). Their rules become valid values of `credit`."
        },
    )
    probe: Probe = field(
        default="as-mean",
        metadata={
            "help": "Outcome probe for OAR importance (paper §6.2). 'lt-logits': next-token distribution "
            "after the completion; 'as-mean': mean logits over the answer span; 'as-joint': mean "
            "log-likelihood of the answer span. Answer-span probes score only tokens before the span; "
            "rows without a span fall back to 'lt-logits' (logged as oar/probe_fallback_frac, with a "
            "warning when most rows do). as-mean is the default of every oar-rl command (oar_rl.options): "
            "a completion ending in a fixed text such as '</answer>' leaves lt-logits almost no signal.",
        },
    )
    answer_pattern: str | None = field(
        default=None,
        metadata={
            "help": "Answer span for the answer-span probes and GRAIL: None or 'rewarded' (default) for the "
            "answer the accuracy reward scores (`\\boxed{...}`, `<answer>...</answer>` or 'the final answer "
            "is ...'), 'boxed' for the last balanced `\\boxed{...}`, or a regex with exactly one capturing "
            "group (the span; the last match counts), e.g. '<answer>(.*?)</answer>'. See "
            "oar_rl.answer_span.answer_span_mask. A warning is raised when most rows have no span."
        },
    )
    tau: float = field(
        default=0.4,
        metadata={
            "help": "Bi-level threshold τ of Eq. 16, in [0, 1]: the quantile level of the cut (threshold="
            "'quantile', τ=0.4 boosts the top 60%% of tokens) or the cut itself (threshold='value')."
        },
    )
    oar_beta: float = field(
        default=2.0,
        metadata={
            "help": "Boosting coefficient β >= 0 of Eq. 16 (named oar_beta because `beta` is TRL's KL "
            "coefficient, which the paper keeps at 0)."
        },
    )
    threshold: Threshold = field(
        default="quantile",
        metadata={
            "help": "How τ defines the cut of Eq. 16: 'quantile' (per-row quantile of normalised importance, "
            "as in the authors' code) or 'value' (the cut is τ on the normalised scale).",
        },
    )
    floor: float = field(
        default=0.0,
        metadata={
            "help": "Minimum weight of suppressed tokens before renormalisation, in [0, 1] (0 = the paper's "
            "Eq. 16; the authors' released code uses 0.1)."
        },
    )
    noise_std: float = field(
        default=1e-3,
        metadata={"help": "Standard deviation σ > 0 of the embedding noise of OAR-G (Eq. 10)."},
    )
    oar_noise_draws: int = field(
        default=1,
        metadata={
            "help": "OAR-G noise draws K >= 1, run in one batched pass; the score is the mean of "
            "|<g_t, e_t>| over draws (see oar_rl.importance.gradient and docs/guides/oar-g-noise.md)."
        },
    )
    oar_noise_scale: str = field(
        default="absolute",
        metadata={
            "help": "'absolute': σ = noise_std (the paper); 'rms': σ = noise_std times the RMS of the row's "
            "completion embeddings (use with noise_std ~0.05 for bf16/fp16 models; docs: OAR-G noise)."
        },
    )
    mask_token_id: int | None = field(
        default=None,
        metadata={
            "help": "Token id that replaces a completion token in OAR-P's perturbed copies (Eq. 7). "
            "None: the model config's pad token id."
        },
    )
    perturbation_batch_size: int = field(
        default=64,
        metadata={
            "help": "Perturbed sequences per forward pass in OAR-P (>= 1); lower it if memory is short."
        },
    )
    # --- oar-gp (hybrid) ---
    oar_gp_fraction: float = field(
        default=0.25,
        metadata={
            "help": "credit='oar-gp': share of each row's scored tokens, in (0, 1], that OAR-P rescores "
            "after OAR-G ranks them all (at least one per row); 1.0 is exact OAR-P."
        },
    )
    # --- end oar-gp ---
    perturbation_prefix_reuse: bool = field(
        default=True,
        metadata={
            "help": "OAR-P: run each clean sequence once with its key/value cache and recompute a perturbed "
            "copy only from the perturbed token on (same scores, fewer token-forwards); False recomputes "
            "whole copies (the paper's batching)."
        },
    )
    entropy_alpha: float = field(
        default=0.4,
        metadata={"help": "α >= 0 of the entropy baseline, Eq. 6 (Cheng et al. 2025 default)."},
    )
    entropy_kappa: float = field(
        default=2.0,
        metadata={"help": "κ > 1 of the entropy baseline, Eq. 6: the bonus is capped at |A|/κ."},
    )
    safe_rewards: bool = field(
        default=True,
        metadata={
            "help": "Wrap plain reward functions with oar_rl.rewards.safe_reward: a completion whose reward "
            "raises is logged and scored None (skipped by TRL) instead of killing the run; a reward that "
            "fails on every completion of 3 consecutive batches still stops the run. False: TRL's behaviour."
        },
    )
    # --- which tokens and rows are reshaped (issue 26) ---
    scored_tokens: ScoredTokens = field(
        default="reasoning",
        metadata={
            "help": "Tokens that get an importance score and a reshaped weight. 'reasoning' (default): the "
            "tokens before the format that introduces the answer (the <answer> tag, \\boxed{, 'The final "
            "answer is'; oar_rl.answer_span.reasoning_mask), as the paper's T; the format and the answer "
            "keep weight 1 and OAR-G puts no noise on them. 'before-answer': every token before the answer "
            "span (all tokens under lt-logits), oar-rl's behaviour before the reasoning-only default. "
            "Applies to random, oar-g, oar-p, oar-gp, grail and first-error; entropy shaping (Eq. 6) "
            "covers every token as in its paper."
        },
    )
    reshape_rows: ReshapeRows = field(
        default="all",
        metadata={
            "help": "Rows whose advantage is reshaped: 'all' (the paper), 'positive' (A_i > 0 only) or "
            "'negative' (A_i < 0 only); the other rows keep GRPO's uniform advantage and are not scored."
        },
    )
    gold_column: str = field(
        default="answer",
        metadata={
            "help": "the dataset column with each prompt's gold answer: every credit rule's "
            "ScoringContext.gold (first-error checks its greedy continuations against it)."
        },
    )
    first_error_branching: int = field(
        default=DEFAULT_BRANCHING,
        metadata={
            "help": "credit='first-error': k, a power of two >= 2. Each round of the search's greedy "
            "continuations tries k - 1 cut points per wrong row (log2 k levels of the binary search), so "
            "the sequential rounds drop from ceil(log2 T) (k = 2, binary) to ceil(log2 T / log2 k) for "
            "about (k - 1) / log2 k times the continuations. The located token is the binary search's for "
            "every k. Default 2 (the binary search): the fastest k measured on a CPU and on an H100 (the "
            "extra continuations cost more than the rounds they save there; oar_rl.importance.first_error)."
        },
    )
    first_error_decode: str = field(
        default=DEFAULT_DECODE,
        metadata={
            "help": "credit='first-error': how the search's greedy continuations are computed. 'cached' "
            "(default): each prefix continues from the searched rollouts' own key-value cache (one "
            "teacher-forced pass, no prefill) in a lean greedy loop that drops finished rows and, on "
            "Llama-shaped models, verifies drafts looked up in the batch's own texts several tokens per "
            "forward (oar_rl.importance.greedy_decode). 'generate': model.generate on every prefix (the "
            "search before the cached decode); 'generate-static' the same over a static cache; "
            "'generate-lookup' one prefix at a time with generate's prompt-lookup decoding. All take the "
            "argmax of the same model's logits; the located tokens were identical on the long regime's "
            "rollouts (tests/test_greedy_decode.py)."
        },
    )
    first_error_reuse_greedy: bool = field(
        default=True,
        metadata={
            "help": "credit='first-error': answer each cut of the search from its run of greedy tokens (a "
            "token the policy would itself have chosen does not change the greedy continuation): one "
            "teacher-forced pass, then only continuations of runs not yet answered, each from the run's "
            "last cut. The same questions get the same answers, so the located tokens do not change; "
            "every continuation checks the premise and a disagreement warns and searches again without "
            "the reuse (oar_rl.importance.greedy_runs). False: the plain search."
        },
    )
    # --- GRAIL (credit="grail"; oar_rl.importance.grail) ---
    grail_mu: float = field(
        default=1.0,
        metadata={"help": "GRAIL μ_w: the weight of a token of average log-saliency (paper: 1.0)."},
    )
    grail_sigma: float = field(
        default=0.5, metadata={"help": "GRAIL σ_w >= 0: weight change per standard deviation (paper: 0.5)."}
    )
    grail_min: float = field(
        default=0.5, metadata={"help": "GRAIL w_min >= 0: lower weight clamp (paper: 0.5)."}
    )
    grail_max: float = field(
        default=5.0, metadata={"help": "GRAIL w_max >= w_min: upper weight clamp (paper: 5.0)."}
    )
    grail_rollouts: GrailRollouts = field(
        default="wrong",
        metadata={
            "help": "Rollouts GRAIL reweights: 'wrong' (sequence advantage < 0, the paper's default), "
            "'correct' (advantage > 0) or 'all'. The others keep weight 1."
        },
    )
    # --- end GRAIL ---
    probe_warmup_steps: int = field(
        default=0,
        metadata={
            "help": "Optimizer steps (>= 0) during which answer-span probes are replaced by 'lt-logits' "
            "(paper §6.2: early policies do not yet produce the answer format)."
        },
    )
    # --- vLLM engine options TRL does not pass to vllm.LLM (colocate mode; oar_rl.vllm_sync) ---
    vllm_enforce_eager: bool = field(
        default=False,
        metadata={
            "help": "Colocated vLLM engine without torch.compile (vllm.LLM's enforce_eager). On a CPU the "
            "compiled engine took 56-77 s to start for SmolLM2-135M (measured beside other work), the eager "
            "one seconds."
        },
    )
    vllm_dtype: str = field(
        default="auto",
        metadata={
            "help": "dtype of the colocated vLLM engine: auto (the checkpoint's, vLLM's default), float32, "
            "bfloat16 or float16. Match the policy's dtype to keep vLLM's sampling log-probabilities close "
            "to the policy's."
        },
    )
    # TRL default changed to the paper's clip-higher value (DAPO).
    epsilon_high: float | None = field(
        default=0.28,
        metadata={
            "help": "Upper clipping bound ε_high (clip-higher, DAPO). oar-rl's default is the paper's 0.28; "
            "None means the same as `epsilon`."
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.credit_module, str):
            self.credit_module = [self.credit_module]
        load_credit_modules(self.credit_module)  # before `credit` is checked: their rules are valid
        self.credit = registered(self.credit)  # 'grpo' is plain GRPO's name, registered as 'none'
        if self.credit not in credits.CREDIT_MODES:
            hint = (
                ""
                if self.credit_module
                else " (a rule from your own file needs credit_module / --credit-module)"
            )
            raise ValueError(unknown_message("credit", self.credit, credits.CREDITS) + hint)
        self._apply_rule_config()
        _check_choice("probe", self.probe, PROBES)
        _check_choice("threshold", self.threshold, THRESHOLDS)
        _check_choice("scored_tokens", self.scored_tokens, SCORED_TOKENS)
        _check_choice("reshape_rows", self.reshape_rows, RESHAPE_ROWS)
        _check_choice("vllm_dtype", self.vllm_dtype, VLLM_DTYPES)
        _check_range("tau", self.tau, 0.0, 1.0)
        _check_range("floor", self.floor, 0.0, 1.0)
        if not float(self.oar_beta) >= 0.0:
            raise ValueError(f"oar_beta must be >= 0 (0 = no boosting), got {self.oar_beta}")
        if not float(self.noise_std) > 0.0:
            raise ValueError(f"noise_std must be > 0, got {self.noise_std}")
        if isinstance(self.oar_noise_draws, bool) or int(self.oar_noise_draws) < 1:
            raise ValueError(f"oar_noise_draws must be an int >= 1, got {self.oar_noise_draws!r}")
        _check_choice("oar_noise_scale", self.oar_noise_scale, ("absolute", "rms"))
        if int(self.perturbation_batch_size) < 1:
            raise ValueError(f"perturbation_batch_size must be >= 1, got {self.perturbation_batch_size}")
        if not 0.0 < float(self.oar_gp_fraction) <= 1.0:  # oar-gp
            raise ValueError(f"oar_gp_fraction must be in (0, 1], got {self.oar_gp_fraction}")
        if not float(self.entropy_alpha) >= 0.0:
            raise ValueError(f"entropy_alpha must be >= 0, got {self.entropy_alpha}")
        check_kappa(self.entropy_kappa, "entropy_kappa")
        check_grail_options(  # credit="grail"
            self.grail_mu,
            self.grail_sigma,
            self.grail_min,
            self.grail_max,
            self.grail_rollouts,
            names=("grail_mu", "grail_sigma", "grail_min", "grail_max", "grail_rollouts"),
        )
        check_branching(self.first_error_branching, "first_error_branching")
        check_decode(self.first_error_decode, "first_error_decode")
        if int(self.probe_warmup_steps) < 0:
            raise ValueError(f"probe_warmup_steps must be >= 0, got {self.probe_warmup_steps}")
        if self.answer_pattern is not None:
            try:
                compile_answer_pattern(self.answer_pattern)  # the probes' own check, run early
            except ValueError as err:
                raise ValueError(f"answer_pattern: {err}") from err
        if self.mask_token_id is not None and int(self.mask_token_id) < 0:
            raise ValueError(
                f"mask_token_id must be a token id >= 0 or None (the pad id), got {self.mask_token_id}"
            )
        super().__post_init__()

    def _apply_rule_config(self) -> None:
        """Set the fields the credit rule's `config` names where they are at their default; a value the
        user set to something else is an error (never silently replaced)."""
        defaults = {f.name: f.default for f in fields(self) if f.default is not MISSING}
        for key, value in rule_config(self.credit).items():
            current = getattr(self, key)
            if current == defaults[key]:
                setattr(self, key, value)
            elif current != value:
                raise ValueError(
                    f"credit={self.credit!r} sets {key}={value!r}, but {key}={current!r} was given; leave "
                    f"{key} at its default or use another credit mode"
                )


def rule_config(credit: str) -> dict[str, Any]:
    """The `OARConfig` fields credit rule `credit` sets (its registered `config`); ValueError naming the
    rule, the key and the nearest fields for a key that is not an `OARConfig` field with a default."""
    import difflib

    spec = credits.CREDIT_MODES.get(credit)
    config = dict(spec.config) if spec is not None else {}
    valid = [f.name for f in fields(OARConfig) if f.default is not MISSING]
    for key in config:
        if key not in valid:
            near = difflib.get_close_matches(str(key), valid, n=3)
            raise ValueError(
                f"credit rule {credit!r} sets {key!r}, which is not an OARConfig field"
                + (f" (did you mean {', '.join(near)}?)" if near else "")
                + "; its config= may set any OARConfig field with a default (e.g. tau, oar_beta, floor)"
            )
    return config


def oar_defaults() -> dict[str, Any]:
    """`OARConfig`'s plain defaults (every field with a `default`), the settings the analyses score with
    (a rule's `options` read τ, the scorers' options, ... from them as the trainer does from its config)."""
    return {f.name: f.default for f in fields(OARConfig) if f.default is not MISSING}


def _check_choice(name: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"{name}={value!r} is not valid; choose one of {', '.join(valid)}")


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not (low <= float(value) <= high):
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {value}")
