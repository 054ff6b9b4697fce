"""The math-verify side of accuracy: what runs inside a verification worker process.

`score_math` scores one completion against one gold:

* Gold and prediction go through the same parser (`parse_answer`): cosmetic LaTeX removed
  (`oar_rl.rewards.extract.normalise_answer`), wrapped in ``$…$`` unless it already has math delimiters
  (Hub golds such as MATH-500's ``\\left( 3, \\frac{\\pi}{2} \\right)`` are bare LaTeX), parsed with
  math-verify's full LaTeX normalisation (which repairs brace-less ``\\frac43``, ``\\frac 59``, ``\\sqrt5``),
  then without the wrapper as a fallback. A gold that yields no mathematical object gives ``None``.
* The prediction is the extracted answer (`oar_rl.rewards.extract.extract_prediction`), scored on its
  most literal parse that yields math (the wrapped one; the unwrapped text when the wrapped one has
  none). Both parses are tried, any that verifies scoring 1.0, only for an answer with one number and
  prose words (``5 dollars``: in math mode the words become a product of letters, the unwrapped parse
  reads the number). Trying both for every answer, as before, scored hedges such as ``2 or 5``,
  ``7, 5``, ``x = 3, y = 5`` or ``\\pm 5`` right against the gold 5: the unwrapped parse picks their
  last number.
* A completion without any answer marker is parsed as a whole, LaTeX only inside ``$…$``/``\\[…\\]``
  (TRL's choice: no guessing numbers out of prose).
* ``verify(gold, pred)`` is called with the gold first (math-verify is asymmetric).

Departure from TRL's ``accuracy_reward``: TRL parses predictions with only unit normalisation, so brace-
less LaTeX inside ``\\boxed{}`` fails there while the same text parses elsewhere; here both sides get the
same full normalisation whatever the prompt format.
"""

from __future__ import annotations

import functools
import os
import re
import time

from oar_rl.rewards.extract import NUMBER_RE, extract_prediction, normalise_answer

_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")  # two or more letters, not a \command


def _wrap_math(text: str) -> str:
    return text if ("$" in text or "\\boxed" in text or "\\[" in text or "\\(" in text) else f"${text}$"


def _has_math(parsed: list) -> bool:
    return any(not isinstance(x, str) for x in parsed)


@functools.lru_cache(maxsize=1)
def _configs() -> tuple:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    latex = LatexExtractionConfig(boxed_match_priority=0)  # full normalisation (malformed operators too)
    anchored = LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)
    return [latex, ExprExtractionConfig()], [anchored]


def _unit_words(text: str) -> bool:
    """Whether an extracted answer is one number with prose words (``5 dollars``, ``The answer is 5``):
    the only answers whose unwrapped parse is tried beside the wrapped one (no hedge between numbers)."""
    s = normalise_answer(text)
    return len(NUMBER_RE.findall(s)) == 1 and _PROSE_WORD.search(s) is not None


def parse_answer(text: str, inner_timeout: int) -> list[list]:
    """math-verify parses of an extracted answer (gold or prediction), most literal first; [] if none."""
    from math_verify import parse

    answer_configs, _ = _configs()
    s = normalise_answer(text)
    out: list[list] = []
    for attempt in dict.fromkeys((_wrap_math(s), s)):
        parsed = parse(attempt, extraction_config=answer_configs, parsing_timeout=inner_timeout)
        if _has_math(parsed):
            out.append(parsed)
    return out


def score_math(gold: str, text: str, inner_timeout: int) -> float | None:
    """math-verify score of one completion ``text`` against ``gold``; None when the gold is unparseable."""
    from math_verify import parse, verify

    golds = parse_answer(gold, inner_timeout)
    if not golds:
        return None
    pred, marker = extract_prediction(text)
    if marker is not None or not pred:
        preds = parse_answer(pred, inner_timeout) if pred else []
        preds = preds if _unit_words(pred) else preds[:1]  # no hedge: the most literal parse only
    else:
        _, whole_text = _configs()
        parsed = parse(
            normalise_answer(text),
            extraction_config=whole_text,
            extraction_mode="first_match",
            parsing_timeout=inner_timeout,
        )
        preds = [parsed] if parsed else []
    gold_parsed = golds[0]
    for pred_parsed in preds:
        if verify(gold_parsed, pred_parsed, timeout_seconds=inner_timeout):
            return 1.0
    return 0.0


HANG_MARKER = "__oar_rl_test_hang__"
CRASH_MARKER = "__oar_rl_test_crash__"


def score_with_test_hang(gold: str, text: str, inner_timeout: int) -> float | None:
    """Test-only scorer: hangs forever when the text has the hang marker, dies on the crash marker."""
    if HANG_MARKER in text:
        while True:  # like a hung C call: only killing the process ends it
            time.sleep(3600)
    if CRASH_MARKER in text:
        os._exit(1)
    return score_math(gold, text, inner_timeout)
