"""Answer extraction: which part of a completion is its final answer (pure text rules, no math-verify).

One rule for every prompt format (``answer-tag``, ``boxed``, none):

1. Candidate *markers* in the completion are ``<answer>…</answer>``, ``\\boxed{…}`` / ``\\fbox{…}``
   (balanced braces; brace-less ``\\boxed 5`` / ``\\boxed\\frac43`` runs to the next ``$``, ``\\]``, ``\\)``
   or line end) and "final answer is X" (X a ``$…$``, ``$$…$$``, ``\\(…\\)`` or ``\\[…\\]`` span, else
   the text up to the end of the sentence or line when it can be an answer: it holds a digit or a LaTeX
   command, or is one short word such as ``B`` or ``yes``; prose such as "the final answer is
   consistent with the constraints" after a ``\\boxed{42}`` is no marker and does not override the box).
2. The marker that **ends last** wins, so a final "the final answer is $5$" after intermediate
   ``\\boxed{}``s is scored on 5, and an ``<answer>`` tag after a stray ``\\boxed{3}`` on the tag.
3. The rule is applied again inside the winner's content (``<answer>\\boxed{4}</answer>`` → ``4``;
   ``the final answer is $\\boxed{5}$`` → ``5``).
4. Without any marker the prediction is the whole completion (then math-verify only reads LaTeX inside
   math delimiters from it, see `oar_rl.rewards.verify`).

Unclosed markers (``<answer>4`` cut off by the length limit) are not markers. `answer_char_span` gives the
character span of that answer in the completion, for code that must mark the same answer in tokens, and
`reasoning_end` where the answer's *introducing format* starts (the ``<answer>`` tag, ``\\boxed{``, "the
final answer is", with a short lead-in such as "The final answer is $" before a ``\\boxed``): everything
before it is the reasoning.

`normalise_answer` is applied to golds and predictions alike before any comparison: escaped dollars
(``\\$32,\\!348``, MATH-500's currency golds), ``\\!``/``\\,`` thin spaces and ``{,}`` thousands separators
are removed. `as_number` is the exact cheap path for plain numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

Marker = Literal["answer", "boxed", "final"]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
_FINAL_RE = re.compile(r"final answer is\s*:?[ \t]*", re.IGNORECASE)
_MATH_SPANS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_BRACELESS_END = re.compile(r"\$|\\\]|\\\)|\n")
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\n|$")
NUMBER_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")
_MAX_DEPTH = 4


def missing_gold(value: Any) -> bool:
    """Whether a gold cell is empty (None or NaN): ``str()`` would make it a parseable "None"/"nan"."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
    """The text of one completion: the string itself, or the joined assistant contents of a message list.

    Message contents may be strings or lists of ``{"type": "text", "text": ...}`` parts.
    """
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, Sequence):
        raise ValueError(
            f"a completion must be a string or a list of message dicts, got {type(completion).__name__}"
        )
    parts: list[str] = []
    for message in completion:
        if not isinstance(message, dict):
            raise ValueError(f"a conversational completion must hold message dicts, got {message!r}")
        if message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(str(content))
    return "\n".join(parts)


def _balanced(text: str, open_at: int) -> int | None:
    """Index of the brace closing the ``{`` at ``open_at``; None when it is never closed."""
    depth = 0
    for j in range(open_at, len(text)):
        ch = text[j]
        if ch == "\\":  # an escaped brace \{ \} does not count
            continue
        if ch == "{" and (j == 0 or text[j - 1] != "\\"):
            depth += 1
        elif ch == "}" and text[j - 1] != "\\":
            depth -= 1
            if depth == 0:
                return j
    return None


def _boxed_markers(text: str) -> list[tuple[int, int, int]]:
    """(marker end, content start, content end) of every ``\\boxed``/``\\fbox`` with a closed argument."""
    out = []
    for m in _BOXED_RE.finditer(text):
        i = m.end()
        if i < len(text) and text[i] == "{":
            j = _balanced(text, i)
            if j is not None:
                out.append((j + 1, i + 1, j))
        else:  # brace-less: \boxed 5, \boxed\frac43 -- up to the end of the math run
            stop = _BRACELESS_END.search(text, i)
            j = stop.start() if stop else len(text)
            if text[i:j].strip():
                out.append((j, i, j))
    return out


def _find_closing(text: str, delim: str, start: int) -> int:
    """Index of the next ``delim`` at or after ``start`` that is not an escaped ``\\$``; -1 if none."""
    j = text.find(delim, start)
    while j > 0 and delim.startswith("$") and text[j - 1] == "\\":
        j = text.find(delim, j + 1)
    return j


def _answer_like(prose: str) -> bool:
    """Whether the undelimited text after "final answer is" can be an answer: a digit or a LaTeX command
    in it, or one short word (at most 3 letters: ``B``, ``(C)``, ``yes``); not prose ("correct", "not
    obvious", "consistent with the constraints")."""
    s = prose.strip()
    short_word = len(s.split()) == 1 and sum(c.isalpha() for c in s) <= 3
    return bool(s) and (any(c.isdigit() for c in s) or "\\" in s or short_word)


def _final_markers(text: str) -> list[tuple[int, int, int]]:
    """(marker end, content start, content end) of every "final answer is X"."""
    out = []
    for m in _FINAL_RE.finditer(text):
        i = m.end()
        for left, right in _MATH_SPANS:
            if text.startswith(left, i):
                j = _find_closing(text, right, i + len(left))
                if j >= 0 and text[i + len(left) : j].strip():
                    out.append((j + len(right), i + len(left), j))
                break
        else:
            stop = _SENTENCE_END.search(text, i)
            j = stop.start() if stop else len(text)
            if _answer_like(text[i:j]):
                out.append((j, i, j))
    return out


def find_markers(text: str) -> list[tuple[int, Marker, int, int]]:
    """Every closed answer marker of ``text`` as (marker end, kind, content start, content end), by end."""
    found: list[tuple[int, Marker, int, int]] = [
        (m.end(), "answer", m.start(1), m.end(1)) for m in _ANSWER_RE.finditer(text)
    ]
    found += [(end, "boxed", i, j) for end, i, j in _boxed_markers(text)]
    found += [(end, "final", i, j) for end, i, j in _final_markers(text)]
    order = {"final": 0, "boxed": 1, "answer": 2}  # equal ends: the enclosing marker wins, then recurse
    return sorted(found, key=lambda f: (f[0], order[f[1]]))


# A short lead-in right before the answer marker ("The final answer is $", "Answer: \\(", "so the answer is
# ", "**Final Answer**", "Therefore, the "), matched backwards from the marker's start: it is format, not
# reasoning. "answer" alone is a lead-in only as a label (followed by ":" or at a line's start): in "I answer
# <answer>4</answer>" it is the reasoning's word.
_CONNECTIVE = r"(?:(?:so|thus|therefore|hence)[,:]?\s+)?"
_EMPHASIS = r"(?:\*\*|__|\*|_)?"  # markdown bold / italic around the phrase
_ANSWER_PHRASE = (
    r"(?:" + _CONNECTIVE + r"(?:the\s+)?final\s+answer(?:\s+is)?"  # (so) (the) final answer (is)
    r"|" + _CONNECTIVE + r"the\s+answer(?:\s+is)?"  # (so) the answer (is)
    r"|" + _CONNECTIVE + r"answer\s+is"  # (so) answer is
    r"|answer(?=\s*(?:\*\*|__|\*|_)?\s*:)"  # Answer:
    r"|(?<![^\n])answer)"  # Answer, at a line's start
)
# before <answer> / \boxed: "The final answer is $", "so the answer is ", "Answer: ", "### Final Answer"
_LEAD_IN_RE = re.compile(
    r"\s*(?:(?<![A-Za-z])(?:(?<![^\n])\#{1,6}\s*)?"
    + _EMPHASIS
    + _ANSWER_PHRASE
    + _EMPHASIS
    + r"\s*:?\s*"
    + _EMPHASIS
    + r")?(?:\$\$|\$|\\\[|\\\()?\s*$",
    re.IGNORECASE,
)
_DOLLAR_BEFORE_RE = re.compile(r"(\$\$|\$)\s*$")  # a $ / $$ right before the marker
# before a "final answer is" phrase: "Therefore, the "
_PHRASE_LEAD_IN_RE = re.compile(
    r"\s*(?:(?<![A-Za-z])" + _EMPHASIS + _CONNECTIVE + r"(?:the\s+)?)?$", re.IGNORECASE
)
_LEAD_IN_WINDOW = 48  # characters before a marker searched for its lead-in
_MARKER_RE: dict[str, re.Pattern[str]] = {
    "answer": re.compile(r"<answer>"),
    "boxed": _BOXED_RE,
    "final": _FINAL_RE,
}


def reasoning_end(text: str) -> int | None:
    """Character index where the reasoning of ``text`` ends: the start of the format that introduces the
    final answer, or None when the completion has no closed answer marker (then all of it is reasoning).

    The marker is the one :func:`answer_char_span` picks first (the last-ending one): its ``<answer>`` tag,
    its ``\\boxed``/``\\fbox`` command or its "final answer is" phrase. A short lead-in right before it
    ("The final answer is $", "Answer:", "so the answer is ", "**Final Answer**", "Therefore, the ") counts
    as format too, and so does the whitespace before it; a ``$`` / ``$$`` that closes math the reasoning
    opened stays reasoning (in "we have $x=2$ \\boxed{2}" the reasoning ends after the second ``$``).
    Everything from there on (lead-in, tag, answer content, closing format) is not reasoning.
    """
    markers = find_markers(text)
    if not markers:
        return None
    _end, kind, content_start, _content_end = markers[-1]
    start = content_start
    for m in _MARKER_RE[kind].finditer(text, 0, content_start + 1):
        if m.end() <= content_start:
            start = m.start()  # the last opening of this kind before the content
    return lead_in_start(text, start, phrase=kind == "final")


def lead_in_start(text: str, start: int, *, phrase: bool = False) -> int:
    """``start`` moved back over a short lead-in that introduces an answer marker beginning at ``start``
    (see :func:`reasoning_end`): "The final answer is $", "so the answer is ", "Answer:" before a tag or
    ``\\boxed``; "Therefore, the " before a "final answer is" phrase (`phrase`). A bare connective ("so
    \\boxed{5}") is reasoning."""
    lo = max(0, start - _LEAD_IN_WINDOW)
    if not phrase:
        dollar = _DOLLAR_BEFORE_RE.search(text, lo, start)
        if dollar is not None and _math_open_at(text, dollar.start()) == dollar.group(1):
            return dollar.end(1)  # it closes math the reasoning opened: the reasoning's own delimiter
    lead = (_PHRASE_LEAD_IN_RE if phrase else _LEAD_IN_RE).search(text, lo, start)
    return start if lead is None else min(start, lead.start())


def _math_open_at(text: str, pos: int) -> str | None:
    """The ``$`` / ``$$`` math span open at character `pos` of `text` (an escaped ``\\$`` does not count),
    or None when none is."""
    open_: str | None = None
    i = 0
    while i < pos:
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "$":
            delim = "$$" if text.startswith("$$", i) and i + 1 < pos else "$"
            if open_ is None:
                open_ = delim
            elif open_ == delim:
                open_ = None
            i += len(delim)
            continue
        i += 1
    return open_


def answer_char_span(text: str) -> tuple[int, int, Marker | None]:
    """(start, end, marker kind) of the final answer in ``text``: ``text[start:end]`` is the prediction.

    The one rule of this module (the last-ending marker, then the rule again inside it), with surrounding
    whitespace excluded. Without a marker: the whole (stripped) text and kind None. Character offsets, so
    callers can map the answer to tokens through a tokenizer's offset mapping.
    """
    start, end, kind = 0, len(text), None
    for _ in range(_MAX_DEPTH):
        markers = find_markers(text[start:end])
        if not markers:
            break
        _, inner_kind, i, j = markers[-1]
        if text[start + i : start + j].strip() == text[start:end].strip():
            break
        start, end, kind = start + i, start + j, inner_kind
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end, kind


def extract_prediction(text: str) -> tuple[str, Marker | None]:
    """The prediction text of a completion and the kind of marker it came from (None: no marker).

    See the module docstring for the rule (the last-ending marker wins, then the rule again inside it).
    """
    start, end, kind = answer_char_span(text)
    return text[start:end], kind


def normalise_answer(text: str) -> str:
    """Cosmetic LaTeX that never changes a value, removed: ``\\$``, ``\\!``, ``\\,``, ``{,}``; stripped."""
    s = text.replace("\\$", "").replace("\\!", "").replace("{,}", ",").replace("\\,", "")
    return s.strip()


def as_number(text: str) -> Fraction | None:
    """``text`` as an exact number when it is a plain number (``19``, ``-3.5``, ``1,234``, ``$18.90$``)."""
    s = normalise_answer(text)
    if len(s) > 64:
        return None
    s = s.strip("$").strip()
    if s.startswith("\\boxed{") and s.endswith("}"):
        s = s[len("\\boxed{") : -1].strip()
    if not NUMBER_RE.fullmatch(s):
        return None
    return Fraction(s.replace(",", ""))
