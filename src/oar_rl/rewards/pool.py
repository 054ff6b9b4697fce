"""Verification bounded in time: a `pebble` process pool that kills and replaces a worker past its timeout.

math-verify's own timeout is ``signal.alarm`` (main thread only) and some inputs hang past it
(Math-Verify #65), so each completion is verified as one task of a ``pebble.ProcessPool`` with a per-task
timeout: a task that does not answer within ``timeout`` seconds has its worker killed (pebble replaces it)
and **scores 0.0** -- a hang is a wrong answer, never a crash; the rest of the batch is still scored.
A worker that dies on a task, or a scorer that raises, also costs that one completion 0.0 (logged).
Inside a worker the scorer runs in the main thread, so math-verify's own alarms work too (each set to a
third of the budget). The timeout counts from the moment a worker takes the task: queueing and worker
start-up are not charged.

Start method. Workers are forked on Linux (``fork``, fast: math-verify is imported once in the parent and
inherited) and spawned elsewhere; ``OAR_RL_VERIFY_START_METHOD`` (``fork``, ``spawn``, ``forkserver``)
overrides it. Forking copies the parent's memory but not its threads, and a worker never touches CUDA;
it needs no ``if __name__ == "__main__":`` guard in the calling script. ``spawn`` and ``forkserver`` re-run
the caller's main script in every worker: a script without the guard then fails with a `RuntimeError`
that says to add it (never an endless restart loop).

The pool is process-wide per (timeout, workers), created on first use, reused, safe to call from several
threads, rebuilt in a forked child (the parent's workers are not its own) and after a breakage, and shut
down at interpreter exit.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import importlib
import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT: float = 10.0
"""Seconds one completion's verification may take before its worker is killed (it then scores 0.0)."""
DEFAULT_WORKERS: int = 2
"""Worker processes of the default pool."""
WORKER_START_TIMEOUT: float = 120.0
"""Seconds the pool may go without finishing any task (beyond the task timeout) before it counts as broken."""
START_METHOD_ENV = "OAR_RL_VERIFY_START_METHOD"
START_METHODS = ("fork", "spawn", "forkserver")

DEFAULT_SCORER = "oar_rl.rewards.verify:score_math"

_GUARD_HINT = (
    'put your script\'s top-level code under `if __name__ == "__main__":` (the {method!r} start method '
    "re-runs the main script in every verification worker), or set {env}=fork"
)


def default_start_method() -> str:
    """``$OAR_RL_VERIFY_START_METHOD`` if set, else ``fork`` on Linux and ``spawn`` elsewhere."""
    method = os.environ.get(START_METHOD_ENV, "").strip()
    if method:
        if method not in START_METHODS:
            raise ValueError(
                f"{START_METHOD_ENV}={method!r}; valid start methods: {', '.join(START_METHODS)}"
            )
        return method
    return "fork" if sys.platform.startswith("linux") else "spawn"


def resolve_scorer(scorer: str | Callable[..., float | None]) -> Callable[..., float | None]:
    """A scorer given as ``"module:function"`` (or the function itself); it must be importable by name."""
    if callable(scorer):
        return scorer
    module, _, name = scorer.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"scorer {scorer!r} cannot be imported ('module:function' expected): {exc}") from exc


def _worker_init() -> None:  # pragma: no cover - runs in the worker
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401  -- pay the import before taking a task


def _ping() -> int:  # pragma: no cover - runs in the worker
    return os.getpid()


def _check_not_bootstrapping(method: str) -> None:
    """In a spawned worker re-running an unguarded main script: stop with the fix, not a restart loop."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "oar_rl.rewards was called while a verification worker was starting: "
            + _GUARD_HINT.format(method=method, env=START_METHOD_ENV)
        )


class VerifierPool:
    """A scorer run in worker processes with a hard per-task timeout; hung workers are killed and replaced.

    ``score(tasks)`` takes ``[(gold, text), ...]`` and returns one ``float | None`` per task: the scorer's
    result, or 0.0 when it timed out, raised, or its worker died. Thread-safe. Raises ``RuntimeError`` only
    when workers cannot start (an unguarded script under ``spawn``, a broken install).
    """

    def __init__(
        self,
        workers: int = DEFAULT_WORKERS,
        timeout: float = DEFAULT_TIMEOUT,
        start_method: str | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.start_method = start_method or default_start_method()
        if self.start_method not in START_METHODS:
            raise ValueError(f"start method {self.start_method!r}; valid: {', '.join(START_METHODS)}")
        self.num_workers = workers
        self.timeout = float(timeout)
        self.inner_timeout = max(1, int(self.timeout // 3))  # math-verify's own alarms: parse, parse, verify
        self._pool = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.timeouts = 0  # tasks that timed out over the pool's life
        self.restarts = 0  # workers killed or lost (and replaced) over the pool's life

    def _ensure(self):
        """The live pebble pool (created, or re-created after a fork or a breakage)."""
        import pebble

        with self._lock:
            if self._pid != os.getpid():  # a forked copy: the parent's workers and threads are not ours
                self._pool, self._pid = None, os.getpid()
            if self._pool is not None and not self._pool.active:
                self._stop(self._pool)
                self._pool = None
            if self._pool is None:
                _check_not_bootstrapping(self.start_method)
                if self.start_method == "fork":
                    import math_verify  # noqa: F401  -- imported once here, inherited by every forked worker
                self._pool = pebble.ProcessPool(
                    max_workers=self.num_workers,
                    initializer=_worker_init,
                    context=multiprocessing.get_context(self.start_method),
                )
            return self._pool

    @staticmethod
    def _stop(pool) -> None:
        try:
            pool.stop()
            pool.join(timeout=10)
        except Exception:  # pragma: no cover - best effort at shutdown
            logger.debug("stopping a verification pool failed", exc_info=True)

    def _broken(self, detail: str) -> RuntimeError:
        with self._lock:
            if self._pool is not None:
                self._stop(self._pool)
                self._pool = None
        hint = (
            _GUARD_HINT.format(method=self.start_method, env=START_METHOD_ENV)
            if self.start_method != "fork"
            else "see the workers' errors above (is math-verify installed in this interpreter?)"
        )
        return RuntimeError(f"math-verify workers ({self.start_method}) could not run: {detail}; {hint}")

    def score(
        self, tasks: Sequence[tuple[str, str]], scorer: str | Callable[..., float | None] = DEFAULT_SCORER
    ) -> list[float | None]:
        if not tasks:
            return []
        fn = resolve_scorer(scorer)
        results: list[float | None] = [0.0] * len(tasks)
        todo = list(range(len(tasks)))
        for attempt in range(2):  # a pool broken while idle (e.g. a worker OOM-killed) is rebuilt once
            todo = self._run(fn, tasks, todo, results, last_attempt=attempt == 1)
            if not todo:
                break
        return results

    def _run(self, fn, tasks, todo: list[int], results: list, *, last_attempt: bool) -> list[int]:
        """Score ``todo``; return the indices lost to a broken pool (to retry)."""
        from concurrent.futures.process import BrokenProcessPool

        from pebble import ProcessExpired

        pool = self._ensure()
        try:
            futures = {
                pool.schedule(
                    fn, args=(tasks[i][0], tasks[i][1], self.inner_timeout), timeout=self.timeout
                ): i
                for i in todo
            }
        except RuntimeError as exc:  # "the Pool is not active" / "Unexpected error within the Pool"
            if last_attempt:
                raise self._broken(str(exc)) from exc
            return todo
        pending, lost = set(futures), []
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=WORKER_START_TIMEOUT + self.timeout, return_when="FIRST_COMPLETED"
            )
            if not done:
                for f in pending:
                    f.cancel()
                raise self._broken(f"no task finished in {WORKER_START_TIMEOUT + self.timeout:.0f}s")
            for f in done:
                i = futures[f]
                try:
                    results[i] = f.result()
                except concurrent.futures.TimeoutError:
                    self.timeouts += 1
                    self.restarts += 1
                    logger.warning(
                        "no math-verify answer in %.1fs on completion %d; worker replaced, it scores 0.0",
                        self.timeout,
                        i,
                    )
                except ProcessExpired as exc:
                    self.restarts += 1
                    logger.warning("a math-verify worker died on completion %d (%s); it scores 0.0", i, exc)
                except BrokenProcessPool as exc:
                    if last_attempt:
                        raise self._broken(f"{type(exc).__name__}: {exc}") from exc
                    lost.append(i)
                except Exception as exc:
                    logger.warning("math-verify raised on completion %d (%r); it scores 0.0", i, exc)
        return sorted(lost)

    def close(self) -> None:
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._stop(self._pool)
            self._pool = None


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
