"""The pretrained regime (issue 58): SmolLM2-135M-Instruct on the short word problems, in its chat template.

`wordproblems-smollm2` is the `wordproblems` task -- the same problems, splits (so the same exact test
and validation samples), reward, checker and ground-truth roles -- asked of a pretrained language model
instead of the embedded tiny one. Each prompt is the problem as the user message after the system line
`SYSTEM_PROMPT`, rendered in the model's own chat template (ChatML; `oar_rl.lora_sft.chatml_prompt`,
checked against the model's template whenever the warm start is built or loaded). The prompts are
rendered text, not message lists, so that GRPO (TRL tokenises the text with no special tokens added:
the same ids as its own chat-template path), the study's held-out sampling and the SFT all see the same
ids; `oar-rl eval`, `oracle` and `attribute` read the same rendered prompts (`dataset`).

Why the short chains (2-3 events, ~82 solution tokens in SmolLM2's tokenizer, at most 125) and not the
long ones (6-8 events, ~189, at most 260): the regime must leave RL room and fit the machine. The probe
of issue 58 measured the warm start below on the short task at 66% greedy and 33% / 42% sampled at
T = 1 (64 validation problems), inside the 20-60% band the issue asks for; the long chains would more
than double every completion's cost (a GRPO step of 64 completions is already about a minute on 2 CPU
threads) and start from a model that cannot yet do the short ones reliably.

The warm start (`WARM_START_SPECS["default"]`, `oar_rl.lora_sft`): LoRA rank 16 on every projection,
alpha 32, AdamW 5e-4 (constant, no weight decay, gradients clipped at 1.0), batch 8, 200 steps over the
first 1,600 train problems' reference solutions, seed 0; cached, merged for training, and built on first
use or ahead of time by `oar-rl warm-start --task wordproblems-smollm2`. `test` is the same recipe at 2
steps of 2 on 4 problems, for the tests. The RL prompts (`prompts("train", n)`) are the same train
stream, so the first 1,600 RL prompts were seen in SFT (as the embedded warm starts' SFT saw theirs).

Departures from the paper (Qwen2.5-7B / Math-7B / Math-1.5B, RL from the released checkpoints): a
135M-parameter model, de-quantised from the Q4_1 GGUF file `oar-rl fetch-model` converts; a supervised
warm start on the task's own solutions before RL (the released model solves 0 of 64 at T = 1:
results/real-model/solve_rate.md); synthetic word problems, not DAPO-Math; RL trains every weight of the
merged model (the study's path, `oar_rl.study.training.train_policy`), not a LoRA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oar_rl.lora_sft import LoraSFTSpec, chatml_prompt
from oar_rl.tasks.base import Task, WarmStart, exact_check, exact_reward
from oar_rl.tasks.wordproblems import _label_roles, _trainer_kwargs

NAME = "wordproblems-smollm2"
SYSTEM_PROMPT = "Solve the problem step by step, then give the final number as <answer>N</answer>."
"""The system line of every prompt (also `oar-rl bench`'s smollm2-135m shape)."""
BASE_MODEL = "smollm2-135m"
DATA_TASK = "wordproblems"
BUILD_COMMAND = f"oar-rl warm-start --task {NAME}"
WARM_START_SPECS: dict[str, LoraSFTSpec] = {
    "default": LoraSFTSpec(
        base=BASE_MODEL,
        data_task=DATA_TASK,
        num_examples=1600,
        system_prompt=SYSTEM_PROMPT,
        rank=16,
        alpha=32,
        learning_rate=5e-4,
        batch_size=8,
        steps=200,
        seed=0,
    ),
    "test": LoraSFTSpec(
        base=BASE_MODEL,
        data_task=DATA_TASK,
        num_examples=4,
        system_prompt=SYSTEM_PROMPT,
        batch_size=2,
        steps=2,
    ),
}
"""The warm starts by variant: the issue's probe recipe, and a seconds-to-build one for the tests."""


def render(problem: str) -> str:
    """The prompt the model sees for a problem: the system line and the problem, in its chat template."""
    return chatml_prompt(SYSTEM_PROMPT, problem)


def _prompts(split: str, n: int) -> list[dict[str, Any]]:
    from oar_rl.tasks.wordproblems import WORDPROBLEMS

    return [{**row, "prompt": render(row["prompt"])} for row in WORDPROBLEMS.prompts(split, n)]


def _split(name: str) -> Any:
    from datasets import Dataset

    from oar_rl.tasks.wordproblems import WORDPROBLEMS

    ds = WORDPROBLEMS.dataset(name)
    columns = {c: ds[c] for c in ds.column_names}
    columns["prompt"] = [render(p) for p in columns["prompt"]]
    return Dataset.from_dict(columns)


def shipped_adapter() -> Path:
    """Where the package would ship the default warm start's adapter (used when present, verified)."""
    from oar_rl.shipped import SHIPPED_DIR

    return SHIPPED_DIR / NAME


def _load_warm_start(variant: str, cache_dir: str | None) -> WarmStart:
    from oar_rl.lora_sft import load

    if variant not in WARM_START_SPECS:
        raise ValueError(
            f"warm start {variant!r} is not valid for {NAME!r}; valid: {', '.join(WARM_START_SPECS)}"
        )
    ws = load(
        WARM_START_SPECS[variant],
        NAME,
        cache_dir=cache_dir,
        shipped=shipped_adapter() if variant == "default" else None,
        command=BUILD_COMMAND + ("" if variant == "default" else f" --warm-start {variant}"),
    )
    return WarmStart(ws.model, ws.tokenizer, ws.path, ws.recipe_hash, ws.recipe)


WORDPROBLEMS_SMOLLM2 = Task(
    name=NAME,
    description="the short word problems asked of SmolLM2-135M-Instruct in its chat template, from a LoRA "
    "SFT warm start on the task's reference solutions (oar_rl.tasks.pretrained)",
    prompts=_prompts,
    reward=exact_reward,
    check=exact_check,
    load_warm_start=_load_warm_start,
    warm_starts=tuple(WARM_START_SPECS),
    label_roles=_label_roles,
    trainer_kwargs=_trainer_kwargs,
    max_completion_length=128,
    probe="as-mean",
    learning_rate=1e-6,
    learning_rate_note="TRL's GRPOConfig default, a placeholder until a grid on the validation split "
    "(at least 3 rates x 2 seeds, --tune-lr) chooses the regime's rate",
    load_split=_split,
    split_names=("train", "validation", "eval"),
    # results/pretrained-regime/bench: GRPO steps of 64 completions in 104-115 s at 2 threads, generation
    # 35-41 s of it (batched sampling of the same completions: the evaluation's cost per completion)
    cost_per_completion=(1.7, 0.6, 2),
    micro_batch=8,
    data_task=DATA_TASK,
    render=render,
)
"""`max_completion_length` 128: the longest reference solution is 125 tokens with its end-of-turn token."""
