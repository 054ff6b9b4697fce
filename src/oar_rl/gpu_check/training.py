"""gpu-check's training check: two `OARTrainer` steps of every credit mode on one architecture.

The model is SmolLM2-135M's shape with random weights (a tiny one on the CPU), as a Qwen2 or a Llama,
SDPA attention, in the dtype a GPU run uses: bf16 weights with TRL's ``bf16=True`` and activation
checkpointing on, as the paper's recipes (``configs/qwen2.5-7b-dapo-*.yaml``) set them. On the CPU the
weights are float32 and ``bf16`` is off (TRL's bf16 does not run on the CPU).

Completions are forced to the full ``max_completion_length`` (``min_new_tokens``) and rewarded by the
bench's pseudo-random hash of their text, so every group has an advantage spread and every row is scored.
``answer_pattern`` is the last word of the completion, so GRAIL (which needs an answer span) scores rows
instead of falling back. Per mode it records: the ``oar/*`` metrics TRL logged (present and finite),
loss and gradient norm (finite), whether the weights moved, the step's seconds and its peak memory
above its starting level (CUDA allocator peak; resident-set high-water mark on the CPU).

The learning rate is 1e-4, not the paper's 1e-6: with bf16 weights a 1e-6 Adam step is below the
weights' rounding step, so nothing would move and "the update reached the weights" could not be checked.
"""

from __future__ import annotations

import math
import tempfile
import time
from typing import Any

import torch

from oar_rl.credits import CREDITS
from oar_rl.gpu_check.benchlink import PeakMemory, hash_reward
from oar_rl.gpu_check.report import error_summary
from oar_rl.gpu_check.sizes import Sizes, arch_config, build_model, placed, random_prompts, tokenizer_for

REQUIRED_METRICS = ("oar/ess_ratio", "oar/top10_mass", "oar/boosted_frac", "oar/importance_seconds")
LEARNING_RATE = 1e-4
STEPS = 2


def _trainer(mode: str, model, tokenizer, dataset, sizes: Sizes, workdir: str, seed: int):
    from oar_rl.config import OARConfig
    from oar_rl.trainer import OARTrainer

    cuda = sizes.device == "cuda"
    config = OARConfig(
        output_dir=workdir,
        credit=mode,
        answer_pattern=r"(t\d+)",  # the last word: every row has a span (GRAIL, answer-span probes)
        per_device_train_batch_size=sizes.train_prompts * sizes.train_generations,
        num_generations=sizes.train_generations,
        max_completion_length=sizes.completion_len,
        generation_kwargs={"min_new_tokens": sizes.completion_len},
        max_steps=STEPS,
        learning_rate=LEARNING_RATE,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=seed,
        use_cpu=not cuda,
        bf16=cuda,
        activation_checkpointing=True,
        disable_tqdm=True,
    )
    trainer = OARTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        reward_funcs=hash_reward,
        processing_class=tokenizer,
        answer_check=hash_check,  # every rule's ScoringContext.check
    )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def _instrument(trainer) -> list[dict[str, float | None]]:
    """Per optimizer step: seconds and peak memory (MiB above the step's start)."""
    from transformers import TrainerCallback

    steps: list[dict[str, float | None]] = []
    memory = PeakMemory()
    sync = torch.cuda.synchronize if memory.cuda else (lambda: None)
    state: dict[str, float] = {}

    class Steps(TrainerCallback):
        def on_step_begin(self, *a, **k):
            memory.start()
            state["t0"] = time.perf_counter()

        def on_step_end(self, *a, **k):
            sync()
            steps.append({"seconds": time.perf_counter() - state["t0"], "peak_mib": memory.peak()})

    trainer.add_callback(Steps())
    return steps


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def hash_check(text: str, gold: str) -> bool:
    """A deterministic stand-in for an answer checker (random weights write no answer): half the texts
    pass, so first-error's binary search runs its greedy continuations."""
    import zlib

    return zlib.crc32(text.encode()) % 2 == 0


def train_mode(mode: str, base, tokenizer, dataset, sizes: Sizes, seed: int) -> dict[str, Any]:
    """Two steps of credit `mode` on a fresh copy of `base`; raises AssertionError naming what is wrong."""
    model = placed(base, sizes.device, sizes.train_dtype)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with tempfile.TemporaryDirectory() as work:
        trainer = _trainer(mode, model, tokenizer, dataset, sizes, work, seed)
        steps = _instrument(trainer)
        trainer.train()
        history = [h for h in trainer.state.log_history if "loss" in h]
    moved = sum(int(not torch.equal(before[n], p.detach())) for n, p in model.named_parameters())
    del before, model, trainer
    if len(history) != STEPS:
        raise AssertionError(f"{mode}: {len(history)} logged steps, expected {STEPS}")
    oar = {
        k: [h.get(k) for h in history]
        for k in sorted({k for h in history for k in h if k.startswith("oar/")})
    }
    missing = [k for k in REQUIRED_METRICS if k not in oar or any(v is None for v in oar[k])]
    if missing:
        raise AssertionError(f"{mode}: oar/* metrics not logged at every step: {missing}")
    bad = {k: v for k, v in oar.items() if not all(_finite(x) for x in v if x is not None)}
    bad.update(
        {
            k: [h.get(k) for h in history]
            for k in ("loss", "grad_norm")
            if not all(_finite(h.get(k)) for h in history)
        }
    )
    if bad:
        raise AssertionError(f"{mode}: non-finite logged values: {bad}")
    if moved == 0:
        raise AssertionError(
            f"{mode}: no parameter changed in {STEPS} steps at learning rate {LEARNING_RATE}"
        )
    return {
        "steps": STEPS,
        "loss": [h["loss"] for h in history],
        "grad_norm": [h["grad_norm"] for h in history],
        "oar": oar,
        "parameters_changed": moved,
        "step_seconds": [s["seconds"] for s in steps],
        "peak_mib": [s["peak_mib"] for s in steps],
    }


def run_training(arch: str, sizes: Sizes, seed: int, progress=None) -> dict[str, Any]:
    """Every credit mode on `arch`; each mode's failure is recorded and the others still run.

    Returns ``{"modes": {mode: result or {"error": ...}}, "failed": [modes], ...}``.
    """
    from datasets import Dataset

    config = arch_config(arch, sizes.arch_shape)
    base = build_model(config, seed)
    tokenizer = tokenizer_for(config.vocab_size)
    prompts = random_prompts(config.vocab_size, sizes.train_prompts * STEPS * 2, sizes.prompt_len, seed)
    dataset = Dataset.from_dict({"prompt": prompts, "answer": ["0"] * len(prompts)})  # first-error reads it
    results: dict[str, Any] = {}
    for mode in CREDITS:
        if progress:
            progress(mode)
        try:
            results[mode] = train_mode(mode, base, tokenizer, dataset, sizes, seed)
        except Exception as exc:  # recorded; the other modes still run
            results[mode] = {"error": error_summary(exc)}
        finally:
            if sizes.device == "cuda":
                torch.cuda.empty_cache()
    failed = [m for m, r in results.items() if "error" in r]
    return {
        "architecture": type(base).__name__,
        "shape": sizes.arch_shape_name,
        "parameters": sum(p.numel() for p in base.parameters()),
        "dtype": sizes.train_dtype,
        "attention": "sdpa",
        "rows_per_step": sizes.train_prompts * sizes.train_generations,
        "completion_len": sizes.completion_len,
        "learning_rate": LEARNING_RATE,
        "modes": results,
        "failed": failed,
    }
