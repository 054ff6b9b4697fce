"""The TRL reward functions: ``accuracy_reward`` (and its factory) and ``format_reward``.

TRL 1.16's contract: ``fn(completions, **dataset_columns) -> list[float | None]``; completions are strings
or lists of message dicts; ``None`` tells TRL to skip that completion for this reward.

``accuracy_reward``, step by step:

1. An empty completion scores 0.0 straight away (the gold is not looked at).
2. The prediction is extracted by the one rule of `oar_rl.rewards.extract` (the last-ending of
   ``<answer>…</answer>``, ``\\boxed{…}``, "final answer is X"; else the whole completion), whatever the
   prompt format.
3. Cheap path: when prediction and gold are both plain numbers after removing cosmetic LaTeX (``\\$``,
   ``\\!``, thousands separators), they are compared exactly as fractions, in this process.
4. Otherwise math-verify scores it in a worker process (`oar_rl.rewards.verify`), bounded in time by
   `oar_rl.rewards.pool` (a hang scores 0.0).
5. A gold math-verify cannot parse scores ``None`` for every completion of it and is reported by a
   warning naming it (once per gold and process) and by ``rewards/accuracy_reward/unparseable_gold_frac``
   through TRL's ``log_metric``: never a silent 0.

Departures from TRL's ``accuracy_reward``: the gold column is ``answer`` (``solution`` accepted); answer
tags and "final answer is" are honoured; plain numbers need no LaTeX delimiters; both sides get
math-verify's full normalisation; hangs cost one reward instead of the run.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from oar_rl.rewards import pool as _pool
from oar_rl.rewards.extract import as_number, completion_text, extract_prediction, missing_gold

logger = logging.getLogger(__name__)

_FORMAT_RE = re.compile(
    r"\s*(?:<think>(?P<think>.*?)</think>)?(?P<pre>.*?)<answer>(?P<ans>.*?)</answer>\s*", re.DOTALL
)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")

_WARNED_GOLDS: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _gold_list(answer: Sequence[Any] | None, kwargs: dict[str, Any], n: int) -> list[str]:
    if answer is None:
        answer = kwargs.get("solution")
    if answer is None:
        raise ValueError(
            "accuracy_reward needs the gold answers as the `answer` dataset column (or `solution`); "
            f"got columns {sorted(kwargs)}"
        )
    if len(answer) != n:
        raise ValueError(f"got {n} completions but {len(answer)} gold answers")
    for i, a in enumerate(answer):
        if missing_gold(a):
            raise ValueError(f"gold answer {i} of the batch is {a!r}: the row has no gold; fix or drop it")
    return [str(a) for a in answer]


def warn_unparseable_gold(gold: str, count: int) -> None:
    """The loud warning for a gold math-verify cannot parse (once per gold and process)."""
    with _WARNED_LOCK:
        if gold in _WARNED_GOLDS:
            return
        _WARNED_GOLDS.add(gold)
    logger.warning(
        "gold answer %r cannot be parsed by math-verify: its %d completion(s) score None (TRL skips them, "
        "evaluation reports the problem as unscored); fix the dataset's answer column",
        gold,
        count,
    )


def make_accuracy_reward(
    timeout: float = _pool.DEFAULT_TIMEOUT,
    workers: int = _pool.DEFAULT_WORKERS,
    *,
    _scorer: str | Callable[..., float | None] = _pool.DEFAULT_SCORER,
) -> Callable[..., list[float | None]]:
    """An ``accuracy_reward`` with its own verification timeout (seconds) and worker count.

    The returned function is named ``accuracy_reward`` (TRL logs rewards by function name).
    ``_scorer`` ("module:function") replaces the worker's scoring function; tests use it to inject hangs.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")

    def accuracy_reward(
        completions: Sequence[str | Sequence[dict[str, Any]]],
        answer: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        texts = [completion_text(c) for c in completions]
        golds = _gold_list(answer, kwargs, len(texts))
        rewards: list[float | None] = [0.0] * len(texts)
        slow: list[int] = []
        extracted: list[str] = []
        for i, (gold, text) in enumerate(zip(golds, texts, strict=True)):
            pred, _ = extract_prediction(text)
            extracted.append(pred)
            gold_num, pred_num = as_number(gold), as_number(pred)
            if not text.strip() and gold_num is not None:
                continue  # empty completion: 0.0 (other golds go to the pool: an unparseable one is None)
            if gold_num is not None and pred_num is not None:
                rewards[i] = float(gold_num == pred_num)
            else:
                slow.append(i)
        if slow:
            scored = _pool.get_pool(timeout, workers).score(
                [(golds[i], texts[i]) for i in slow], scorer=_scorer
            )
            for i, r in zip(slow, scored, strict=True):
                rewards[i] = r
        unparseable = [golds[i] for i in slow if rewards[i] is None]
        for gold in dict.fromkeys(unparseable):
            warn_unparseable_gold(gold, unparseable.count(gold))
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and texts:
            log_metric("rewards/accuracy_reward/unparseable_gold_frac", len(unparseable) / len(texts))
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("extracted_answer", extracted)
        return rewards

    accuracy_reward.__doc__ = _ACCURACY_DOC
    return accuracy_reward


_ACCURACY_DOC = """1.0 if a completion's answer equals the gold ``answer``, else 0.0.

``None`` (with a warning naming the gold) when the gold is unparseable; 0.0 for an empty completion or a
verification that hangs past the timeout. See `oar_rl.rewards.functions` for the rules.
"""


accuracy_reward = make_accuracy_reward()


def format_reward(completions: Sequence[str | Sequence[dict[str, Any]]], **kwargs: Any) -> list[float]:
    """1.0 when the completion is ``[<think>…</think>] reasoning <answer>…</answer>``, else 0.0.

    Exactly one ``<answer>`` block with non-empty content, nothing but whitespace after it; an optional
    single ``<think>`` block must open the completion; no stray tags anywhere.
    """
    out: list[float] = []
    for completion in completions:
        text = completion_text(completion)
        m = _FORMAT_RE.fullmatch(text)
        ok = (
            m is not None
            and bool(m["ans"].strip())
            and not any(tag in (m[g] or "") for g in ("think", "pre", "ans") for tag in _TAGS)
        )
        out.append(1.0 if ok else 0.0)
    return out
