"""Unbiased pass@k (Chen et al. 2021, Eq. 1: 1 − C(n−c, k) / C(n, k), as a stable product) and mean@n,
for `oar-rl eval` (re-exported by :mod:`oar_rl.eval.evaluation`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _pass_at_k_one(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def pass_at_k(n: int, c: int | Sequence[int] | np.ndarray, k: int) -> float | np.ndarray:
    """Unbiased pass@k of one problem with ``c`` correct out of ``n`` samples (Chen et al., 2021).

    ``1 - C(n-c, k)/C(n, k)`` computed as ``1 - prod_{i=n-c+1}^{n}(1 - k/i)``; 1.0 when ``n - c < k``.
    ``c`` may be a list/array of per-problem counts: the result is then an array of the same shape.
    Raises ValueError unless ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    n, k = _check_int("n", n), _check_int("k", k)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"k={k} must be <= n={n} (cannot estimate pass@{k} from {n} samples)")
    if isinstance(c, (Sequence, np.ndarray)) and not isinstance(c, str):
        arr = np.asarray(c)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"c must hold integers, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() > n):
            raise ValueError(f"every c must be in [0, n={n}], got min {arr.min()} max {arr.max()}")
        # vectorised product form: prod over i in (n-c, n] of (1 - k/i), as a masked cumulative product
        i = np.arange(1, n + 1, dtype=np.float64)  # (n,)
        factors = 1.0 - k / i  # (n,)
        keep = i[None, :] > (n - arr.reshape(-1, 1))  # (P, n)  i in (n-c, n]
        prod = np.where(keep, factors[None, :], 1.0).prod(axis=1)  # (P,)
        out = np.where(n - arr.reshape(-1) < k, 1.0, 1.0 - prod)
        return out.reshape(arr.shape).astype(np.float64)
    c = _check_int("c", c)
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    return _pass_at_k_one(n, c, k)


def mean_at_n(c: int | Sequence[int] | np.ndarray, n: int) -> float:
    """Mean accuracy over all samples: ``mean(c) / n`` (equals the average pass@1)."""
    n = _check_int("n", n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    arr = np.atleast_1d(np.asarray(c))
    if arr.size == 0:
        raise ValueError("c is empty")
    if arr.min() < 0 or arr.max() > n:
        raise ValueError(f"every c must be in [0, n={n}], got min {arr.min()} max {arr.max()}")
    return float(arr.mean() / n)
