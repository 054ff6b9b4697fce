"""The first erroneous pivot of a word-problem completion: where a wrong rollout first went wrong.

A completion of `oar_rl.data.wordproblems` writes one equation per solution step, ``a<op>b=r``, in the
order of the problem's events (`WordProblem.steps`, the true ``(a, op, b, r)`` of each step; a bags event
is two steps, ``k*m=p`` then ``acc+p=r``). :func:`first_error` compares the written steps with the true
ones, in writing order, and returns the first pivot that differs:

- ``operand``: an operand that is not the true one (a wrong quantity, or an earlier step's result copied
  wrong). Written operands of ``+`` and ``*`` may come in either order (``12+14`` for ``14+12``).
- ``operator``: the operation is not the event's (``-`` for a purchase).
- ``slip``: the operands and the operator are right and the result is not (``8+5=14``): the fallible
  teacher's mistake (`wordproblems.teacher_slips`), which the shipped warm start samples.
- ``extra_step``: every true step is written correctly and one more equation follows; its operands and
  operator are the error.
- ``restate`` (the long regime, ``restate=True``): the step is right and the running total restated after
  it (`wordproblem_phrases.RESTATES`: "That makes 17 pears.") says another number; the restated number is
  the error.

The long regime (`oar_rl.data.wordproblems.LONG_CONFIG`) writes numbers outside the equations: after every
change of the stock its running total. With ``restate=True`` a number inside one of the `RESTATES`
sentences belongs to the equation before it, as part of that step (a restatement before the first
equation is unparseable); with the default ``False`` (the short regime, which never restates) any number
outside an equation makes the completion unparseable, as before. A trap event's misread (a gain read as a
loss, `teacher_slips`' ``misread``) is an ``operator`` error at the trap's step.

Up to the first error every written value equals the true one, so comparing with the true steps is
comparing with the true state of the story at that point. Completions where no pivot can be blamed are
classified and never guessed: ``unparseable`` (no single closed answer span at the end, or a number or
operator in the reasoning outside a complete equation), ``missing_step`` (the written steps are right but
fewer than the true ones), ``answer_copy`` (every step right, the answer span says something else),
``correct``. Not in the paper: this is the ground truth of *blame* that the project's testbed can give.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from oar_rl.data.wordproblem_phrases import RESTATES
from oar_rl.data.wordproblems import label_roles

ErrorKind = Literal["operand", "operator", "slip", "extra_step", "restate"]
Status = Literal["error", "unparseable", "missing_step", "answer_copy", "correct"]
STATUSES: tuple[str, ...] = ("error", "unparseable", "missing_step", "answer_copy", "correct")
ERROR_KINDS: tuple[str, ...] = ("slip", "operand", "operator", "extra_step", "restate")

_EQUATION_RE = re.compile(r"(\d+)([+\-*])(\d+)=(\d+)")
_NUMBER_RE = re.compile(r"\d+")
_OPERATOR_RE = re.compile(r"(?<=\d)[+\-*](?=\d)")
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
Span = tuple[int, int]


def _restate_pattern(template: str) -> str:
    """A `RESTATES` template as a regex: {r} the one captured number, any other placeholder one word."""
    parts = re.split(r"(\{[A-Za-z]+\})", template)
    return "".join(
        r"(\d+)" if t == "{r}" else r"[A-Za-z]+" if t.startswith("{") else re.escape(t) for t in parts
    )


_RESTATE_RE = re.compile(r"(?<![A-Za-z])(?:" + "|".join(_restate_pattern(t) for t in RESTATES) + ")")


@dataclass(frozen=True)
class WrittenStep:
    """One equation as written: values and the character span [lo, hi) of each of its four pivots."""

    a: int
    op: str
    b: int
    r: int
    spans: tuple[Span, Span, Span, Span]
    """Character spans of a, op, b and r in the completion."""
    restated: tuple[tuple[int, Span], ...] = ()
    """(value, character span) of each running total restated after the equation (the long regime)."""


@dataclass(frozen=True)
class FirstError:
    """Where a completion first went wrong (module docstring)."""

    status: Status
    kind: ErrorKind | None = None
    """The error's kind when `status` is 'error'."""
    step: int | None = None
    """0-based index of the written step holding the first error."""
    spans: tuple[Span, ...] = ()
    """Character spans of the erroneous pivot(s): one number or operator; an extra step's a, op and b."""
    last_result: Span | None = None
    """Character span of the last written step's result (its digits)."""
    steps_written: int = 0
    steps_true: int = 0

    @property
    def before_last_step(self) -> bool:
        """The first error lies in a step before the last written one (it was carried forward)."""
        return self.status == "error" and self.step is not None and self.step < self.steps_written - 1


def written_steps(reasoning: str, restate: bool = False) -> list[WrittenStep] | None:
    """The equations of a completion's reasoning in order, or None when a number or an operator between
    digits stands outside a complete ``a<op>b=r`` (the steps cannot be aligned). `restate`: a number in a
    `RESTATES` sentence after an equation is that equation's restated total, not a stray number (None
    when such a sentence comes before the first equation)."""
    steps, covered = [], set()
    for m in _EQUATION_RE.finditer(reasoning):
        spans = tuple((m.start(g), m.end(g)) for g in (1, 2, 3, 4))
        steps.append(WrittenStep(int(m[1]), m[2], int(m[3]), int(m[4]), spans))  # type: ignore[arg-type]
        covered.update(spans)
    restated: dict[int, list[tuple[int, Span]]] = {}
    for m in _RESTATE_RE.finditer(reasoning) if restate else ():
        g = m.lastindex  # each alternative captures exactly one number
        owner = [j for j, w in enumerate(steps) if w.spans[3][1] <= m.start()]
        if g is None or not owner:
            return None
        restated.setdefault(owner[-1], []).append((int(m[g]), (m.start(g), m.end(g))))
        covered.add((m.start(g), m.end(g)))
    numbers = {(m.start(), m.end()) for m in _NUMBER_RE.finditer(reasoning)}
    operators = {(m.start(), m.end()) for m in _OPERATOR_RE.finditer(reasoning)}
    if (numbers | operators) - covered:
        return None
    return [replace(w, restated=tuple(restated.get(j, ()))) for j, w in enumerate(steps)]


def _compare(w: WrittenStep, true: tuple[int, str, int, int]) -> tuple[ErrorKind, tuple[Span, ...]] | None:
    """The first wrong pivot of one written step against the true step, in writing order; None if right."""
    a, op, b, r = true
    commuted = w.op == op and op in "+*" and (w.a, w.b) == (b, a)
    if not commuted:
        if w.a != a:
            return "operand", (w.spans[0],)
        if w.op != op:
            return "operator", (w.spans[1],)
        if w.b != b:
            return "operand", (w.spans[2],)
    if w.r != r:
        return "slip", (w.spans[3],)
    for value, span in w.restated:
        if value != r:
            return "restate", (span,)
    return None


def first_error(
    completion: str, true_steps: tuple[tuple[int, str, int, int], ...], answer: int, *, restate: bool = False
) -> FirstError:
    """The first erroneous pivot of `completion` against the problem's true steps and answer.

    Args:
        completion: the completion text (as decoded from the sampled ids).
        true_steps: `WordProblem.steps`, the true (a, op, b, r) of each step in order.
        answer: the true final answer (`WordProblem.answer`).
        restate: the completion may restate the running total after an equation (the long regime,
            `WordProblemConfig.restate`); see the module docstring.

    Returns:
        A :class:`FirstError`; `status` says whether a pivot was found and why not.
    """
    n_true = len(true_steps)
    if label_roles(completion) is None:  # not exactly one closed answer span at the end
        return FirstError("unparseable", steps_true=n_true)
    span = _ANSWER_RE.search(completion)
    assert span is not None  # label_roles accepted it
    steps = written_steps(completion[: span.start()], restate)
    if not steps:
        return FirstError("unparseable", steps_true=n_true)
    last = steps[-1].spans[3]
    common = dict(last_result=last, steps_written=len(steps), steps_true=n_true)
    for j, w in enumerate(steps):
        if j >= n_true:
            return FirstError("error", "extra_step", j, w.spans[:3], **common)
        wrong = _compare(w, true_steps[j])
        if wrong is not None:
            return FirstError("error", wrong[0], j, wrong[1], **common)
    if len(steps) < n_true:
        return FirstError("missing_step", **common)
    if span.group(1).strip() != str(answer):
        return FirstError("answer_copy", **common)
    return FirstError("correct", **common)
