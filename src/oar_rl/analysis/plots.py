"""Training-curve plots: one PNG per metric, one line per method, mean ± spread over seeds.

The curves are read from `Trainer.state.log_history` (a list of dicts with a "step" key); seeds of one
method are aligned on the optimizer step. The band is the min–max over seeds (with one seed: no band).
Matplotlib runs on the Agg backend (no display needed).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from oar_rl.io import savefig_atomic

# (log-history key, plot title, y-axis label)
CURVES: tuple[tuple[str, str, str], ...] = (
    ("reward", "Reward (accuracy on training prompts)", "mean reward"),
    ("entropy", "Policy entropy", "nats / token"),
    ("oar/ess_ratio", "ESS ratio of token weights (Eq. 27)", "ESS / T"),
    ("oar/top10_mass", "Top-10% advantage mass (Eq. 28)", "fraction of |A|"),
)


def curve(history: Sequence[Mapping[str, float]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` in a log history, skipping entries without it or with a non-finite value."""
    steps, values = [], []
    for entry in history:
        v = entry.get(key)
        if "step" in entry and isinstance(v, int | float) and math.isfinite(v):
            steps.append(int(entry["step"]))
            values.append(float(v))
    return steps, values


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start); window 1 returns the values."""
    if window < 1:
        raise ValueError(f"window={window} must be >= 1")
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def aggregate(
    histories: Sequence[Sequence[Mapping[str, float]]], key: str, *, smooth: int = 1
) -> dict[str, list[float]]:
    """Mean, min and max of `key` over seeds at each step that every seed logged.

    With `smooth` > 1 each seed's curve is first replaced by its trailing moving average over `smooth`
    logged steps. Returns {"step": [...], "mean": [...], "low": [...], "high": [...]} (empty lists when
    no step is shared).
    """
    per_seed = []
    for h in histories:
        steps, values = curve(h, key)
        per_seed.append(dict(zip(steps, moving_average(values, smooth), strict=True)))
    if not per_seed:
        return {"step": [], "mean": [], "low": [], "high": []}
    shared = sorted(set.intersection(*(set(d) for d in per_seed)))
    vals = [[d[s] for d in per_seed] for s in shared]
    return {
        "step": [float(s) for s in shared],
        "mean": [sum(v) / len(v) for v in vals],
        "low": [min(v) for v in vals],
        "high": [max(v) for v in vals],
    }


def plot_curves(
    histories: Mapping[str, Sequence[Sequence[Mapping[str, float]]]],
    out_dir: str | os.PathLike,
    *,
    smooth: int = 1,
) -> dict[str, Path]:
    """One PNG per entry of `CURVES` in `out_dir`; `histories` maps method -> one log history per seed.

    `smooth` > 1 plots trailing moving averages over that many steps (said in the title). Returns
    {metric key: PNG path} for the metrics that at least one method logged. Files are written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for key, title, ylabel in CURVES:
        series = {m: aggregate(hs, key, smooth=smooth) for m, hs in histories.items()}
        series = {m: s for m, s in series.items() if s["step"]}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for method, s in series.items():
            (line,) = ax.plot(s["step"], s["mean"], label=method, linewidth=1.6)
            if any(lo != hi for lo, hi in zip(s["low"], s["high"], strict=True)):
                ax.fill_between(s["step"], s["low"], s["high"], color=line.get_color(), alpha=0.2)
        ax.set_title(title + (f", {smooth}-step moving average" if smooth > 1 else ""), fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        path = out / f"{key.split('/')[-1]}.png"
        savefig_atomic(fig, path)
        plt.close(fig)
        written[key] = path
    return written
