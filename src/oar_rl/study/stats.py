"""The study's statistics (`scipy.stats`): t-intervals over seeds, paired differences, curves, thresholds.

Every interval is a two-sided Student-t interval for the mean over seeds (seeds are the independent
replicates; the problems of the test set are shared by every run, so their sampling noise is common to
all methods and cancels in the paired differences). With one seed there is no interval: `low`/`high`
are None, never a made-up width.

Bounded quantities (accuracies in [0, 1], differences of two accuracies in [-1, 1]) take `bounds`: the
t-interval is then *clipped and marked* -- intersected with the possible range, and `clipped` names the
bound(s) that were cut ("low", "high"). Why not an interval built for proportions (Wilson, Clopper-Pearson):
the replicates are training runs, and a run's accuracy varies with its seed far more than the binomial
noise of its test samples, so a binomial interval over the pooled samples would be too narrow. The true
mean lies in the range, so clipping removes only impossible values and keeps the t-interval's coverage;
the mark says the t-interval itself ran past the range (with 2 seeds it usually does: 1 degree of freedom,
t = 12.71).

The t quantiles come from `scipy.stats.t` and the paired test's p-value from `scipy.stats.ttest_rel`
(its confidence interval is the one `paired_difference` reports; a test checks they agree). The minimum
detectable effect uses the usual formula with t quantiles, (t_{1-α/2} + t_{power}) · sd / √n, not the
exact noncentral-t power: the study's committed MDE column was made with it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def t_quantile(p: float, df: float) -> float:
    """Inverse CDF of Student's t with `df` degrees of freedom (`scipy.stats.t.ppf`), p in (0, 1)."""
    from scipy.stats import t

    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p} must be in (0, 1)")
    if not df > 0:
        raise ValueError(f"df={df} must be > 0")
    return float(t.ppf(p, df))


def _check_bounds(bounds: tuple[float, float] | None, vals: Sequence[float]) -> None:
    if bounds is None:
        return
    lo, hi = bounds
    if not lo < hi:
        raise ValueError(f"bounds={bounds} must be (low, high) with low < high")
    outside = [v for v in vals if not lo <= v <= hi]
    if outside:
        raise ValueError(f"values {outside[:3]} lie outside bounds [{lo}, {hi}]")


def mean_ci(
    values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None
) -> dict[str, Any]:
    """Mean and two-sided Student-t interval over `values` (one per seed).

    Returns {"n", "mean", "sd", "low", "high", "half_width", "clipped"}; with n == 1 the sd, bounds and
    half width are None (no interval from one replicate); with n == 0 the mean is None too. `bounds`
    (low, high): the possible range of the quantity; `low`/`high` are clipped to it and `clipped` lists
    the ends that were ("low", "high"; module docstring). `half_width` is the unclipped t half width.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level} must be in (0, 1)")
    vals = [float(v) for v in values]
    bad = [v for v in vals if not math.isfinite(v)]
    if bad:
        raise ValueError(f"values must be finite, got {bad[:3]}")
    _check_bounds(bounds, vals)
    n = len(vals)
    out: dict[str, Any] = {
        "n": n, "mean": None, "sd": None, "low": None, "high": None, "half_width": None, "clipped": [],
    }  # fmt: skip
    if n == 0:
        return out
    mean = statistics.fmean(vals)
    out["mean"] = mean
    if n == 1:
        return out
    sd = statistics.stdev(vals)
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        out["clipped"] = [name for name, cut in (("low", low < bounds[0]), ("high", high > bounds[1])) if cut]
        low, high = max(low, bounds[0]), min(high, bounds[1])
    out.update(sd=sd, low=low, high=high, half_width=half)
    return out


TIE_TOLERANCE = 1e-9
"""Relative size under which a paired difference is a tie (float rounding, not a result)."""


def wins_text(d: Mapping[str, Any]) -> str:
    """ "k/n" seeds ahead of a paired difference, with its ties when there are any: "1/5 (1 tied)"."""
    ties = int(d.get("ties", 0))
    return f"{d['wins']}/{len(d['seeds'])}" + (f" ({ties} tied)" if ties else "")


def paired_difference(
    treatment: Mapping[int, float],
    reference: Mapping[int, float],
    level: float = 0.95,
    bounds: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Per-seed differences treatment − reference over the seeds both have, with their t-interval.

    Pairing by seed removes what the seed shares between the two runs (the prompt order, the warm
    start, the test problems). Returns `mean_ci` of the differences plus {"seeds", "diffs"}, "wins"
    (seeds where the treatment is better), "ties" (seeds where it is level: a difference at float
    rounding's scale, as two gaps of equal counts against different baselines give, is a tie, not a win
    or a loss; :func:`wins_text`) and "p": the two-sided p-value of the paired t-test
    (`scipy.stats.ttest_rel`; None with fewer than 2 seeds or differences that do not vary, where the
    test is undefined; a spread at float rounding's scale counts as none). `bounds`: the differences'
    possible range (for two accuracies (-1, 1)), as in `mean_ci`.
    """
    seeds = sorted(set(treatment) & set(reference))
    diffs = [float(treatment[s]) - float(reference[s]) for s in seeds]
    out = mean_ci(diffs, level, bounds)
    p = None
    if out["sd"] is not None and out["sd"] > 1e-12 * max(1.0, abs(out["mean"])):  # they vary (not rounding)
        from scipy.stats import ttest_rel

        test = ttest_rel([float(treatment[s]) for s in seeds], [float(reference[s]) for s in seeds])
        p = float(test.pvalue)
    tol = TIE_TOLERANCE * max([1.0, *(abs(float(v)) for v in (*treatment.values(), *reference.values()))])
    wins, ties = sum(d > tol for d in diffs), sum(abs(d) <= tol for d in diffs)
    out.update(seeds=seeds, diffs=diffs, wins=wins, ties=ties, p=p)
    out["mde80"] = minimum_detectable_effect(out["sd"], len(diffs), level) if out["sd"] is not None else None
    return out


def welch_difference(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """Mean(a) − mean(b) of two *unpaired* samples with its Welch t-interval (unequal variances,
    Welch–Satterthwaite degrees of freedom), from `scipy.stats.ttest_ind(equal_var=False)`.

    For quantities measured on unrelated seeds, e.g. a rule's mean paired gap to GRPO in one regime
    against the same rule's in another. Returns {"n_a", "n_b", "mean", "low", "high", "df", "p"}; needs
    >= 2 finite values in each sample; with no spread in either sample the interval is undefined and
    `low`/`high`/`df`/`p` are None (never a made-up width)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level} must be in (0, 1)")
    xa, xb = [float(v) for v in a], [float(v) for v in b]
    for name, xs in (("a", xa), ("b", xb)):
        if len(xs) < 2:
            raise ValueError(f"sample {name} has {len(xs)} value(s); a Welch interval needs >= 2 in each")
        bad = [v for v in xs if not math.isfinite(v)]
        if bad:
            raise ValueError(f"sample {name} must be finite, got {bad[:3]}")
    mean = statistics.fmean(xa) - statistics.fmean(xb)
    out: dict[str, Any] = {"n_a": len(xa), "n_b": len(xb), "mean": mean, "low": None, "high": None}
    out.update(df=None, p=None)
    if statistics.stdev(xa) == 0.0 and statistics.stdev(xb) == 0.0:
        return out
    from scipy.stats import ttest_ind

    test = ttest_ind(xa, xb, equal_var=False)
    ci = test.confidence_interval(confidence_level=level)
    out.update(low=float(ci.low), high=float(ci.high), df=float(test.df), p=float(test.pvalue))
    return out


def minimum_detectable_effect(sd: float, n: int, level: float = 0.95, power: float = 0.8) -> float:
    """The smallest true mean difference a two-sided paired t-test at `level` detects with probability
    `power`, given the paired differences' SD `sd` over `n` seeds: (t_{1-α/2} + t_{power}) · sd / √n,
    with n − 1 degrees of freedom (the usual normal-approximation formula with t quantiles)."""
    if n < 2:
        raise ValueError(f"n={n}: a minimum detectable effect needs >= 2 paired seeds")
    if sd < 0 or not math.isfinite(sd):
        raise ValueError(f"sd={sd} must be finite and >= 0")
    df = n - 1
    return (t_quantile(0.5 + level / 2.0, df) + t_quantile(power, df)) * sd / math.sqrt(n)


def curve_ci(
    curves: Sequence[Mapping[int, float]], level: float = 0.95, bounds: tuple[float, float] | None = None
) -> dict[str, list]:
    """Mean and t-interval over seeds at every step that all `curves` (step -> value) share.

    Returns {"step", "mean", "low", "high"}; bounds are None where there is a single curve; `bounds`
    clips them to the quantity's range, as in `mean_ci`.
    """
    if not curves:
        return {"step": [], "mean": [], "low": [], "high": []}
    shared = sorted(set.intersection(*(set(c) for c in curves)))
    out: dict[str, list] = {"step": [], "mean": [], "low": [], "high": []}
    for s in shared:
        ci = mean_ci([c[s] for c in curves], level, bounds)
        out["step"].append(s)
        out["mean"].append(ci["mean"])
        out["low"].append(ci["low"])
        out["high"].append(ci["high"])
    return out


def steps_to_reach(steps: Sequence[int], values: Sequence[float], target: float) -> int | None:
    """The first step whose value is >= target (steps in increasing order); None if none reaches it."""
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length: {len(steps)} vs {len(values)}")
    for s, v in zip(steps, values, strict=True):
        if v >= target:
            return int(s)
    return None
