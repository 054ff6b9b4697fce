"""The embedded tasks behind one interface, for the study and the tools: data, reward, warm start, roles.

    task = get_task("wordproblems")              # or "arithmetic"
    train = task.load("train", 640)              # datasets.Dataset: prompt, answer, solution
    problems = task.split_problems("eval", 200)  # objects with .prompt and .answer (int)
    model, tokenizer, path = task.load_model()   # the warm start (shipped / cached), eval mode
    OARTrainer(..., reward_funcs=task.reward, token_roles=task.token_roles)

`reward` is the exact integer checker (1.0 when the completion's last ``<answer>`` holds the gold
integer, else 0.0) for both tasks. `token_roles` is the task's labeller (`completion text -> per-char
roles | None`, see `oar_rl.roles`) or None when the task has no ground-truth roles (arithmetic).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TASKS: tuple[str, ...] = ("arithmetic", "wordproblems")


def exact_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 when the completion's last `<answer>` holds the right integer, else 0.0 (exact checker)."""
    from oar_rl.data.arithmetic import check
    from oar_rl.rewards import completion_text

    return [float(check(completion_text(c), a)) for c, a in zip(completions, answer, strict=True)]


@dataclass(frozen=True)
class Task:
    name: str
    splits: tuple[str, ...]
    """Split names; 'train' is the RL prompt stream, 'eval' the held-out test split."""
    validation_split: str | None
    """A held-out split for choosing hyperparameters (distinct from 'eval'), or None."""
    max_completion_length: int
    """Tokens a completion needs (the warm start's solutions fit with room to spare)."""
    token_roles: Callable[[str], list[str] | None] | None
    reward: Callable[..., list[float]] = exact_reward

    def _module(self):
        if self.name == "wordproblems":
            from oar_rl.data import wordproblems

            return wordproblems
        from oar_rl.data import arithmetic

        return arithmetic

    def split_problems(self, split: str, n: int | None = None) -> list:
        """Problem objects (`.prompt`, `.answer`, `.solution`) of `split`; deterministic."""
        return self._module().split_problems(split, n)

    def load(self, split: str, n: int | None = None):
        """`split` as a `datasets.Dataset` with prompt, answer (str) and solution columns."""
        return self._module().load(split, n)

    def load_model(self, cache_dir: str | None = None):
        """(model in eval mode, tokenizer, directory) of the task's warm start.

        wordproblems: the weights shipped in the package, verified against their recipe and manifest.
        arithmetic: the default recipe, built on first use and cached (`oar_rl.tiny.load_default_model`).
        """
        from oar_rl import tiny

        if self.name == "wordproblems":
            from oar_rl.shipped import load_task_model

            return load_task_model("wordproblems")
        return tiny.load_default_model(tiny.DEFAULT_RECIPE, cache_dir=cache_dir)

    def recipe(self):

        from oar_rl.shipped import TASK_RECIPES

        return TASK_RECIPES[self.name]


def get_task(name: str) -> Task:
    """The embedded task `name` ('arithmetic' or 'wordproblems')."""
    if name == "wordproblems":
        from oar_rl.data.wordproblems import SPLITS, label_roles

        return Task(name, tuple(SPLITS), "validation", 160, label_roles)
    if name == "arithmetic":
        from oar_rl.data.arithmetic import SPLITS

        return Task(name, tuple(SPLITS), None, 72, None)
    raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
