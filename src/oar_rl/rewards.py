"""Reward functions for math RL: accuracy (math-verify, bounded in time), format, and a safety wrapper.

All functions follow TRL 1.16's reward contract: ``fn(completions, **dataset_columns) -> list[float | None]``
where ``completions`` are strings (standard format) or lists of message dicts (conversational format), the
gold answers arrive as the ``answer`` dataset column (``solution``, TRL's name, is accepted as a fallback),
and ``None`` tells TRL to skip that completion for this reward.

Accuracy, step by step (``accuracy_reward``):

1. An empty completion scores 0.0 straight away (not ``None``; the gold is not looked at).
2. The *prediction text* is the content of the last ``<answer>…</answer>`` if there is one, else the
   content of the last ``\\boxed{…}``, else the whole completion.
3. Cheap path: when the prediction text and the gold are both plain numbers (``19``, ``-3.5``, ``1,234``;
   thousands separators stripped), they are compared exactly as fractions, in this process.
4. Otherwise math-verify runs in a worker process. Gold is parsed first (wrapped in ``$…$`` unless it
   already has math delimiters, because Hub gold such as MATH-500's ``\\left( 3, \\frac{\\pi}{2} \\right)``
   is bare LaTeX); a gold that yields no mathematical object gives ``None``. Answer-tag content is
   parsed the same way (then without the wrapper as a fallback); a completion without answer tags is
   parsed with TRL's own configuration (boxed first, LaTeX only inside ``$…$``/``\\[…\\]``/``\\boxed{}``).
   ``verify(gold, pred)`` is called with the gold first.

Time bound. math-verify's own timeout is ``signal.alarm`` (main thread only) and some inputs hang past
it. Verification therefore runs in a small pool of long-lived worker processes -- fresh interpreters
started with ``subprocess`` and connected by a socket pair (not ``multiprocessing`` spawn/forkserver,
which re-run the caller's ``__main__`` and so break unguarded scripts and notebooks; not fork, which
would copy CUDA and thread state). Inside a worker math-verify runs in the main thread, so its own
alarms work too (each set to a third of the budget). A completion whose verification does not answer
within ``timeout`` seconds has its worker killed and replaced, and **scores 0.0** (a hang counts as a
wrong answer, never as a crash); the other completions of the batch are still scored. A worker that
dies, or a scorer that raises, also costs that one completion 0.0 (logged). The pool is process-wide
per (timeout, workers), created on first use, reused across calls, safe to call from any thread
(concurrent calls are serialised by a lock), rebuilt after a fork, and shut down at interpreter exit.
A worker's start-up (importing sympy, ~1 s) is not charged to the timeout.

Departures from TRL's ``accuracy_reward``: the gold column is ``answer``; answer tags are honoured;
plain numbers are accepted without LaTeX delimiters; hangs cost one reward instead of the run.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT: float = 10.0
"""Seconds one completion's verification may take before its worker is killed (it then scores 0.0)."""
DEFAULT_WORKERS: int = 2
"""Worker processes of the default pool."""
WORKER_START_TIMEOUT: float = 120.0
"""Seconds a fresh worker may take to import math-verify before it is considered broken."""

_DEFAULT_SCORER = "oar_rl.rewards:_score_math"

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")
_FORMAT_RE = re.compile(
    r"\s*(?:<think>(?P<think>.*?)</think>)?(?P<pre>.*?)<answer>(?P<ans>.*?)</answer>\s*", re.DOTALL
)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


# ----------------------------------------------------------------------------------------------------
# text helpers (pure, cheap)


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


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` (or ``\\fbox{…}``) with balanced braces, else None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def extract_prediction(text: str) -> tuple[str, bool]:
    """The prediction text of a completion and whether it came from an answer tag.

    Last ``<answer>…</answer>`` content if any, else last ``\\boxed{}`` content, else the whole text.
    """
    tags = _ANSWER_RE.findall(text)
    if tags:
        return tags[-1].strip(), True
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip(), False
    return text.strip(), False


def _as_number(text: str) -> Fraction | None:
    """``text`` as an exact number when it is a plain number (optionally in ``$…$`` or ``\\boxed{}``)."""
    s = text.strip()
    if len(s) > 64:
        return None
    if s.startswith("\\boxed{") and s.endswith("}"):
        s = s[len("\\boxed{") : -1].strip()
    s = s.strip("$").strip()
    if not _NUMBER_RE.fullmatch(s):
        return None
    return Fraction(s.replace(",", ""))


# ----------------------------------------------------------------------------------------------------
# what runs inside a worker process


def _wrap_math(text: str) -> str:
    return text if ("$" in text or "\\boxed" in text or "\\[" in text or "\\(" in text) else f"${text}$"


def _has_math(parsed: list) -> bool:
    return any(not isinstance(x, str) for x in parsed)


def _score_math(gold: str, text: str, inner_timeout: int) -> float | None:
    """math-verify score of one completion ``text`` against ``gold``; None when the gold is unparseable."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_parsed = parse(_wrap_math(gold), parsing_timeout=inner_timeout)
    if not _has_math(gold_parsed):
        gold_parsed = parse(gold, parsing_timeout=inner_timeout)
        if not _has_math(gold_parsed):
            return None
    pred, from_tag = extract_prediction(text)
    if from_tag:
        candidates = [
            lambda: parse(_wrap_math(pred), parsing_timeout=inner_timeout),
            lambda: parse(
                pred,
                extraction_config=[
                    LatexExtractionConfig(
                        normalization_config=NormalizationConfig(units=True), boxed_match_priority=0
                    ),
                    ExprExtractionConfig(),
                ],
                extraction_mode="first_match",
                parsing_timeout=inner_timeout,
            ),
        ]
    else:  # TRL's configuration, on the whole completion
        candidates = [
            lambda: parse(
                text,
                extraction_config=[
                    LatexExtractionConfig(
                        normalization_config=NormalizationConfig(units=True),
                        boxed_match_priority=0,
                        try_extract_without_anchor=False,
                    )
                ],
                extraction_mode="first_match",
                parsing_timeout=inner_timeout,
            )
        ]
    for candidate in candidates:
        pred_parsed = candidate()
        if pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=inner_timeout):
            return 1.0
    return 0.0


_HANG_MARKER = "__oar_rl_test_hang__"
_CRASH_MARKER = "__oar_rl_test_crash__"


def _score_with_test_hang(gold: str, text: str, inner_timeout: int) -> float | None:
    """Test-only scorer: hangs forever when the text has the hang marker, dies on the crash marker."""
    if _HANG_MARKER in text:
        while True:  # like a hung C call: only killing the process ends it
            time.sleep(3600)
    if _CRASH_MARKER in text:
        os._exit(1)
    return _score_math(gold, text, inner_timeout)


def _resolve(path: str) -> Callable[..., float | None]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _worker_main(fd: int) -> None:  # pragma: no cover - runs in the child process
    """Worker loop on socket ``fd``: import math-verify, say ready, then answer tasks until EOF.

    Messages in: ``("path", [sys.path entries])``, ``(task_id, scorer, gold, text, inner_timeout)``,
    ``None`` (quit). Messages out: ``("ready", None, None)``, ``(task_id, "ok"|"error", value)``.
    """
    import sys
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401  -- pay the import before saying ready

    conn.send(("ready", None, None))
    scorers: dict[str, Callable[..., float | None]] = {}
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        if task[0] == "path":
            sys.path.extend(p for p in task[1] if p not in sys.path)
            continue
        task_id, scorer, gold, text, inner_timeout = task
        try:
            fn = scorers.get(scorer) or scorers.setdefault(scorer, _resolve(scorer))
            conn.send((task_id, "ok", fn(gold, text, inner_timeout)))
        except Exception as exc:
            conn.send((task_id, "error", f"{type(exc).__name__}: {exc}"))


# ----------------------------------------------------------------------------------------------------
# the pool


class _Worker:
    """One verification process: a fresh interpreter (never a fork, never a re-run of ``__main__``).

    ``multiprocessing``'s spawn/forkserver contexts re-import the caller's main script in the child,
    which breaks scripts and notebooks without an ``if __name__ == "__main__"`` guard; a plain
    subprocess connected by a socket pair has no such requirement.
    """

    def __init__(self) -> None:
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        parent, child = socket.socketpair()
        src_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH")) if p)
        code = f"from oar_rl.rewards import _worker_main; _worker_main({child.fileno()})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL
        )
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send(("path", list(sys.path)))
        self.ready = False
        self.started = time.monotonic()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            self.conn.close()


class VerifierPool:
    """Worker processes that run a scorer with a hard per-task timeout; hung workers are replaced.

    ``score(tasks)`` takes ``[(gold, text), ...]`` and returns one ``float | None`` per task: the scorer's
    result, or 0.0 when it timed out, raised, or its worker died. Thread-safe (one batch at a time).
    Raises ``RuntimeError`` only when fresh workers keep dying before they are ready (a broken install).
    """

    MAX_START_FAILURES = 3

    def __init__(self, workers: int = DEFAULT_WORKERS, timeout: float = DEFAULT_TIMEOUT) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.num_workers = workers
        self.timeout = float(timeout)
        self.inner_timeout = max(1, int(self.timeout // 3))  # math-verify's own alarms: parse, parse, verify
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._start_failures = 0
        self.timeouts = 0  # tasks that timed out over the pool's life
        self.restarts = 0  # workers replaced over the pool's life

    def _ensure(self) -> None:
        if self._pid != os.getpid():  # a forked copy: the parent's workers are not ours
            self._workers, self._pid = [], os.getpid()
        for w in [w for w in self._workers if not w.alive()]:
            w.kill()
            self._workers.remove(w)
        while len(self._workers) < self.num_workers:
            self._workers.append(_Worker())

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        if not worker.ready:
            self._start_failures += 1
            if self._start_failures >= self.MAX_START_FAILURES:
                self._workers.remove(worker)
                raise RuntimeError(
                    f"math-verify workers died {self._start_failures} times before becoming ready; "
                    "see their stderr above (is math-verify installed in this interpreter?)"
                )
        self._workers[self._workers.index(worker)] = _Worker()
        self.restarts += 1

    def score(self, tasks: Sequence[tuple[str, str]], scorer: str = _DEFAULT_SCORER) -> list[float | None]:
        if not tasks:
            return []
        with self._lock:
            return self._score_locked(list(tasks), scorer)

    def _score_locked(self, tasks: list[tuple[str, str]], scorer: str) -> list[float | None]:
        from multiprocessing.connection import wait

        self._ensure()
        results: list[float | None] = [0.0] * len(tasks)
        pending = list(range(len(tasks)))[::-1]  # pop() from the end hands tasks out in order
        busy: dict[_Worker, tuple[int, float]] = {}  # worker -> (task index, deadline)
        remaining = len(tasks)
        while remaining:
            now = time.monotonic()
            for w in list(self._workers):
                if w in busy:
                    continue
                if not w.ready and now - w.started > WORKER_START_TIMEOUT:
                    logger.warning(
                        "a math-verify worker did not start in %.0fs; replacing it", WORKER_START_TIMEOUT
                    )
                    self._replace(w)
                elif w.ready and pending:
                    i = pending.pop()
                    try:
                        w.conn.send((i, scorer, tasks[i][0], tasks[i][1], self.inner_timeout))
                        busy[w] = (i, now + self.timeout)
                    except (OSError, ValueError):
                        pending.append(i)
                        self._replace(w)
            deadlines = [d for _, d in busy.values()]
            wait_for = min(deadlines) - now if deadlines else 0.5
            ready = wait([w.conn for w in self._workers], max(0.0, wait_for))
            now = time.monotonic()
            for w in list(self._workers):
                if w.conn in ready:
                    try:
                        task_id, status, value = w.conn.recv()
                    except (EOFError, OSError):  # the worker died
                        if w in busy:
                            i, _ = busy.pop(w)
                            logger.warning("a math-verify worker died on completion %d; it scores 0.0", i)
                            results[i] = 0.0
                            remaining -= 1
                        self._replace(w)
                        continue
                    if task_id == "ready":
                        w.ready, self._start_failures = True, 0
                    elif w in busy and busy[w][0] == task_id:
                        busy.pop(w)
                        remaining -= 1
                        results[task_id] = value if status == "ok" else 0.0
                        if status != "ok":
                            logger.warning(
                                "math-verify raised on completion %d (%s); it scores 0.0", task_id, value
                            )
                elif w in busy and busy[w][1] <= now:
                    i, _ = busy.pop(w)
                    logger.warning(
                        "no math-verify answer in %.1fs on completion %d; worker replaced, it scores 0.0",
                        self.timeout,
                        i,
                    )
                    self.timeouts += 1
                    results[i] = 0.0
                    remaining -= 1
                    self._replace(w)
        return results

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                with contextlib.suppress(Exception):
                    w.conn.send(None)
            for w in self._workers:
                with contextlib.suppress(Exception):
                    w.proc.wait(timeout=1)
                w.kill()
            self._workers = []


_POOLS: dict[tuple[float, int], VerifierPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(timeout: float = DEFAULT_TIMEOUT, workers: int = DEFAULT_WORKERS) -> VerifierPool:
    """The process-wide pool for (timeout, workers), created on first use."""
    key = (float(timeout), int(workers))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = VerifierPool(workers=workers, timeout=timeout)
        return pool


@atexit.register
def shutdown_pools() -> None:
    """Stop every verification worker (also registered with ``atexit``)."""
    with _POOLS_LOCK:
        for pool in _POOLS.values():
            pool.close()
        _POOLS.clear()


# ----------------------------------------------------------------------------------------------------
# reward functions


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
    return [str(a) for a in answer]


def make_accuracy_reward(
    timeout: float = DEFAULT_TIMEOUT, workers: int = DEFAULT_WORKERS, *, _scorer: str = _DEFAULT_SCORER
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
            if not text.strip():
                continue  # empty completion: 0.0
            gold_num, pred_num = _as_number(gold), _as_number(pred)
            if gold_num is not None and pred_num is not None:
                rewards[i] = float(gold_num == pred_num)
            else:
                slow.append(i)
        if slow:
            scored = get_pool(timeout, workers).score([(golds[i], texts[i]) for i in slow], scorer=_scorer)
            for i, r in zip(slow, scored, strict=True):
                rewards[i] = r
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("extracted_answer", extracted)
        return rewards

    accuracy_reward.__doc__ = _ACCURACY_DOC
    return accuracy_reward


_ACCURACY_DOC = """1.0 if a completion's answer equals the gold ``answer``, else 0.0.

``None`` when the gold is unparseable; 0.0 for an empty completion or a verification that hangs past
the timeout. See the module docstring for extraction rules.
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


MAX_FAILED_BATCHES: int = 3
"""`safe_reward` raises once a reward has failed on every completion of this many consecutive batches."""


def safe_reward(
    fn: Callable[..., list[float | None]], *, max_failed_batches: int = MAX_FAILED_BATCHES
) -> Callable[..., list[float | None]]:
    """Wrap a reward function so that a completion it cannot score gets ``None`` instead of killing the run.

    On an exception the batch is re-scored one completion at a time (every list argument of the batch's
    length is sliced), so only the completions that really fail get ``None`` -- TRL then leaves them out
    of that reward. Each failure is logged as a warning with its traceback, and the failed share is
    reported through TRL's ``log_metric`` as ``rewards/<name>/failed_frac`` when TRL passes it. Failing is
    never silent: when *every* completion of `max_failed_batches` consecutive batches fails, the wrapper
    raises ``RuntimeError`` naming the reward and the last error (a reward that always fails would
    otherwise train on nothing). Keeps the wrapped function's ``__name__`` (TRL logs rewards by name).
    """
    if max_failed_batches < 1:
        raise ValueError(f"max_failed_batches must be >= 1, got {max_failed_batches}")
    name = getattr(fn, "__name__", type(fn).__name__)
    streak = 0

    def one(i: int, n: int, args: tuple, kwargs: dict[str, Any]) -> float | None:
        def cut(v: Any) -> Any:
            return v[i : i + 1] if isinstance(v, (list, tuple)) and len(v) == n else v

        out = fn(*(cut(a) for a in args), **{k: cut(v) for k, v in kwargs.items()})
        return out[0]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> list[float | None]:
        nonlocal streak
        try:
            out = fn(*args, **kwargs)
        except Exception as batch_error:
            completions = kwargs.get("completions", args[0] if args else [])
            n = len(completions)
            out, failed, last = [], 0, batch_error
            for i in range(n):
                try:
                    out.append(one(i, n, args, kwargs))
                except Exception as error:
                    out.append(None)
                    failed += 1
                    last = error
            logger.warning(
                "reward function %s raised on %d of %d completions; those are scored None",
                name,
                failed,
                n,
                exc_info=last,
            )
            if callable(kwargs.get("log_metric")):
                kwargs["log_metric"](f"rewards/{name}/failed_frac", failed / max(n, 1))
            streak = streak + 1 if n and failed == n else 0
            if streak >= max_failed_batches:
                raise RuntimeError(
                    f"reward function {name} failed on every completion of {streak} consecutive batches "
                    f"(last error: {last!r}); fix the reward or remove it from reward_funcs"
                ) from last
            return out
        streak = 0
        return out

    wrapper.__oar_safe__ = True  # type: ignore[attr-defined]
    return wrapper
