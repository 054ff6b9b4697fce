"""The word-problem tasks (`oar_rl.data.wordproblems`) as `Task`s: ground-truth pivots, shipped weights.

Two regimes share the generator: `wordproblems` (2-3 events, ~71 reasoning tokens; every result the
project reported before issue 33) and `wordproblems-long` (6-8 events, ~185 reasoning tokens, trap events
a fallible teacher misreads; `LONG_CONFIG`). Each has its own splits, tokenizer and shipped warm start.

Splits: `train` is the word-problem train stream; `test` the held-out `eval` split (at most
`_TEST_MAX` problems); `validation` the word-problem `validation` stream minus any prompt that occurs
in the first `_TEST_MAX` test problems (both streams already exclude train prompts). The warm start is
the one shipped in the package (`oar_rl.shipped`), verified against its recipe and manifest on load.
Its generator's named splits (`dataset`) are train, validation and eval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from oar_rl.tasks.base import Task, WarmStart, exact_check, exact_reward, split_rows

_TEST_MAX = 1000


def _prompts_of(task: str, test_max: int) -> Callable[[str, int], list[dict[str, Any]]]:
    def prompts(split: str, n: int) -> list[dict[str, Any]]:
        from oar_rl.data.wordproblems import split_problems

        return split_rows(
            split,
            n,
            draw=lambda name, k: split_problems(name, k, task),
            test_max=test_max,
            candidates=lambda k: split_problems("validation", k + 64, task),
            key=lambda p: p.prompt,
        )

    return prompts


def _split_of(task: str) -> Callable[[str], Any]:
    def split(name: str) -> Any:
        from oar_rl.data.wordproblems import load

        return load(name, task=task)

    return split


def _warm_start_of(task: str) -> Callable[[str, str | None], WarmStart]:
    def warm_start(variant: str, cache_dir: str | None) -> WarmStart:
        from oar_rl.shipped import TASK_RECIPES, load_task_model

        if variant != "default":
            raise ValueError(f"warm start {variant!r} is not valid for {task!r}; valid: default")
        model, tok, path = load_task_model(task)
        recipe = TASK_RECIPES[task]
        return WarmStart(model, tok, Path(path), recipe.hash(), recipe.to_dict())

    return warm_start


def _label_roles(prompt: str, completion_ids: Sequence[int], tokenizer: Any) -> list[str] | None:
    from oar_rl.data.wordproblems import label_roles
    from oar_rl.roles import completion_token_roles

    return completion_token_roles(completion_ids, tokenizer, label_roles)


def _trainer_kwargs() -> dict[str, Any]:
    from oar_rl.data.wordproblems import label_roles

    return {"token_roles": label_roles}


def _word_task(name: str, test_max: int, description: str, **settings: Any) -> Task:
    """A word-problem regime as a `Task`: everything but its name, test size and settings is shared."""
    return Task(
        name=name,
        description=description,
        prompts=_prompts_of(name, test_max),
        reward=exact_reward,
        check=exact_check,
        load_warm_start=_warm_start_of(name),
        warm_starts=("default",),
        label_roles=_label_roles,
        trainer_kwargs=_trainer_kwargs,
        probe="as-mean",
        learning_rate=3e-4,
        load_split=_split_of(name),
        split_names=("train", "validation", "eval"),
        **settings,
    )


WORDPROBLEMS = _word_task(
    "wordproblems",
    _TEST_MAX,
    "synthetic word problems with distractors and ground-truth pivot/filler roles, word-level "
    "tiny Qwen2 shipped with the package (oar_rl.data.wordproblems)",
    max_completion_length=160,
    # part of an untuned study's protocol (lr_source): kept as written, though the pilot script is now
    # experiments/rl_pilot (issue 34), so that studies made before still resume
    learning_rate_note="GRPO pilots on the validation split (benchmarks/rl_pilot.py; docs/history.md, "
    "'Why RL barely moved the first warm start'): 16x8 x 30 steps gave 70.9% at 1e-4, 84.3% at 3e-4, 76.7% "
    "at 1e-3",
)

WORDPROBLEMS_LONG = _word_task(
    "wordproblems-long",
    500,
    "the long-chain regime of the word problems: 6-8 events, ~185 reasoning tokens, trap events "
    "the warm start misreads (oar_rl.data.wordproblems.LONG_CONFIG)",
    max_completion_length=320,
    learning_rate_note="the short regime's GRPO step size, kept so that the regimes differ in the task only",
)
