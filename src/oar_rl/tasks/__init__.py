"""The built-in tasks, in one registry: a task name -> its `Task` (data and splits, reward and check,
role labeller, warm start, defaults; `oar_rl.tasks.base`).

Every command that works on a task reads it from here: `oar-rl study` and `demo`, `oar-rl oracle` and
`attribute` (`--task`, default `wordproblems`, as for the study) and `oar-rl eval` (a task's name is a
benchmark). `exact_reward` and `exact_check` are the exact integer checker both embedded tasks share:
1.0 / True when the completion's last ``<answer>`` holds the gold integer.

To add a task, write a `Task` and register it in `_register_builtin_tasks` (the one place).
"""

from __future__ import annotations

from oar_rl.tasks.base import ROLES, SPLITS, Task, WarmStart, exact_check, exact_reward

DEFAULT_TASK = "wordproblems"
"""The task `oar-rl study`, `oracle` and `attribute` use unless told (`--task`)."""

__all__ = [
    "DEFAULT_TASK",
    "ROLES",
    "SPLITS",
    "Task",
    "WarmStart",
    "exact_check",
    "exact_reward",
    "get_task",
    "register",
    "task_names",
]

_REGISTRY: dict[str, Task] = {}


def register(task: Task) -> None:
    """Add a task (a name may be registered once)."""
    if task.name in _REGISTRY:
        raise ValueError(f"task {task.name!r} is already registered")
    _REGISTRY[task.name] = task


def get_task(name: str) -> Task:
    _register_builtin_tasks()
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def task_names() -> list[str]:
    _register_builtin_tasks()
    return sorted(_REGISTRY)


_BUILTINS_DONE = False


def _register_builtin_tasks() -> None:
    """THE place where built-in tasks are registered (imports stay lazy: nothing heavy at import time)."""
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    _BUILTINS_DONE = True
    from oar_rl.tasks.arithmetic import ARITHMETIC
    from oar_rl.tasks.pretrained import WORDPROBLEMS_SMOLLM2
    from oar_rl.tasks.wordproblems import WORDPROBLEMS, WORDPROBLEMS_LONG

    register(ARITHMETIC)
    register(WORDPROBLEMS)
    register(WORDPROBLEMS_LONG)
    register(WORDPROBLEMS_SMOLLM2)
