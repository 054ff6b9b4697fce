"""The word-problem task (`oar_rl.data.wordproblems`) as a `Task`: ground-truth pivots, shipped weights.

Splits: `train` is the word-problem train stream; `test` the held-out `eval` split (at most
`_TEST_MAX` problems); `validation` the word-problem `validation` stream minus any prompt that occurs
in the first `_TEST_MAX` test problems (both streams already exclude train prompts). The warm start is
the one shipped in the package (`oar_rl.shipped`), verified against its recipe and manifest on load.
Its generator's named splits (`dataset`) are train, validation and eval.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oar_rl.tasks.base import Task, WarmStart, exact_check, exact_reward, split_rows

_TEST_MAX = 1000


def _prompts(split: str, n: int) -> list[dict[str, Any]]:
    from oar_rl.data.wordproblems import split_problems

    return split_rows(
        split,
        n,
        draw=split_problems,
        test_max=_TEST_MAX,
        candidates=lambda k: split_problems("validation", k + 64),
        key=lambda p: p.prompt,
    )


def _split(split: str) -> Any:
    from oar_rl.data.wordproblems import load

    return load(split)


def _warm_start(variant: str, cache_dir: str | None) -> WarmStart:
    from oar_rl.shipped import WORDPROBLEMS_RECIPE, load_task_model

    if variant != "default":
        raise ValueError(f"warm start {variant!r} is not valid for 'wordproblems'; valid: default")
    model, tok, path = load_task_model("wordproblems")
    return WarmStart(model, tok, Path(path), WORDPROBLEMS_RECIPE.hash(), WORDPROBLEMS_RECIPE.to_dict())


def _label_roles(prompt: str, completion_ids: Sequence[int], tokenizer: Any) -> list[str] | None:
    from oar_rl.data.wordproblems import label_roles
    from oar_rl.roles import completion_token_roles

    return completion_token_roles(completion_ids, tokenizer, label_roles)


def _trainer_kwargs() -> dict[str, Any]:
    from oar_rl.data.wordproblems import label_roles

    return {"token_roles": label_roles}


WORDPROBLEMS = Task(
    name="wordproblems",
    description="synthetic word problems with distractors and ground-truth pivot/filler roles, word-level "
    "tiny Qwen2 shipped with the package (oar_rl.data.wordproblems)",
    prompts=_prompts,
    reward=exact_reward,
    check=exact_check,
    load_warm_start=_warm_start,
    warm_starts=("default",),
    label_roles=_label_roles,
    trainer_kwargs=_trainer_kwargs,
    max_completion_length=160,
    probe="as-mean",
    learning_rate=3e-4,
    learning_rate_note="GRPO pilots on the validation split (benchmarks/rl_pilot.py; docs/history.md, "
    "'Why RL barely moved the first warm start'): 16x8 x 30 steps gave 70.9% at 1e-4, 84.3% at 3e-4, 76.7% "
    "at 1e-3",
    load_split=_split,
    split_names=("train", "validation", "eval"),
)
