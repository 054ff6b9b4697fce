"""The study's task registry: a task name -> its `StudyTask` (`oar_rl.study.task`).

To add a task, write a `StudyTask` and register it in `_register_builtin_tasks` (the one place).
"""

from __future__ import annotations

from oar_rl.study.task import StudyTask

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


_BUILTINS_DONE = False


def _register_builtin_tasks() -> None:
    """THE place where built-in tasks are registered (imports stay lazy: nothing heavy at import time)."""
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    _BUILTINS_DONE = True
    from oar_rl.study.tasks_arithmetic import ARITHMETIC
    from oar_rl.study.tasks_wordproblems import WORDPROBLEMS

    register(ARITHMETIC)
    register(WORDPROBLEMS)
