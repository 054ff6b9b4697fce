"""Prompt templates: how a raw math question is turned into the text prompt a policy sees.

Two formats, both from the paper's ecosystem (the paper itself does not print its prompt):

* ``"answer-tag"`` -- R1-style: reason first (optionally inside ``<think>…</think>``), then put only the
  final answer inside ``<answer>…</answer>``. Matches `oar_rl.rewards.format_reward` and the answer-span
  probes, which look for the same tags.
* ``"boxed"`` -- the Qwen2.5-Math prompt: "Please reason step by step, and put your final answer within
  \\boxed{}." `oar_rl.rewards.accuracy_reward` reads both formats with one rule (`oar_rl.rewards.extract`).

``None`` (or the string ``"none"``) leaves the question as it is.
"""

from __future__ import annotations

from typing import Literal

TemplateName = Literal["answer-tag", "boxed"]
TEMPLATE_NAMES: tuple[str, ...] = ("answer-tag", "boxed")

ANSWER_TAG_TEMPLATE = (
    "A conversation between User and Assistant. The User asks a math question and the Assistant solves it. "
    "The Assistant first reasons step by step, then gives only the final answer inside <answer> </answer> "
    "tags, i.e. <think> reasoning here </think> <answer> final answer here </answer>.\n"
    "User: {question}\n"
    "Assistant:"
)
BOXED_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


def check_template(template: str | None) -> TemplateName | None:
    """``template`` validated: one of TEMPLATE_NAMES, or None for raw ("none" is accepted for CLIs)."""
    if template is None or template == "none":
        return None
    if template not in TEMPLATE_NAMES:
        raise ValueError(f"unknown template {template!r}; valid templates: {', '.join(TEMPLATE_NAMES)}, none")
    return template  # type: ignore[return-value]


def apply_template(question: str, template: str | None) -> str:
    """The prompt text for ``question`` under ``template`` (None: the question unchanged)."""
    name = check_template(template)
    if name is None:
        return question
    if name == "answer-tag":
        return ANSWER_TAG_TEMPLATE.format(question=question.strip())
    elif name == "boxed":
        return BOXED_TEMPLATE.format(question=question.strip())
    raise AssertionError(name)  # pragma: no cover
