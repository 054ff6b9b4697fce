"""What a study task is: `StudyTask` (everything the study needs from a task) and `WarmStart`.

A task gives its prompts per split, a TRL reward function, an exact correctness checker, a warm-start
loader, and optionally a role labeller (ground-truth `pivot`/`filler`/`answer` per completion token)
and extra `OARTrainer` keyword arguments (e.g. a `token_roles` hook that logs ground-truth credit
metrics). Everything the study does is generic over this interface.

Splits: `train` (the RL prompts), `validation` (only for choosing the learning rate) and `test` (the
held-out accuracy the study reports). Validation and test must be disjoint.

The built-in tasks live in `study/tasks_arithmetic.py` and `study/tasks_wordproblems.py`; the registry
(`get_task`, `task_names`, `register`) in `study/tasks.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oar_rl.answer_span import ANSWER_TAG_PATTERN

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
    """The answer-span pattern of `oar_rl.answer_span.answer_span_mask`. The embedded tasks answer in
    <answer>...</answer>, the span the study always used; pinned here since the library default became
    'rewarded' (issue 17), so the committed study results stay what they were. None: the library's."""
    max_completion_length: int = 72
    probe: str = "as-mean"
    """Outcome probe the study uses for OAR by default (the τ and probe ablations vary around it)."""
    learning_rate: float = 5e-5
    learning_rate_note: str = ""
    """Where the default learning rate comes from; used only when no `--tune-lr` choice exists."""
