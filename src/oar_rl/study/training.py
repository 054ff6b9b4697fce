"""One RL run from a saved warm start with `OARTrainer`, and held-out accuracy during and after it.

`train_policy` is the training function of `oar-rl study` (and so of `oar-rl demo`): it loads the warm
start from its directory, builds an `OARConfig` from the shared hyperparameters plus the credit mode
(and any per-run overrides such as τ or the probe), and trains. Every method of one seed sees the same
prompts in the same order: TRL's sampler is seeded by `seed`, which does not depend on the method.

`HeldOutEval` is a `TrainerCallback` that measures held-out accuracy every `every` optimizer steps. It
samples under a forked RNG (CPU, and the model's CUDA device if any), so evaluating does not change the
training run's random stream: a run's training is the same whether or how often it is evaluated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


def clean_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL's log history reduced to its per-step numeric entries (JSON-friendly)."""
    keep = []
    for h in history:
        row = {k: v for k, v in h.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if "step" in row:
            keep.append(row)
    return keep


def heldout_accuracy(
    model,
    tokenizer,
    rows: Sequence[dict[str, Any]],
    check: Callable[[str, str], bool],
    *,
    temperature: float,
    samples: int,
    seed: int,
    max_new_tokens: int,
    progress: bool = False,
    per_row: list[int] | None = None,
) -> float:
    """Mean correctness over `samples` completions per row (greedy when temperature == 0); `per_row`, a
    list, gets each row's count of correct completions (0..samples), in row order.

    Sampling is seeded and runs under forked RNGs, so the caller's random streams are untouched.
    """
    import torch

    from oar_rl.sampling import generate_completions

    if samples < 1:
        raise ValueError(f"samples={samples} must be >= 1")
    if not rows:
        raise ValueError("held-out accuracy needs at least one problem")
    prompts = [r["prompt"] for r in rows for _ in range(samples)]
    gold = [str(r["answer"]) for r in rows for _ in range(samples)]
    device = next(model.parameters()).device
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        comps = generate_completions(
            model,
            tokenizer,
            prompts,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            seed=seed,
            progress=progress,
        )
    right = [bool(check(c, g)) for c, g in zip(comps, gold, strict=True)]
    if per_row is not None:
        per_row[:] = [sum(right[i : i + samples]) for i in range(0, len(right), samples)]
    return sum(right) / len(right)


class HeldOutEval(TrainerCallback):
    """Held-out accuracy every `every` optimizer steps and at the last step: `self.curve` {step: acc}."""

    def __init__(self, evaluate: Callable[[Any], float], every: int, max_steps: int) -> None:
        if every < 1:
            raise ValueError(f"eval every={every} must be >= 1")
        self.evaluate = evaluate
        self.every = every
        self.max_steps = max_steps
        self.curve: dict[int, float] = {}
        self.seconds = 0.0

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = int(state.global_step)
        if model is not None and (step % self.every == 0 or step == self.max_steps):
            t0 = time.perf_counter()
            self.curve[step] = float(self.evaluate(model))
            self.seconds += time.perf_counter() - t0
        return control

    def export_state(self) -> dict[str, Any]:
        """The curve so far and its seconds (kept by a mid-run checkpoint, `oar_rl.study.checkpoints`)."""
        return {"curve": {str(k): v for k, v in self.curve.items()}, "seconds": self.seconds}

    def restore_state(self, state: dict[str, Any], step: int) -> None:
        self.curve = {int(k): float(v) for k, v in state["curve"].items()}
        self.seconds = float(state["seconds"])


class StepProgress(TrainerCallback):
    """Calls `tick()` after every optimizer step (drives the study's outer progress bar)."""

    def __init__(self, tick: Callable[[], None]) -> None:
        self.tick = tick

    def on_step_end(self, args, state, control, **kwargs):
        self.tick()
        return control

    def export_state(self) -> dict[str, Any]:
        return {}

    def restore_state(self, state: dict[str, Any], step: int) -> None:
        for _ in range(step):  # the steps an earlier process made count on the bar
            self.tick()


def passes_per_step(rows: int, micro_batch: int | None) -> int:
    """The fewest equal forward/backward passes over an optimizer step's `rows` with at most `micro_batch`
    rows each (1 for None): the smallest divisor of `rows` that is at least rows / micro_batch."""
    if micro_batch is None:
        return 1
    if micro_batch < 1:
        raise ValueError(f"micro_batch={micro_batch} must be >= 1 (or None)")
    return next(a for a in range(-(-rows // micro_batch), rows + 1) if rows % a == 0)


def train_policy(
    model_path: str | Path,
    dataset,
    reward_funcs,
    *,
    credit: str,
    seed: int,
    steps: int,
    prompts_per_step: int,
    num_generations: int,
    learning_rate: float,
    max_completion_length: int,
    temperature: float,
    workdir: str | Path,
    callbacks: Sequence[TrainerCallback] = (),
    trainer_kwargs: dict[str, Any] | None = None,
    show_progress: bool = True,
    desc: str = "train",
    report_to: str | list[str] = "none",
    run_name: str | None = None,
    log_dir: str | Path | None = None,
    verbose: bool = False,
    steps_per_generation: int = 1,
    micro_batch: int | None = None,
    checkpoints: Any = None,
    **config_overrides: Any,
) -> tuple[Any, list[dict[str, Any]], float]:
    """Train one run from the warm start in `model_path`; returns (trained model in eval mode, cleaned
    log history, training seconds). `config_overrides` go to `OARConfig` (probe, tau, oar_beta, ...).

    Output goes through `oar_rl.console.attach` (a per-run bar `desc`, or TRL's log dicts with
    `verbose`; `log_dir/logs.jsonl` and TensorBoard with `log_dir`). With `show_progress=False` the
    caller draws its own progress: no per-run bar and no printed log dicts.

    `steps_per_generation` > 1 is a trust region: each generation batch of `prompts_per_step` ×
    `num_generations` completions is split into that many optimizer steps (TRL's `steps_per_generation`),
    so from the second step on the policy differs from the one that sampled and the clipped ratio acts;
    `steps` still counts generation batches (the run makes `steps × steps_per_generation` optimizer steps).

    `micro_batch`: at most this many rows per forward/backward pass of the update (None: each optimizer
    step's rows in one pass): the step's rows split into the fewest equal passes that fit it
    (`passes_per_step`; 64 rows at 8: 8 passes, 4 rows at 8: one). Gradients are accumulated over the
    passes of one optimizer step (TRL's gradient accumulation, whose loss normalisation spans the step),
    so the update is the one-pass update up to float rounding in less memory: one pass over 64 of
    SmolLM2's 200-token rows holds about 20 GB of activations. Not so where TRL computes something over the
    pass (a `top_entropy_quantile` cut-off, the 'bnpo' token mean): refused. The logged `entropy` and
    clip ratios become means of the passes' means, and the scorers' chunks the pass's size (the same
    scores up to rounding).

    `checkpoints` (`oar_rl.study.checkpoints.RunCheckpoints`): TRL checkpoints into its folder instead of
    `workdir`, and a resume from the newest complete one there; the seconds returned are then those of
    every process that trained this run (`RunCheckpoints.seconds`).
    """
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from oar_rl.config import OARConfig
    from oar_rl.console import attach, no_load_bars
    from oar_rl.trainer import OARTrainer

    batch = prompts_per_step * num_generations
    if steps_per_generation < 1 or batch % steps_per_generation:
        raise ValueError(
            f"steps_per_generation={steps_per_generation} must be >= 1 and divide the generation batch "
            f"{prompts_per_step} x {num_generations} = {batch}"
        )
    rows = batch // steps_per_generation  # one optimizer step's rows
    accumulate = passes_per_step(rows, micro_batch)
    saving = {"output_dir": str(workdir), "save_strategy": "no"}
    if checkpoints is not None:
        saving = checkpoints.trainer_config(steps_per_generation)
    config = OARConfig(
        credit=credit,
        per_device_train_batch_size=rows // accumulate,
        steps_per_generation=steps_per_generation * accumulate,
        gradient_accumulation_steps=accumulate,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        temperature=temperature,
        max_steps=steps * steps_per_generation,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        **saving,
        report_to=report_to,
        run_name=run_name,
        seed=seed,
        data_seed=seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        activation_checkpointing=False,  # the new name: `gradient_checkpointing` warns it is deprecated
        disable_tqdm=False,
        **config_overrides,
    )
    per_pass = []  # what TRL computes over each pass, not the step: another update, not the same one
    if config.top_entropy_quantile < 1:
        per_pass.append("top_entropy_quantile < 1 (the entropy cut-off)")
    if config.loss_type == "bnpo":
        per_pass.append("loss_type 'bnpo' (the token mean)")
    if accumulate > 1 and per_pass:
        raise ValueError(
            f"micro_batch={micro_batch} splits each optimizer step into {accumulate} passes, and TRL "
            f"computes {' and '.join(per_pass)} over each pass, not the step; run this rule without one"
        )
    with no_load_bars():  # the warm start's load already showed one
        model = AutoModelForCausalLM.from_pretrained(model_path, attn_implementation="eager")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    trainer = OARTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        reward_funcs=reward_funcs,
        processing_class=tokenizer,
        callbacks=[*callbacks, *([checkpoints] if checkpoints is not None else [])],
        **(trainer_kwargs or {}),
    )
    attach(trainer, desc=desc, log_dir=log_dir, verbose=verbose or not show_progress)
    if not show_progress:  # the caller's bar only: drop TRL's bar and its printed log dicts
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        for cls in (ProgressCallback, PrinterCallback):
            trainer.remove_callback(cls)
    resume = checkpoints.resume() if checkpoints is not None else None
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    seconds = checkpoints.seconds() if checkpoints is not None else time.perf_counter() - t0
    model = trainer.model
    model.eval()
    return model, clean_history(trainer.state.log_history), seconds
