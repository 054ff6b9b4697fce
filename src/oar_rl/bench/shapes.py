"""Model shapes for `oar-rl bench`: the embedded model, and random-initialised Qwen2-shaped models.

A shape is what the benchmark needs to build one fresh policy per credit mode (same seed, same
weights) plus a tokenizer, a prompt set and a reward:

- ``embedded``: the warm-started default model on the arithmetic task with its exact reward (real
  completions, lengths vary).
- ``wordproblems``: the shipped word-problem warm start on its task (the credit screen's testbed; real
  reasoning of 55-100 tokens and wrong rollouts, so first-error's search has rows to search).
- ``wordproblems-long``: the long-chain regime's shipped warm start on its task (issue 33; ~180 reasoning
  tokens, completions of up to 320, most rollouts wrong).
- ``wordproblems-smollm2``: the pretrained regime (issue 58): SmolLM2-135M-Instruct's LoRA SFT warm start,
  merged, on its task's chat-template prompts (real completions of up to 128 tokens; ~82 on average).
  Built or read from the cache by `oar-rl warm-start --task wordproblems-smollm2`. A step of 8 x 8 rows
  needs ``--micro-batch 8`` on a 24 GB machine, as the study's update runs.
- ``qwen2-30m``: Qwen2's architecture (GQA, RMSNorm, RoPE, SwiGLU, tied embeddings) at 29.1M
  parameters: hidden 384, 6 layers, 6 heads / 2 KV heads, MLP 2048, vocabulary 32,768 (the one
  departure from Qwen2's 151,936, so the LM head does not dwarf a body this small: embeddings are
  43% of the parameters here, 28% in Qwen2.5-0.5B). float32, for the CPU.
- ``qwen2-10m``: Qwen2's architecture at 9.97M parameters, body-heavy as real Qwen2 models are
  (embeddings 21% of the parameters; 28% in Qwen2.5-0.5B, 15% in 1.5B): hidden 256, 8 layers, 4 heads /
  2 KV heads, MLP 1024, vocabulary 8,192. float32, for the CPU. The shape of OAR-G's cost target
  (``--problems 1 --samples 4 --prompt-len 32 --completion-len 128``).
- ``qwen2-tiny``: the same at 40k parameters, for smoke tests.
- ``qwen2.5-0.5b`` / ``qwen2.5-1.5b``: Qwen2.5-0.5B / 1.5B configurations (vocabulary 151,936), random
  weights, bfloat16, SDPA attention; for a GPU.

Random shapes use a synthetic word-level tokenizer ("t0" … "t{V-1}", ids 0-3 special), prompts of
``prompt_len`` random tokens, completions forced to exactly ``completion_len`` tokens
(``min_new_tokens``), and a deterministic pseudo-random reward in [0, 1) from a hash of the completion
text, so every group has a non-zero advantage spread and every row is scored, as in a real run where
rewards vary.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from oar_rl.tasks.pretrained import SYSTEM_PROMPT  # the pretrained regime's system line (issue 58)

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2-30m": dict(
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=2,
        intermediate_size=2048,
        vocab_size=32768,
        dtype="float32",
        attn="sdpa",
    ),
    "qwen2-10m": dict(
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=1024,
        vocab_size=8192,
        dtype="float32",
        attn="sdpa",
    ),
    "qwen2-tiny": dict(  # smoke tests only
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=256,
        dtype="float32",
        attn="sdpa",
    ),
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
        dtype="bfloat16",
        attn="sdpa",
    ),
    "qwen2.5-1.5b": dict(
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
        dtype="bfloat16",
        attn="sdpa",
    ),
}
WARM_STARTS: dict[str, str] = {
    "embedded": "arithmetic",
    "wordproblems": "wordproblems",
    "wordproblems-long": "wordproblems-long",
    "wordproblems-smollm2": "wordproblems-smollm2",
}
"""Shapes that train a warm start on its own task: shape -> task (and `--model` name). The pretrained
regime's warm start is built or read from the cache by its task (`oar-rl warm-start`)."""
_WARM_START_NAMES = {
    "embedded": "embedded default model",
    "wordproblems": "shipped word-problem warm start",
    "wordproblems-long": "shipped long-chain word-problem warm start",
    "wordproblems-smollm2": "pretrained regime's warm start (SmolLM2-135M-Instruct, LoRA SFT merged)",
}
PRETRAINED: dict[str, str] = {"smollm2-135m": "wordproblems"}
"""Pretrained models by name (`oar-rl fetch-model`): shape -> the task whose train prompts it answers,
in the model's own chat template with a system line asking for the task's answer tag."""
SHAPE_NAMES: tuple[str, ...] = (*WARM_STARTS, *PRETRAINED, *SHAPES)
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")


@dataclass
class Shape:
    """Everything one benchmark run needs besides the credit mode."""

    name: str
    tokenizer: Any
    dataset: Any
    reward: Any
    make_model: Any  # () -> a fresh policy (same weights every call), or a model directory path
    description: str
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"
    num_parameters: int = 0


def synthetic_tokenizer(vocab_size: int):
    """A word-level fast tokenizer over "t0" … "t{V-1}" with <pad>, <unk>, <s>, </s> at ids 0-3."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"t{i}": i for i in range(len(SPECIALS), vocab_size)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def hash_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """Deterministic pseudo-random reward in [0, 1) from the completion text (bench only)."""
    from oar_rl.rewards import completion_text

    return [zlib.crc32(completion_text(c).encode()) / 2**32 for c in completions]


def qwen2_config(name: str, vocab_size: int | None = None):
    from transformers import Qwen2Config

    spec = dict(SHAPES[name])
    dtype, attn = spec.pop("dtype"), spec.pop("attn")
    if vocab_size is not None:
        spec["vocab_size"] = vocab_size
    cfg = Qwen2Config(
        **spec,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        use_sliding_window=False,
    )
    cfg._attn_implementation = attn
    return cfg, dtype


def build_shape(
    name: str, *, prompt_len: int, completion_len: int, rows: int, seed: int, model_dir: str | None,
    cache_dir: str | None = None,
):  # fmt: skip
    """The :class:`Shape` `name` with `rows` prompts available."""
    import torch

    if name in WARM_STARTS:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from oar_rl.fetch import resolve_model
        from oar_rl.tasks import get_task

        task_name = WARM_STARTS[name]
        task = get_task(task_name)  # the warm start's own task (its train split has a gold "answer")
        if model_dir is None and task.data_task is not None:  # a pretrained regime: its task's warm start
            path = str(task.load_warm_start("default", cache_dir).path)
        else:
            path = resolve_model(model_dir or task_name, cache_dir)  # the warm start by default
        tok = AutoTokenizer.from_pretrained(path)
        n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())
        what = _WARM_START_NAMES[name]
        return Shape(
            name=name,
            tokenizer=tok,
            dataset=task.dataset("train", limit=rows),
            reward=task.reward,
            make_model=lambda: path,
            description=f"{what} ({n / 1e6:.2f}M parameters, {task_name} task)",
            num_parameters=n,
        )
    if name in PRETRAINED:
        return _pretrained_shape(name, rows, completion_len)
    if name not in SHAPES:
        raise ValueError(f"--shape {name!r} is not known; valid: {', '.join(SHAPE_NAMES)}")
    from datasets import Dataset
    from transformers import Qwen2ForCausalLM

    cfg, dtype = qwen2_config(name)
    tok = synthetic_tokenizer(cfg.vocab_size)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIALS), cfg.vocab_size, (rows, prompt_len), generator=g)
    prompts = [" ".join(f"t{i}" for i in row) for row in ids.tolist()]

    def make_model():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen2ForCausalLM(cfg)
        return model.to(getattr(torch, dtype))

    n_params = _count_params(cfg)
    return Shape(
        name=name,
        tokenizer=tok,
        dataset=Dataset.from_dict({"prompt": prompts}),
        reward=hash_reward,
        make_model=make_model,
        description=(
            f"random Qwen2-shaped {name} ({n_params / 1e6:.1f}M parameters: hidden {cfg.hidden_size}, "
            f"{cfg.num_hidden_layers} layers, {cfg.num_attention_heads}/{cfg.num_key_value_heads} heads, "
            f"V={cfg.vocab_size}), {dtype}, {cfg._attn_implementation}"
        ),
        generation_kwargs={"min_new_tokens": completion_len},
        dtype=dtype,
        num_parameters=n_params,
    )


def _count_params(cfg) -> int:
    """Parameters of a tied Qwen2 of config `cfg` (without building it)."""
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = cfg.num_key_value_heads * (H // cfg.num_attention_heads)
    attn = H * H + H + 2 * (H * kv + kv) + H * H  # q (bias), k, v (bias), o
    mlp = 3 * H * I
    return cfg.vocab_size * H + L * (attn + mlp + 2 * H) + H


def _pretrained_shape(name: str, rows: int, completion_len: int) -> Shape:
    """A pretrained model by name (converted offline by `oar-rl fetch-model`), on its task's train prompts as
    chat messages; completions run to the full budget (`min_new_tokens`) so every method generates the
    same number of tokens."""
    from datasets import Dataset
    from transformers import AutoConfig, AutoTokenizer

    from oar_rl.fetch import resolve_model
    from oar_rl.tasks import get_task

    task = get_task(PRETRAINED[name])
    path = resolve_model(name)
    cfg = AutoConfig.from_pretrained(path)
    data = task.dataset("train", limit=rows)
    prompts = [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": p}]
               for p in data["prompt"]]  # fmt: skip
    head = cfg.hidden_size // cfg.num_attention_heads
    n = (
        cfg.vocab_size * cfg.hidden_size
        + cfg.num_hidden_layers
        * (
            2 * cfg.hidden_size * cfg.hidden_size
            + 2 * cfg.hidden_size * cfg.num_key_value_heads * head
            + 3 * cfg.hidden_size * cfg.intermediate_size
            + 2 * cfg.hidden_size
        )
        + cfg.hidden_size
    )  # tied embeddings, no biases (Llama)
    return Shape(
        name=name,
        tokenizer=AutoTokenizer.from_pretrained(path),
        dataset=Dataset.from_dict({"prompt": prompts, "answer": data["answer"]}),
        reward=task.reward,
        make_model=lambda: path,
        description=(
            f"pretrained {name} ({n / 1e6:.1f}M parameters, {cfg.model_type}), float32, "
            f"{PRETRAINED[name]} prompts in its chat template"
        ),
        generation_kwargs={"min_new_tokens": completion_len},
        num_parameters=n,
    )
