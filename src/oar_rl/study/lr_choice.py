"""The learning-rate sweep's choice, kept pure: the highest mean validation accuracy, optionally among the
rates whose mean greedy accuracy stays within a tolerance of the warm start's.

`oar_rl.study.runner.tune_learning_rate` trains each rate of the grid on a few seeds and hands the figures
here. Without a tolerance the rule is the one every study before issue 58 used: the highest mean sampled
accuracy, ties to the smaller rate. With `greedy_tolerance` (points), a rate whose mean greedy accuracy
falls more than that below the warm start's greedy accuracy on the same validation problems cannot be
chosen: RL that buys sampled accuracy by breaking the greedy answer is not the gain the regime asks for
(issue 58: "greedy not more than 2 points below" the warm start). When no rate qualifies the sweep says
so with every rate's figures, and chooses nothing.
"""

from __future__ import annotations

from typing import Any


class NoRateQualifies(ValueError):
    """No rate of the grid kept greedy accuracy within the tolerance."""


def choose_rate(
    results: dict[str, dict[str, Any]],
    *,
    warm_greedy: float | None = None,
    greedy_tolerance: float | None = None,
) -> float:
    """The chosen learning rate from `results` ({label: {"learning_rate", "mean", "greedy_mean"?}}).

    `warm_greedy` is a fraction (0..1), `greedy_tolerance` points (0..100); both or neither.
    """
    if not results:
        raise ValueError("the sweep has no results to choose from")
    if (warm_greedy is None) != (greedy_tolerance is None):
        raise ValueError("warm_greedy and greedy_tolerance go together (both or neither)")
    candidates = list(results.values())
    if greedy_tolerance is not None:
        floor = warm_greedy - greedy_tolerance / 100.0
        missing = [r["learning_rate"] for r in candidates if r.get("greedy_mean") is None]
        if missing:
            raise ValueError(f"rates {missing} have no greedy accuracy (a tolerance needs it measured)")
        # a last-ulp margin: a mean equal to the floor on paper must not fall out through rounding
        candidates = [r for r in candidates if r["greedy_mean"] >= floor - 1e-12]
        if not candidates:
            figures = ", ".join(
                f"{r['learning_rate']:g}: greedy {100 * r['greedy_mean']:.1f}, sampled {100 * r['mean']:.1f}"
                for r in sorted(results.values(), key=lambda r: r["learning_rate"])
            )
            raise NoRateQualifies(
                f"no learning rate of the grid keeps greedy validation accuracy within {greedy_tolerance:g} "
                f"points of the warm start's {100 * warm_greedy:.1f} ({figures}); sweep lower rates "
                "(--lr-grid) or fewer steps"
            )
    best = max(candidates, key=lambda r: (r["mean"], -r["learning_rate"]))
    return float(best["learning_rate"])


def greedy_clause(warm_greedy: float | None, greedy_tolerance: float | None) -> str:
    """The greedy condition of the sweep's rule, as the lr_tuning record states it ("" without one)."""
    if greedy_tolerance is None:
        return ""
    return (
        f", among the rates whose mean greedy validation accuracy is at most {greedy_tolerance:g} points "
        f"below the warm start's ({100 * warm_greedy:.1f}%)"
    )
