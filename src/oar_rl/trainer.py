"""The TRL seam: `OARConfig(GRPOConfig)` and `OARTrainer(GRPOTrainer)`.

`OARTrainer` overrides one method, `_generate_and_score_completions`: it calls TRL's, which generates,
scores and returns the sequence advantages A_i (B,), then replaces them by token advantages A_t (B, C)
(paper Eq. 15; TRL's `_compute_loss` accepts (B, C) advantages by design). Generation, vLLM, the
clipped loss with clip-higher (Eq. 18), accelerate/DeepSpeed, PEFT, logging and checkpoints are TRL's;
a colocated vLLM engine whose weights are packed (vLLM's CPU backend) is synced through vLLM's
`reload_weights` instead of TRL's per-tensor `load_weights` (`oar_rl.vllm_sync`).
The math lives in `oar_rl.reshape` / `oar_rl.metrics`, the scorers in `oar_rl.importance` (which one each
credit mode uses, and how it reshapes, in the registry `oar_rl.credits`), the answer spans in
`oar_rl.probes`; this module is glue.

Credit modes (`OARConfig.credit`):

- ``none``: plain GRPO. The advantages are left exactly as TRL made them (shape (B,)), so the run is
  bit-identical to `GRPOTrainer`; only the credit metrics are logged (ESS 1.0, top-10% mass ≈ K/T).
- ``random``: w ~ U(0, 1) per token, rescaled to sum to T_i (Eq. 17), A_t = A_i·w̃_t (paper §4.2).
- ``entropy``: Eq. 6, A_t = A_i + min(α·H_t, |A_i|/κ) (Cheng et al. 2025), H_t from the old policy.
- ``oar-g`` / ``oar-p``: gradient (Eq. 9–13) or perturbation (Eq. 7–8) importance, then Eq. 14–17.
- ``first-error`` (not in the paper, issue 26): a wrong rollout's first token after which the policy's
  own greedy continuation no longer reaches the gold answer (binary search,
  `oar_rl.importance.first_error`) gets importance 1, the others 0, then Eq. 14-17; correct rollouts stay
  uniform. It reads the gold answer from the dataset column `gold_column` and checks continuations with
  the trainer's `answer_check` (default: the math-verify accuracy reward).
- ``oar-gp`` (not in the paper): OAR-G ranks every token, OAR-P rescores each row's top
  `oar_gp_fraction` (`oar_rl.importance.hybrid`), then Eq. 14–17.
- ``grail``: GRAIL (Pala, Toh & Poria 2026): A_t = A_i·clamp(μ_w + σ_w·z_t, w_min, w_max), z_t the z-scored
  log-saliency of the answer span's NLL, on the rollouts `grail_rollouts` selects (default: A_i < 0); no
  renormalisation. Rows without an answer span keep weight 1 and are logged as oar/probe_fallback_frac.
  See `oar_rl.importance.grail` for how it departs from OAR.
- ``position`` (issue 33): the token's index in the reasoning, no model, then Eq. 14-17: the control for
  "OAR only weights late tokens".
- ``oar-p-span`` (issue 33): OAR-P with each reasoning step (sentence or line) masked as one unit
  (`oar_rl.importance.span`), then Eq. 14-17.
- ``entropy-80-20`` (issue 33): TRL's own `top_entropy_quantile` = 0.2 (set by the rule's `config`), with
  GRPO's advantages left as they are.
- any rule registered with `oar_rl.register_credit` (from the user's file: `credit_module`): its scorer
  through the reshaping it names; the generic path below (`_score`) serves every rule except the
  built-in entropy and GRAIL paths (which need other batches), and its scores are checked on every call
  (`oar_rl.credits.check_scores`). Every rule gets one `oar_rl.credits.ScoringContext`, outcome included:
  the rows' gold answers (`gold_column`), the answer check, the rows' sequence advantages and the
  completion budget; no branch here names a rule.

Where this departs from the paper or from TRL, and why:

- Importance is computed once per *generation batch*, on the policy that generated it (the weights
  before any optimizer step on the batch, i.e. π_old), and reused for every micro-batch and every
  `num_iterations` pass. The authors' fragment recomputed it with the live model at each micro-step.
- Scorers run with the model in eval mode (no dropout noise in the attribution); the training mode is
  restored afterwards, so TRL's train/eval detection is unaffected.
- Rows whose sequence advantage is exactly 0 (and rows with no loss token, e.g. masked truncated
  completions) are not scored: their token advantages are 0 whatever the weights.
- Only the *reasoning* tokens are scored and reshaped (`scored_tokens="reasoning"`, the default): the
  tokens before the format that introduces the answer (the ``<answer>`` tag, ``\\boxed{``, "The final answer
  is"). The paper's T is the reasoning; the format sits next to the probe, took each row's top score and
  squeezed the reasoning's min-max range (issue 26). The format, the answer and later tokens keep weight 1.
  Answer-span probes (AS-Mean, AS-Joint) read the span; `scored_tokens="before-answer"` restores the
  earlier behaviour (every token before the span is scored).
- `reshape_rows` may restrict reshaping to rows with A_i > 0 or A_i < 0 (not in the paper; a control of
  issue 26); the other rows keep GRPO's uniform advantage and are not scored.
- During the first `probe_warmup_steps` optimizer steps LT-Logits is used instead of an answer-span probe
  (paper §6.2: "we initially apply LT-LOGITS as a warm-up").
- Multi-turn tool outputs (`tool_mask`) are not trained by TRL; they get weight 0 here and the
  remaining tokens share the row's token count.
- Random draws (random credit, OAR-G noise) come from dedicated CPU generators, one per row, seeded
  from (`seed`, optimizer step, batch within the step, global row index), never from the global RNG:
  the credit mode does not change TRL's sampling or shuffling stream, a resumed run redraws the same
  noise, and an N-process run draws the same noise as a one-process run (`oar_rl.distributed`).
  Evaluation batches count, and key, their draws apart from training's: evaluating during training (or
  not, or at other steps) leaves training's noise unchanged, and a run resumed from a checkpoint saved
  after an evaluation draws what the uninterrupted run draws.
- Distributed: the model is unwrapped as TRL does for generation (`unwrap_model_for_generation`,
  gathering ZeRO-3 parameters). Ranks score different numbers of rows; under FSDP (1 and 2), whose
  forwards are collective, the ranks' scoring passes run in lockstep, padded with dummy passes
  (`oar_rl.distributed.ScoringSync`), for every credit mode. ZeRO-3 with
  `ds3_gather_for_generation=False` is still rejected for the model-based credit modes: its LM head is
  sharded and called a rank-dependent number of times.
- Vision-language inputs are not supported by the scorers (they take token ids only).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from oar_rl.answer_span import answer_masks
from oar_rl.config import OARConfig
from oar_rl.credit_logging import BOOST_EPS, CreditLogging
from oar_rl.credits import CREDIT_MODES, ScoringContext, run_scorer
from oar_rl.distributed import ScoringSync, row_generators, scoring_params
from oar_rl.importance.first_error import recording
from oar_rl.importance.grail import grail_rows
from oar_rl.probes import ANSWER_SPAN_PROBES, prepare_batch
from oar_rl.reshape import entropy_shaped_advantages, grail_token_advantages, rescale_sum, token_advantages
from oar_rl.vllm_sync import extra_llm_kwargs, kept_torch_threads, llm_options, use_reload_sync


def _safe_rewards(funcs: Any) -> Any:
    """Wrap plain synchronous reward callables with `safe_reward` (models, Hub ids and async ones as is)."""
    from trl.trainer.utils import is_async_callable

    from oar_rl.rewards import safe_reward

    def wrap(fn: Any) -> Any:
        if isinstance(fn, (str, torch.nn.Module)) or not callable(fn) or is_async_callable(fn):
            return fn
        return fn if getattr(fn, "__oar_safe__", False) else safe_reward(fn)

    return [wrap(f) for f in funcs] if isinstance(funcs, list) else wrap(funcs)


@dataclass
class TokenCredit:
    """Result of one credit assignment over a generation batch (all on the batch's device).

    advantages: (B, C) token advantages (0 on padding and on rows with A_i = 0).
    weights: (B, C) effective per-token weights A_t / A_i (1 on valid tokens of unscored rows).
    fallback: (B,) bool, answer-span probe requested but the row has no span (LT-Logits was used).
    active: (B,) bool, rows whose credit matters (A_i != 0 and at least one loss token).
    """

    advantages: torch.Tensor
    weights: torch.Tensor
    fallback: torch.Tensor
    active: torch.Tensor
    importance: torch.Tensor | None = None
    """(B, C) the credit mode's raw importance signal (0 on unscored rows); None for plain GRPO."""


class OARTrainer(CreditLogging, GRPOTrainer):
    """`GRPOTrainer` with token-level credit assignment (see the module docstring).

    Use it exactly like `GRPOTrainer`, with an `OARConfig` as `args`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # token_roles (oar-rl): optional labeller `completion text -> per-char roles | None` (see
        # oar_rl.roles); when given, ground-truth credit metrics are logged every step.
        self._oar_token_roles = kwargs.pop("token_roles", None)
        # answer_check (oar-rl): (completion text, gold) -> correct, every rule's ScoringContext.check
        # (first-error's continuations); default: the math-verify accuracy reward
        self._oar_answer_check = kwargs.pop("answer_check", None)
        if self._oar_answer_check is not None and not callable(self._oar_answer_check):
            raise ValueError(
                f"answer_check must be a callable (text, gold) -> bool, got {self._oar_answer_check!r}"
            )
        self._oar_inputs: list[dict[str, Any]] = []
        if self._oar_token_roles is not None and not callable(self._oar_token_roles):
            raise ValueError(f"token_roles must be a callable text -> roles, got {self._oar_token_roles!r}")
        config = args[2] if len(args) > 2 else kwargs.get("args")
        if getattr(config, "safe_rewards", False):
            if len(args) > 1:
                args = (args[0], _safe_rewards(args[1]), *args[2:])
            elif kwargs.get("reward_funcs") is not None:
                kwargs["reward_funcs"] = _safe_rewards(kwargs["reward_funcs"])
        colocated = isinstance(config, OARConfig) and config.use_vllm and config.vllm_mode == "colocate"
        with contextlib.ExitStack() as engine:  # a colocated vLLM engine: its options and our threads
            if colocated:
                options = llm_options(config.vllm_enforce_eager, config.vllm_dtype)
                engine.enter_context(extra_llm_kwargs(options))
                engine.enter_context(kept_torch_threads())
            super().__init__(*args, **kwargs)
        if not isinstance(self.args, OARConfig):
            raise ValueError(f"OARTrainer needs an OARConfig as `args`, got {type(self.args).__name__}")
        # a colocated engine with packed weights (vLLM's CPU backend) is synced with reload_weights
        self.vllm_reload_sync = self.use_vllm and use_reload_sync(self.vllm_generation)
        zero3_sharded = self._dist.is_zero3 and not self.args.ds3_gather_for_generation
        mode = CREDIT_MODES[self.args.credit]
        if mode.needs_model and mode.reshape != "none" and zero3_sharded:
            raise ValueError(
                f"credit={self.args.credit!r} under DeepSpeed ZeRO-3 needs "
                "ds3_gather_for_generation=True (the importance passes run on gathered parameters; "
                "sharded forwards are collective)."
            )
        active_adapter = getattr(self.accelerator.unwrap_model(self.model), "active_peft_config", None)
        if (
            mode.needs_model
            and mode.reshape != "none"
            and getattr(active_adapter, "is_prompt_learning", False)
        ):
            raise ValueError(
                f"credit={self.args.credit!r} cannot score a PEFT prompt-learning adapter "
                f"({type(active_adapter).__name__}): the scorers run the base model's decoder, without the "
                "adapter's virtual tokens, so they would score another policy than the one that sampled. "
                "Use LoRA (or another adapter injected into the layers), or a credit mode without a model "
                "pass (none, random, position)."
            )
        # per stream ("train", "eval"): (optimizer step, generation batches at that step)
        self._oar_rng_keys: dict[str, tuple[int, int]] = {}
        self._oar_fallback_warned = False
        self._oar_zero_weights_warned = False

    # ------------------------------------------------------------------------------------------------
    # the seam
    # ------------------------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._oar_inputs = inputs  # this process's rows, one per completion (ScoringContext.gold)
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        reshaped = CREDIT_MODES[self.args.credit].reshape != "none"
        if reshaped and "pixel_values" in output:
            raise ValueError(f"credit={self.args.credit!r} does not support vision inputs; use credit='none'")
        mask = output["completion_mask"].bool()  # (B, C)
        if "tool_mask" in output:
            mask = mask & output["tool_mask"].bool()  # (B, C): TRL trains only non-tool tokens
        start = time.perf_counter()
        with recording() as search:  # greedy continuations of any rule that runs the first-error locator
            credit = self._assign_credit(output, mask)
        seconds = time.perf_counter() - start
        self._log_credit(mode, credit, mask, seconds)
        if search.calls:
            self._metrics[mode]["oar/search_tokens"].append(float(search.generated_tokens))
            self._metrics[mode]["oar/search_continued_tokens"].append(float(search.continued_tokens))
            self._metrics[mode]["oar/search_continuations"].append(float(search.continuations))
        if self._oar_token_roles is not None:  # token_roles (oar-rl): ground-truth credit metrics
            self._log_roles(mode, credit, mask, output)
        if reshaped:
            output["advantages"] = credit.advantages  # (B, C); TRL splits/shuffles it along dim 0
        return output

    # ------------------------------------------------------------------------------------------------
    # glue
    # ------------------------------------------------------------------------------------------------
    def _assign_credit(self, output: dict[str, Any], mask: torch.Tensor) -> TokenCredit:
        """(B,) sequence advantages -> (B, C) token advantages for `self.args.credit`."""
        args = self.args
        spec = CREDIT_MODES[args.credit]
        reshape = spec.reshape  # how this mode's scores become token advantages
        seq_adv = output["advantages"].float()  # (B,)
        token_adv = seq_adv[:, None] * mask  # (B, C): plain GRPO broadcast
        weights = mask.float()  # (B, C)
        fallback = torch.zeros_like(seq_adv, dtype=torch.bool)  # (B,)
        active = (seq_adv != 0) & mask.any(dim=1)  # (B,): rows whose credit matters
        if reshape == "none":  # plain GRPO advantages (entropy-80-20's effect is TRL's entropy mask)
            return TokenCredit(token_adv, weights, fallback, active)
        reshaped = active  # (B,): rows this mode reshapes
        if args.reshape_rows == "positive":
            reshaped = active & (seq_adv > 0)
        elif args.reshape_rows == "negative":
            reshaped = active & (seq_adv < 0)
        rows = reshaped.nonzero(as_tuple=True)[0]  # (R,)
        signal = torch.zeros_like(weights)  # (B, C): the raw importance, for TokenCredit.importance
        sub_mask = mask[rows]  # (R, C)
        importance, scored_mask = None, None  # (R, C) raw scores; (R, C) the tokens they reweight
        keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        sub = {k: output[k][rows] for k in keys}
        if not spec.needs_model:  # e.g. random, position: no policy pass, nothing to gather or sync
            # row-keyed draws (oar_rl.distributed); the batch counts on every rank, also with no row
            generators = self._credit_generators(rows, len(seq_adv)) if spec.noisy else []
            if rows.numel():
                importance, scored_mask = self._score(None, sub, rows, seq_adv[rows], generators, fallback)
        else:
            # Every rank enters the unwrap context (ZeRO-3 gathers collectively), even with no row to
            # score, and keeps its scoring passes in lockstep with the others (FSDP forwards are collective).
            sync = self._scoring_sync()
            # drawn on every rank for every batch (also with no row): the batch counter keys the noise
            generators = self._credit_generators(rows, seq_adv.shape[0]) if spec.noisy else []
            with self._policy_for_scoring() as model, sync.joined(model):
                if rows.numel():
                    importance, scored_mask = self._score(
                        model, sub, rows, seq_adv[rows], generators, fallback
                    )
        if importance is None:  # no row to score (on this rank; it ran padding passes only)
            return TokenCredit(token_adv, weights, fallback, active, None if reshape == "grail" else signal)
        # --- the one place where scores become token advantages, for every credit mode ---
        importance = importance.float().to(mask.device)  # (R, C); detached by check_scores
        if reshape in ("uniform", "weights"):  # over the scored tokens; the others keep weight 1
            scored = sub_mask if scored_mask is None else scored_mask.to(mask.device) & sub_mask  # (R, C)
            # uniform: Eq. 17 on the raw scores; weights: the scores are the weights
            w = rescale_sum(importance, scored) if reshape == "uniform" else importance
            if reshape == "weights":
                self._warn_zero_weights(importance, scored)
            w_rows = torch.where(scored, w, sub_mask.float())  # (R, C)
            adv_rows = seq_adv[rows, None] * w_rows
        elif reshape == "grail":  # GRAIL's weights on the rollouts it selects, no Eq. 14-17
            adv_rows, w_rows = grail_token_advantages(
                seq_adv[rows],
                importance,
                sub_mask,
                scored_mask.to(mask.device),
                rollouts=args.grail_rollouts,
                mu=args.grail_mu,
                sigma=args.grail_sigma,
                w_min=args.grail_min,
                w_max=args.grail_max,
            )  # (R, C), (R, C)
        elif reshape == "entropy":  # Eq. 6
            adv_rows = entropy_shaped_advantages(
                seq_adv[rows], importance, sub_mask, alpha=args.entropy_alpha, kappa=args.entropy_kappa
            )  # (R, C)
            w_rows = adv_rows / seq_adv[rows, None]  # A_t / A_i >= 0: the bonus keeps the sign
        else:  # bi-level: Eq. 14-17
            adv_rows, w_rows = token_advantages(
                seq_adv[rows],
                importance,
                sub_mask,
                scored_mask=None if scored_mask is None else scored_mask.to(mask.device),
                tau=args.tau,
                beta=args.oar_beta,
                threshold=args.threshold,
                floor=args.floor,
            )  # (R, C), (R, C)
        token_adv[rows] = adv_rows
        weights[rows] = w_rows
        if reshape == "grail":  # GRAIL's saliency is not reported as a signal (no pivot recall)
            return TokenCredit(token_adv, weights, fallback, active)
        signal[rows] = importance
        return TokenCredit(token_adv, weights, fallback, active, signal)

    def _scoring_sync(self) -> ScoringSync:
        """Lockstep scoring passes across ranks when forwards are collective (oar_rl.distributed)."""
        before = None
        if self._dist.fsdp_version == 2:
            before = self.model_wrapped.unshard  # a no-op while the root is gathered
        return ScoringSync(self.accelerator, collective=self._dist.is_fsdp, before=before)

    def _score(
        self,
        model: torch.nn.Module,
        sub: dict[str, torch.Tensor],
        rows: torch.Tensor,
        seq_adv: torch.Tensor,
        generators: list[torch.Generator],
        fallback: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(R, C) raw scores of the rows `rows` by the credit mode's scorer, and the (R, C) tokens they
        reweight (None: every valid token). One `ScoringBatch` is built (and validated) for the scorer."""
        args = self.args
        mode = CREDIT_MODES[args.credit]
        batch_size = (  # rows per forward pass: the micro-batch size TRL itself uses for its no-grad passes
            args.per_device_train_batch_size if self.model.training else args.per_device_eval_batch_size
        )
        probe = self._probe() if mode.probe else "lt-logits"
        ctx = ScoringContext(  # the same context for every rule, built-in or from a user's file
            settings=vars(args), probe=probe, generator=generators, batch_size=batch_size,
            temperature=args.temperature, tokenizer=self.processing_class, gold=self._gold(rows),
            check=self._answer_check(), advantages=seq_adv, max_new_tokens=int(args.max_completion_length),
        )  # fmt: skip
        if mode.reshape == "entropy":  # H of the sampling distribution over every token (Eq. 6's paper)
            batch = prepare_batch(model, *sub.values())
            return run_scorer(mode, model, batch, ctx), None
        if mode.reshape == "grail":  # GRAIL always reads the answer span, whatever `probe` says
            answer_mask, reasoning = self._token_masks(
                sub["completion_ids"], sub["completion_mask"], span=True
            )
            fallback[rows] = ~answer_mask.any(dim=1)  # no span: weight 1
            batch = prepare_batch(model, *sub.values(), answer_mask, reasoning)
            selected, reasoning = grail_rows(batch, seq_adv, args.grail_rollouts)  # (R,), (R, C)
            ctx = ctx.rows(selected.tolist())  # the scorer sees the selected rows only, in order
            return run_scorer(mode, model, batch, ctx, rows=selected), reasoning  # checked per call
        span = probe in ANSWER_SPAN_PROBES  # a rule without a probe reads none (lt-logits)
        answer_mask, reasoning = self._token_masks(sub["completion_ids"], sub["completion_mask"], span=span)
        if span:
            fallback[rows] = ~answer_mask.any(dim=1)
        # every rule, built-in or registered from the user's file: its scorer, its options, checked
        batch = prepare_batch(model, *sub.values(), answer_mask if span else None, reasoning)
        return run_scorer(mode, model, batch, ctx), batch.scored(probe)

    def _gold(self, rows: torch.Tensor) -> list[str] | None:
        """The gold answers of local rows `rows` (their dataset column `gold_column`); None if a row has
        none (a rule that needs them says so, naming the column: `ScoringContext.need`)."""
        column = self.args.gold_column
        gold = []
        for r in rows.tolist():
            example = self._oar_inputs[r] if r < len(self._oar_inputs) else {}
            if example.get(column) is None:
                return None
            gold.append(str(example[column]))
        return gold

    def _answer_check(self):
        """(text, gold) -> correct: `answer_check` if given, else the math-verify accuracy reward."""
        if self._oar_answer_check is not None:
            return self._oar_answer_check
        from oar_rl.rewards import accuracy_reward

        return lambda text, gold: accuracy_reward([text], answer=[gold])[0] == 1.0

    def _token_masks(
        self, completion_ids: torch.Tensor, completion_mask: torch.Tensor, *, span: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """((R, C) answer span of `answer_pattern` or None, (R, C) reasoning tokens or None), on the batch's
        device: the span when `span`, the reasoning tokens when `scored_tokens="reasoning"` (one decode)."""
        reasoning_only = self.args.scored_tokens == "reasoning"
        if not span and not reasoning_only:
            return None, None
        answer, reasoning = answer_masks(
            completion_ids, completion_mask, self.processing_class, pattern=self.args.answer_pattern
        )
        device = completion_mask.device
        return (answer.to(device) if span else None), (reasoning.to(device) if reasoning_only else None)

    def _probe(self) -> str:
        """The probe in effect at this step (LT-Logits during `probe_warmup_steps`)."""
        probe = self.args.probe
        if probe not in ANSWER_SPAN_PROBES or self.state.global_step < self.args.probe_warmup_steps:
            return "lt-logits"
        return probe

    @contextlib.contextmanager
    def _policy_for_scoring(self) -> Iterator[torch.nn.Module]:
        """The policy as it generated the batch, unwrapped (ZeRO-3 gathered, FSDP root unsharded), in eval
        mode, no checkpointing."""
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            scoring_params(self.model_wrapped, model, self._dist.fsdp_version),
        ):
            was_training = model.training
            model.eval()
            try:
                yield model
            finally:
                model.train(was_training)

    def _credit_generators(self, rows: torch.Tensor, local_batch: int) -> list[torch.Generator]:
        """One CPU generator per row in `rows`, seeded from (seed, optimizer step, batch within the step,
        global row index = rank · local batch + local index; TRL gives every rank an equal slice)."""
        step = int(self.state.global_step)
        stream = "train" if self.model.training else "eval"  # evaluation never moves training's keys
        last_step, count = self._oar_rng_keys.get(stream, (-1, 0))
        count = count + 1 if step == last_step else 0
        self._oar_rng_keys[stream] = (step, count)
        offset = self.accelerator.process_index * local_batch
        global_rows = [offset + int(r) for r in rows.tolist()]
        return row_generators(self.args.seed, step, count, global_rows, stream=stream)


__all__ = ["BOOST_EPS", "OARConfig", "OARTrainer", "TokenCredit"]
