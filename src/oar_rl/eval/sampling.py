"""Sampling for `oar-rl eval`: the transformers and vLLM samplers, and the model's position limit.

Before any sampling, `check_prompt_lengths` compares every pending prompt (as the model will see it, chat
template included) plus ``--max-new-tokens`` with the model's position limit (``max_position_embeddings``
or its equivalent in the model config; vLLM's ``max_model_len``). A prompt that does not fit is a clear
error naming the problems, their lengths and the limit -- transformers would only warn and then sample
from positions the model never saw. ``--truncate-prompts`` left-truncates such prompts instead (their
last tokens, where the question ends, are kept) and says how many it cut.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oar_rl.eval.config import BenchmarkJob, EvalConfig

logger = logging.getLogger(__name__)

POSITION_ATTRIBUTES: tuple[str, ...] = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "seq_length",
    "n_ctx",
    "max_seq_len",
)
"""Model-config attributes holding the position limit, first found wins (GPT-2 says ``n_positions``)."""

MAX_SHOWN = 5


SCALED_ROPE_TYPES: tuple[str, ...] = ("yarn", "linear", "dynamic")
"""RoPE scalings that stretch the trained positions by their ``factor`` (YaRN as Qwen2.5 documents it)."""


def config_position_limit(model_config: Any) -> tuple[int, str] | None:
    """(limit, where it came from) of a transformers model config; None when it declares none.

    The first of `POSITION_ATTRIBUTES`; with a YaRN/linear/dynamic RoPE scaling whose ``factor`` stretches
    ``original_max_position_embeddings`` (or that attribute) further, the stretched length.
    """
    text_config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    for attr in POSITION_ATTRIBUTES:
        value = getattr(text_config, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            break
    else:
        return None
    rope = getattr(text_config, "rope_parameters", None) or getattr(text_config, "rope_scaling", None)
    if isinstance(rope, dict):
        kind, factor = rope.get("rope_type", rope.get("type")), rope.get("factor")
        if kind in SCALED_ROPE_TYPES and isinstance(factor, (int, float)) and factor > 1:
            base = rope.get("original_max_position_embeddings") or value
            if int(factor * base) > value:
                return int(factor * base), f"{kind} RoPE factor {factor} x {base}"
    return value, attr


def check_prompt_lengths(jobs: list[BenchmarkJob], config: EvalConfig, sampler: Any) -> None:
    """ValueError before any sampling when a pending prompt + ``max_new_tokens`` exceeds the positions.

    With ``config.truncate_prompts`` the too-long prompts are only counted (a warning); the sampler
    left-truncates them. A sampler without ``position_limit``/``prompt_lengths`` (a caller's own) is not
    checked; one whose model declares no limit gets a warning saying the check was skipped.
    """
    if not (hasattr(sampler, "position_limit") and hasattr(sampler, "prompt_lengths")):
        return
    found = sampler.position_limit()
    if found is None:
        logger.warning(
            "the model %r declares no position limit (none of %s); prompt lengths are not checked",
            config.model,
            ", ".join(POSITION_ATTRIBUTES),
        )
        return
    limit, source = found
    budget = limit - config.max_new_tokens
    where = f"{limit} positions ({source} of {config.model!r})"
    if budget < 1:
        raise ValueError(
            f"--max-new-tokens {config.max_new_tokens} leaves no room for a prompt: the model has {where}; "
            f"use --max-new-tokens < {limit}"
        )
    too_long: list[tuple[str, int, int]] = []
    for job in jobs:
        pending = [i for i in range(len(job.prompts)) if i not in job.records]
        lengths = sampler.prompt_lengths([job.prompts[i] for i in pending])
        too_long += [(job.key, i, n) for i, n in zip(pending, lengths, strict=True) if n > budget]
    if not too_long:
        return
    shown = ", ".join(f"{key} problem {i} ({n} tokens)" for key, i, n in too_long[:MAX_SHOWN])
    shown += f" and {len(too_long) - MAX_SHOWN} more" if len(too_long) > MAX_SHOWN else ""
    if not config.truncate_prompts:
        raise ValueError(
            f"{len(too_long)} prompt(s) do not fit the model: prompt + --max-new-tokens "
            f"{config.max_new_tokens} must be <= {where}, so a prompt may have at most {budget} tokens; "
            f"too long: {shown}. Lower --max-new-tokens, shorten the prompts, or pass --truncate-prompts "
            f"to keep the last {budget} tokens of each"
        )
    logger.warning(
        "--truncate-prompts: %d prompt(s) are left-truncated to their last %d tokens: %s",
        len(too_long),
        budget,
        shown,
    )


def resolve_chat(config: EvalConfig) -> None:
    """Decide ``config.chat`` when it is None (the default): on when the model's tokenizer has a chat
    template. Runs before anything is hashed or sampled, so results record what was done."""
    if config.chat is not None:
        return
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(config.model, revision=config.revision)
    except Exception as exc:
        raise ValueError(
            f"cannot load the tokenizer of {config.model!r} to see whether it has a chat template ({exc}); "
            "pass --chat or --no-chat"
        ) from exc
    config.chat = bool(getattr(tokenizer, "chat_template", None))
    if config.chat:
        print("[eval] prompts go through the tokenizer's chat template (--no-chat: raw prompts)", flush=True)


def check_chat_template(tokenizer: Any, config: EvalConfig) -> None:
    """ValueError when ``--chat`` is asked for but the tokenizer has no chat template."""
    if config.chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"--chat: the tokenizer of {config.model!r} has no chat template")


def add_special_tokens(config: EvalConfig) -> bool:
    """Whether tokenizing a formatted prompt adds the tokenizer's special tokens: not under ``--chat``,
    whose rendered template already holds them (a second BOS otherwise, as TRL avoids)."""
    return not config.chat


def prompt_ids(tokenizer: Any, prompts: list[str], config: EvalConfig) -> list[list[int]]:
    """The token ids of each prompt as the model sees it (chat template included, one BOS)."""
    formatted = format_prompts(tokenizer, prompts, config)
    return [
        list(ids) for ids in tokenizer(formatted, add_special_tokens=add_special_tokens(config))["input_ids"]
    ]


def format_prompts(tokenizer: Any, prompts: list[str], config: EvalConfig) -> list[str]:
    """The prompts as given, or (``--chat``) each as one user message under the chat template."""
    if not config.chat:
        return prompts
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts
    ]


class TransformersSampler:
    """Batched sampling with ``model.generate`` (left padding); one global seed per call."""

    def __init__(self, config: EvalConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        device = config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(config.model, revision=config.revision)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype: Any = "auto" if config.dtype == "auto" else getattr(torch, config.dtype)
        self.model = (
            AutoModelForCausalLM.from_pretrained(config.model, revision=config.revision, dtype=dtype)
            .to(self.device)
            .eval()
        )
        check_chat_template(self.tokenizer, config)

    def position_limit(self) -> tuple[int, str] | None:
        """(the model's position limit, the config attribute it came from), or None."""
        return config_position_limit(self.model.config)

    def prompt_lengths(self, prompts: list[str]) -> list[int]:
        """Token count of each prompt as the model sees it (chat template included)."""
        return [len(ids) for ids in prompt_ids(self.tokenizer, prompts, self.config)]

    def prompt_budget(self) -> int | None:
        """Tokens a prompt may keep under ``--truncate-prompts`` (left truncation); None: no truncation."""
        found = self.position_limit() if self.config.truncate_prompts else None
        if found is None:
            return None
        self.tokenizer.truncation_side = "left"
        return max(1, found[0] - self.config.max_new_tokens)

    def generate(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        """``n`` completions for each prompt (``len(prompts) * n`` sequences in one generate call)."""
        import torch

        cfg = self.config
        torch.manual_seed(seed)
        prompts = format_prompts(self.tokenizer, prompts, cfg)
        budget = self.prompt_budget()
        enc = self.tokenizer(
            prompts,
            return_tensors="pt",
            padding=True,
            truncation=budget is not None,
            max_length=budget,
            add_special_tokens=add_special_tokens(cfg),
        ).to(self.device)
        input_ids = enc["input_ids"].repeat_interleave(n, dim=0)  # (P*n, L)
        attention_mask = enc["attention_mask"].repeat_interleave(n, dim=0)  # (P*n, L)
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": cfg.top_k}
            if cfg.temperature > 0
            else {"do_sample": False}
        )
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=cfg.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.model.generation_config.eos_token_id or self.tokenizer.eos_token_id,
                **sampling,
            )
        texts = self.tokenizer.batch_decode(out[:, input_ids.shape[1] :], skip_special_tokens=True)
        return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


class VLLMSampler:
    """Sampling with vLLM (``--backend vllm``); every prompt gets its own seed, so batching is irrelevant."""

    def __init__(self, config: EvalConfig) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ValueError("--backend vllm needs vLLM: pip install 'oar-rl[vllm]'") from exc
        self.config = config
        self._params = SamplingParams
        self.llm = LLM(
            model=config.model, revision=config.revision, tokenizer_revision=config.revision,
            seed=config.seed, dtype=config.dtype,
        )  # fmt: skip
        self.tokenizer = self.llm.get_tokenizer()
        check_chat_template(self.tokenizer, config)

    def position_limit(self) -> tuple[int, str] | None:  # pragma: no cover - GPU
        return int(self.llm.llm_engine.model_config.max_model_len), "vLLM max_model_len"

    def prompt_lengths(self, prompts: list[str]) -> list[int]:  # pragma: no cover - GPU
        return [len(ids) for ids in prompt_ids(self.tokenizer, prompts, self.config)]

    def generate(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:  # pragma: no cover - GPU
        cfg = self.config
        truncate = {}
        if cfg.truncate_prompts:  # vLLM keeps the last k prompt tokens
            truncate["truncate_prompt_tokens"] = max(1, self.position_limit()[0] - cfg.max_new_tokens)
        params = [
            self._params(
                n=n,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                top_k=cfg.top_k or -1,
                max_tokens=cfg.max_new_tokens,
                seed=(seed + j) % 2**31,
                **truncate,
            )
            for j in range(len(prompts))
        ]
        # token prompts: given text, vLLM would add the tokenizer's special tokens to a chat template's own
        ids = [{"prompt_token_ids": p} for p in prompt_ids(self.tokenizer, prompts, cfg)]
        outs = self.llm.generate(ids, params, use_tqdm=False)
        return [[o.text for o in out.outputs] for out in outs]


def build_sampler(config: EvalConfig) -> TransformersSampler | VLLMSampler:
    """The sampler for ``config.backend`` (vLLM imported only when chosen)."""
    if config.backend == "transformers":
        return TransformersSampler(config)
    elif config.backend == "vllm":
        return VLLMSampler(config)
    raise ValueError(f"unknown backend {config.backend!r}; valid backends: transformers, vllm")
