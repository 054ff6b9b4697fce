"""The study's task registry: a task name -> what a study needs to train and score on it.

A task gives its prompts per split, a TRL reward function, an exact correctness checker, a warm-start
loader, and optionally a role labeller (ground-truth `pivot`/`filler`/`answer` per completion token)
and extra `OARTrainer` keyword arguments (e.g. a `token_roles` hook that logs ground-truth credit
metrics). Everything the study does is generic over this interface.

Splits: `train` (the RL prompts), `validation` (only for choosing the learning rate) and `test` (the
held-out accuracy the study reports). Validation and test must be disjoint; the arithmetic task takes
both from its held-out `eval` stream (test: the first items; validation: items from position 1000 on,
minus any expression that also occurs in the first 1000).

To add a task, write a `StudyTask` and register it in `_register_builtin_tasks` (the one place).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oar_rl.answer_span import ANSWER_TAG_PATTERN
from oar_rl.data.arithmetic import check
from oar_rl.demo import arithmetic_reward

SPLITS = ("train", "validation", "test")
ROLES = ("pivot", "filler", "answer")


@dataclass
class WarmStart:
    """A loaded warm start: the model (eval mode), its tokenizer, the saved directory training reloads
    from, and the identity of its recipe (hash + description) for study.json."""

    model: Any
    tokenizer: Any
    path: Path
    recipe_hash: str
    recipe: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyTask:
    """Everything the study needs from a task (see the module docstring)."""

    name: str
    description: str
    prompts: Callable[[str, int], list[dict[str, Any]]]
    """(split, n) -> n rows, each with at least "prompt" and "answer" (str); every column reaches the
    reward function as a keyword argument, as in TRL."""
    reward: Callable[..., list[float]]
    """A TRL reward function: (completions, answer, **columns) -> list of floats."""
    check: Callable[[str, str], bool]
    """(completion text, gold answer) -> exactly correct; used for held-out accuracy and the oracle."""
    load_warm_start: Callable[[str, str | None], WarmStart]
    """(variant, cache_dir) -> WarmStart; variants are listed in `warm_starts`."""
    warm_starts: tuple[str, ...] = ("default",)
    label_roles: Callable[[str, Sequence[int], Any], Sequence[str] | None] | None = None
    """Optional (prompt, completion token ids, tokenizer) -> one role of `ROLES` per completion token,
    or None where the completion cannot be labelled (it is then left out of the ground-truth recall)."""
    trainer_kwargs: Callable[[], dict[str, Any]] | None = None
    """Optional extra keyword arguments for `OARTrainer` (e.g. {"token_roles": ...})."""
    answer_pattern: str | None = ANSWER_TAG_PATTERN
    """The answer-span pattern of `oar_rl.probes.answer_span_mask`. The embedded tasks answer in
    <answer>...</answer>, the span the study always used; pinned here since the library default became
    'rewarded' (issue 17), so the committed study results stay what they were. None: the library's."""
    max_completion_length: int = 72
    probe: str = "as-mean"
    """Outcome probe the study uses for OAR by default (the τ and probe ablations vary around it)."""
    learning_rate: float = 5e-5
    learning_rate_note: str = ""
    """Where the default learning rate comes from; used only when no `--tune-lr` choice exists."""


_REGISTRY: dict[str, StudyTask] = {}


def register(task: StudyTask) -> None:
    """Add a task (a name may be registered once)."""
    if task.name in _REGISTRY:
        raise ValueError(f"study task {task.name!r} is already registered")
    _REGISTRY[task.name] = task


def get_task(name: str) -> StudyTask:
    _register_builtin_tasks()
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def task_names() -> list[str]:
    _register_builtin_tasks()
    return sorted(_REGISTRY)


# ----------------------------------------------------------------------------------------------------
# arithmetic: the embedded char-level task of `oar-rl demo`
# ----------------------------------------------------------------------------------------------------
_VALIDATION_OFFSET = 1000  # validation rows come from this position of the eval stream on


def _arithmetic_prompts(split: str, n: int) -> list[dict[str, Any]]:
    from oar_rl.data.arithmetic import split_problems

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    if split == "train":
        problems = split_problems("train", n)
    elif split == "test":
        if n > _VALIDATION_OFFSET:
            raise ValueError(f"at most {_VALIDATION_OFFSET} test problems (the rest is validation), got {n}")
        problems = split_problems("eval", n)
    else:
        stream = split_problems("eval", _VALIDATION_OFFSET + 4 * n + 64)
        test_exprs = {p.expression for p in stream[:_VALIDATION_OFFSET]}
        problems = [p for p in stream[_VALIDATION_OFFSET:] if p.expression not in test_exprs][:n]
        if len(problems) < n:  # pragma: no cover - the stream is ~20x larger than needed
            raise RuntimeError(f"could not draw {n} validation problems disjoint from the test split")
    return [{"prompt": p.prompt, "answer": str(p.answer)} for p in problems]


def _arithmetic_warm_start(variant: str, cache_dir: str | None) -> WarmStart:
    from oar_rl.tiny import DEFAULT_RECIPE, TEST_RECIPE, load_default_model

    recipes = {"default": DEFAULT_RECIPE, "test": TEST_RECIPE}
    if variant not in recipes:
        raise ValueError(f"warm start {variant!r} is not valid for 'arithmetic'; valid: {', '.join(recipes)}")
    recipe = recipes[variant]
    model, tok, path = load_default_model(recipe, cache_dir=cache_dir, progress=True)
    return WarmStart(model, tok, Path(path), recipe.hash(), recipe.to_dict())


ARITHMETIC = StudyTask(
    name="arithmetic",
    description="synthetic multi-step integer arithmetic, char-level tiny Qwen2 (oar_rl.data.arithmetic)",
    prompts=_arithmetic_prompts,
    reward=arithmetic_reward,
    check=check,
    load_warm_start=_arithmetic_warm_start,
    warm_starts=("default", "test"),
    label_roles=None,  # the arithmetic generator does not label roles
    max_completion_length=72,
    probe="as-mean",
    learning_rate=5e-5,
    learning_rate_note="oar_rl.demo's hand tuning on the arithmetic eval split (see its module docstring)",
)


_BUILTINS_DONE = False


def _register_builtin_tasks() -> None:
    """THE place where built-in tasks are registered (imports stay lazy: nothing heavy at import time)."""
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    _BUILTINS_DONE = True
    register(ARITHMETIC)
    from oar_rl.study.tasks_wordproblems import WORDPROBLEMS

    register(WORDPROBLEMS)
