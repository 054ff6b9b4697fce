"""`safe_reward`: a reward function that raises costs the failing completions ``None``, not the run."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

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
