"""The embedded tasks' reward: the exact integer checker, shared by both tasks.

`exact_reward` is 1.0 when the completion's last ``<answer>`` holds the gold integer, else 0.0. The
tasks themselves (data and splits, reward and check, role labeller, warm start, defaults) are
registered in one place, `oar_rl.study.tasks` (`get_task`, `task_names`).
"""

from __future__ import annotations

from typing import Any


def exact_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 when the completion's last `<answer>` holds the right integer, else 0.0 (exact checker)."""
    from oar_rl.data.arithmetic import check
    from oar_rl.rewards import completion_text

    return [float(check(completion_text(c), a)) for c, a in zip(completions, answer, strict=True)]
