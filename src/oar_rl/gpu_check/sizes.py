"""What `oar-rl gpu-check` builds: its sizes on a GPU and on the CPU, its models, its batches.

On ``cuda`` the sizes are the ones the issues ask for (SmolLM2-135M's shape for training, Qwen2.5-0.5B's for
the cost checks and the OAR-P length search; G = 8, the scorer table at the paper's 1024 completion tokens,
the update-sweep steps at 256); on ``cpu``
every check runs the same code at a tiny size, so the test suite keeps the whole path alive.

Models are random-initialised from configs written here (no download): the same seed gives the same
weights on every device, since they are always initialised on the CPU in float32 and then moved.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from oar_rl.gpu_check.benchlink import synthetic_tokenizer

Arch = Literal["qwen2", "llama"]
ARCHS: tuple[str, ...] = ("qwen2", "llama")

SMOLLM2_135M: dict[str, Any] = dict(  # HuggingFaceTB/SmolLM2-135M's config.json (a Llama)
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
TINY: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
    max_position_embeddings=1024,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


@dataclass(frozen=True)
class Sizes:
    """Every size gpu-check uses on one device kind."""

    device: str
    arch_shape: dict[str, Any]
    arch_shape_name: str
    train_dtype: str  # the training check's model dtype (TRL's bf16 on a GPU; float32 on the CPU)
    train_prompts: int
    train_generations: int
    prompt_len: int
    completion_len: int
    scorer_rows: int
    scorer_prompt_len: int
    scorer_completion_len: int
    scorer_dtypes: tuple[str, ...]
    parity_rows: int
    parity_completion_len: int
    memory_shape: str  # a bench preset
    memory_rows: int
    memory_lengths: tuple[int, ...]  # completion lengths tried in order; stops at the first that fails
    bench_scorers: dict[str, Any] = field(default_factory=dict)  # `oar-rl bench` flags, cost-scorers
    bench_steps: dict[str, Any] = field(default_factory=dict)  # `oar-rl bench` flags, cost-steps
    expected_seconds: dict[str, float] = field(default_factory=dict)  # per check, for the time estimate

    def bench_argv(
        self,
        part: str,
        out: str,
        seed: int,
        threads: int | None = None,
        completion_len: int | None = None,
    ) -> list[str]:
        """`oar-rl bench` argv of `part` ("scorers" or "steps"), with its completion length replaced."""
        if part not in ("scorers", "steps"):
            raise ValueError(f"part={part!r}; valid: 'scorers', 'steps'")
        base = self.bench_scorers if part == "scorers" else self.bench_steps
        flags = dict(base, **({"completion-len": completion_len} if completion_len else {}))
        argv = []
        for k, v in flags.items():
            argv += [f"--{k}"] if v is True else [f"--{k}", str(v)]
        if threads:
            argv += ["--threads", str(threads)]
        return [*argv, "--seed", str(seed), "--out", out]


GPU = Sizes(
    device="cuda",
    arch_shape=SMOLLM2_135M,
    arch_shape_name="SmolLM2-135M",
    train_dtype="bfloat16",
    train_prompts=2,
    train_generations=4,
    prompt_len=16,
    completion_len=32,
    scorer_rows=4,
    scorer_prompt_len=16,
    scorer_completion_len=48,
    scorer_dtypes=("float32", "bfloat16"),
    parity_rows=2,
    parity_completion_len=16,
    memory_shape="qwen2.5-0.5b",
    memory_rows=8,
    # 32736 + the 32-token prompt is the whole 32k context
    memory_lengths=(1024, 2048, 4096, 8192, 12288, 16384, 24576, 32736),
    # The paper's length: one batch of 8 × 1024 tokens, every scorer 3 times (interleaved). Exact OAR-P
    # took 15 s a call and whole-copy OAR-P 24 s on the H100 (2026-11-26); whole copies cost the same at
    # every position, so they are timed on every 8th one and scaled (3 s): ~85 s for the part.
    bench_scorers={
        "shape": "qwen2.5-0.5b",
        "methods": "none,oar-g,oar-p,oar-gp",
        "prompts": 1,
        "num-generations": 8,
        "prompt-len": 32,
        "completion-len": 1024,
        "scorer-repeats": 3,
        "full-stride": 8,
        "scorers-only": True,
    },
    # Paper Fig. 7's metric (update sweep per action token) from 3 interleaved measured steps per method
    # after one warm-up. Steps are generation-bound (transformers' sampling loop, 19-30 ms per decoding
    # step on the H100 at 8 rows); at 256 tokens a step takes 5-8 s and a warm-up 17-20 s, so the part
    # takes ~3 min; at 1024 tokens one warm-up step took ~2 min.
    bench_steps={
        "shape": "qwen2.5-0.5b",
        "methods": "none,oar-g,oar-p,oar-gp",
        "prompts": 1,
        "num-generations": 8,
        "prompt-len": 32,
        "completion-len": 256,
        "warmup": 1,
        "repeats": 3,
        "no-scorers": True,
    },
    # seconds per check on an H200 (2026-11-30 run, 14 credit modes; the H100 run of 2026-11-26, with
    # 11 modes, took 6.1 min)
    expected_seconds={
        "environment": 4.5,
        "train-qwen2": 97.6,
        "train-llama": 85.4,
        "scorer-precision": 6.6,
        "scorer-parity": 5.9,
        "oar-p-max-length": 25.2,
        "cost-scorers": 92.9,
        "cost-steps": 220.5,
    },
)
CPU = Sizes(
    device="cpu",
    arch_shape=TINY,
    arch_shape_name="tiny",
    train_dtype="float32",
    train_prompts=2,
    train_generations=2,
    prompt_len=4,
    completion_len=6,
    scorer_rows=3,
    scorer_prompt_len=4,
    scorer_completion_len=6,
    scorer_dtypes=("float32", "bfloat16"),
    parity_rows=2,
    parity_completion_len=5,
    memory_shape="qwen2-tiny",
    memory_rows=2,
    memory_lengths=(8, 16, 32),
    bench_scorers={
        "shape": "qwen2-tiny",
        "methods": "none,oar-gp",
        "prompts": 1,
        "num-generations": 2,
        "prompt-len": 3,
        "completion-len": 8,
        "scorer-repeats": 3,
        "full-stride": 2,
        "scorers-only": True,
    },
    bench_steps={
        "shape": "qwen2-tiny",
        "methods": "none,oar-gp",  # two worker processes, not four: each imports TRL (~7 s of a CPU)
        "prompts": 1,
        "num-generations": 2,
        "prompt-len": 3,
        "completion-len": 4,
        "warmup": 0,
        "repeats": 3,
        "no-scorers": True,
    },
    expected_seconds={  # this project's shared 2-core CPU
        "environment": 3,
        "train-qwen2": 10,
        "train-llama": 10,
        "scorer-precision": 2,
        "scorer-parity": 1,
        "oar-p-max-length": 1,
        "cost-scorers": 3,
        "cost-steps": 25,
    },
)
SIZES: dict[str, Sizes] = {"cuda": GPU, "cpu": CPU}


def arch_config(arch: str, shape: dict[str, Any]):
    """A Qwen2 or Llama config of `shape`, SDPA attention, pad/bos/eos = 0/2/3 (the bench tokenizer's)."""
    from transformers import LlamaConfig, Qwen2Config

    common = dict(shape, pad_token_id=0, bos_token_id=2, eos_token_id=3, attn_implementation="sdpa")
    if arch == "qwen2":
        return Qwen2Config(**common, use_sliding_window=False)
    if arch == "llama":
        return LlamaConfig(**common, attention_bias=False, mlp_bias=False)
    raise ValueError(f"arch={arch!r} is not known; valid: {', '.join(ARCHS)}")


def build_model(config, seed: int) -> torch.nn.Module:
    """A random-initialised causal LM of `config` in float32 on the CPU (same weights for a seed)."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    return model.eval()


def placed(model: torch.nn.Module, device: str, dtype: str) -> torch.nn.Module:
    """A copy of `model` on `device` in `dtype` (the original stays as it is)."""
    return copy.deepcopy(model).to(device=device, dtype=getattr(torch, dtype))


def tokenizer_for(vocab_size: int):
    """The bench's word-level tokenizer over "t0" … "t{V-1}" (ids 0-3: <pad> <unk> <s> </s>)."""
    return synthetic_tokenizer(vocab_size)


def random_prompts(vocab_size: int, rows: int, length: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab_size, (rows, length), generator=g)
    return [" ".join(f"t{i}" for i in row) for row in ids.tolist()]


def padded_batch(vocab_size: int, rows: int, prompt_len: int, completion_len: int, seed: int, device: str):
    """(prompt_ids, prompt_mask, completion_ids, completion_mask) of random tokens with real padding:
    row b's prompt is left-padded by b tokens and its completion right-padded by b (at least one token
    of each stays), so the masks, positions and per-row lengths are exercised, not only full rows."""
    g = torch.Generator().manual_seed(seed)
    p_ids = torch.randint(4, vocab_size, (rows, prompt_len), generator=g)
    c_ids = torch.randint(4, vocab_size, (rows, completion_len), generator=g)
    p_mask = torch.ones(rows, prompt_len, dtype=torch.long)
    c_mask = torch.ones(rows, completion_len, dtype=torch.long)
    for b in range(rows):
        k = min(b, prompt_len - 1)
        p_ids[b, :k], p_mask[b, :k] = 0, 0
        k = min(b, completion_len - 1)
        if k:
            c_ids[b, -k:], c_mask[b, -k:] = 0, 0
    return [t.to(device) for t in (p_ids, p_mask, c_ids, c_mask)]
