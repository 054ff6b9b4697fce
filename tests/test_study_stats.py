"""`oar-rl study`'s statistics against hand-computed values: Student's t quantiles, mean and paired
intervals (bounded ones clipped and marked), the minimum detectable effect, Welch's difference, curves and
steps to reach a level, and the report's aggregate of runs (the run plan and the study's runs are in
test_study.py)."""

from __future__ import annotations

import math

import pytest

from oar_rl.study import report as study_report
from oar_rl.study import stats
from oar_rl.study.report import aggregate

# --------------------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("df", "table"),  # two-sided 95% critical values of Student's t (any statistics table)
    [(1, 12.7062047), (2, 4.3026527), (4, 2.7764451), (9, 2.2621572), (30, 2.0422725)],
)
def test_t_quantile_matches_tables(df, table):
    assert stats.t_quantile(0.975, df) == pytest.approx(table, abs=1e-6)
    assert stats.t_quantile(0.025, df) == pytest.approx(-table, abs=1e-6)
    with pytest.raises(ValueError, match="df=0"):
        stats.t_quantile(0.975, 0)


def test_mean_ci_hand_computed():
    # values 0.1..0.5: mean 0.3; squared deviations .04+.01+0+.01+.04 = .10, sd = sqrt(.10/4) = 0.158114;
    # se = sd/sqrt(5) = 0.0707107; half width = t(0.975, 4) * se = 2.7764451 * 0.0707107 = 0.196324.
    ci = stats.mean_ci([0.1, 0.2, 0.3, 0.4, 0.5])
    assert ci["n"] == 5 and ci["mean"] == pytest.approx(0.3)
    assert ci["sd"] == pytest.approx(math.sqrt(0.025))
    assert ci["half_width"] == pytest.approx(0.196324, abs=1e-6)
    assert (ci["low"], ci["high"]) == (pytest.approx(0.103676, abs=1e-6), pytest.approx(0.496324, abs=1e-6))
    one = stats.mean_ci([0.7])
    assert one["mean"] == 0.7 and one["low"] is None and one["half_width"] is None
    assert stats.mean_ci([])["mean"] is None
    with pytest.raises(ValueError, match="finite"):
        stats.mean_ci([0.1, float("nan")])


def test_paired_difference_hand_computed():
    # seeds 0,1,2 shared (seed 3 only in the treatment): diffs .05, .02, .08 -> mean .05, sd = sqrt(
    # (0 + .0009 + .0009)/2) = .03; half = t(0.975, 2) * .03 / sqrt(3) = 4.3026527 * .0173205 = 0.0745242.
    treat = {0: 0.55, 1: 0.42, 2: 0.68, 3: 0.9}
    ref = {0: 0.50, 1: 0.40, 2: 0.60}
    d = stats.paired_difference(treat, ref)
    assert d["seeds"] == [0, 1, 2] and d["diffs"] == pytest.approx([0.05, 0.02, 0.08])
    assert d["mean"] == pytest.approx(0.05) and d["sd"] == pytest.approx(0.03)
    assert d["half_width"] == pytest.approx(0.0745242, abs=1e-6)
    assert d["wins"] == 3
    # the paired t-test: t = .05 / (.03 / sqrt 3) = 2.8867513 on 2 df, whose CDF is 1/2 + t/(2 sqrt(2 + t²)):
    # two-sided p = 1 - t / sqrt(2 + t²) = 1 - 2.8867513 / 3.2145503 = 0.1019735
    assert d["p"] == pytest.approx(0.1019735, abs=1e-6)
    from scipy.stats import ttest_rel

    ci = ttest_rel([0.55, 0.42, 0.68], [0.50, 0.40, 0.60]).confidence_interval(0.95)
    assert (d["low"], d["high"]) == (pytest.approx(ci.low, abs=1e-12), pytest.approx(ci.high, abs=1e-12))
    assert stats.paired_difference({0: 0.5, 1: 0.6}, {0: 0.4, 1: 0.5})["p"] is None  # no spread: no test
    # Pairing matters: the unpaired spread of the treatment alone is far wider than that of the diffs.
    assert stats.mean_ci([0.55, 0.42, 0.68])["half_width"] > 3 * d["half_width"]
    # MDE at 80% power, df 2: (t(.975, 2) + t(.8, 2)) * .03 / sqrt(3) = (4.3026527 + 1.0606602) * .0173205
    assert d["mde80"] == pytest.approx((4.3026527 + 1.0606602) * 0.03 / 3**0.5, abs=1e-6)


def test_bounded_intervals_are_clipped_and_marked():
    # seeds .97, 1.0: mean .985, sd = .03/sqrt(2) = .0212132, se = sd/sqrt(2) = .015;
    # half = t(0.975, 1) * se = 12.7062047 * .015 = 0.190593 -> [.794407, 1.175593], past 1: cut to 1.
    ci = stats.mean_ci([0.97, 1.0], bounds=(0.0, 1.0))
    assert ci["half_width"] == pytest.approx(0.190593, abs=1e-6)  # the t half width, unclipped
    assert ci["low"] == pytest.approx(0.794407, abs=1e-6) and ci["high"] == 1.0 and ci["clipped"] == ["high"]
    raw = stats.mean_ci([0.97, 1.0])
    assert raw["high"] == pytest.approx(1.175593, abs=1e-6) and raw["clipped"] == []
    both = stats.mean_ci([0.0, 1.0], bounds=(0.0, 1.0))
    assert (both["low"], both["high"], both["clipped"]) == (0.0, 1.0, ["low", "high"])
    inside = stats.mean_ci([0.4, 0.5, 0.6], bounds=(0.0, 1.0))
    assert inside["clipped"] == [] and inside["low"] == pytest.approx(0.5 - inside["half_width"])
    with pytest.raises(ValueError, match=r"outside bounds \[0.0, 1.0\]"):
        stats.mean_ci([0.5, 1.2], bounds=(0.0, 1.0))
    with pytest.raises(ValueError, match="low < high"):
        stats.mean_ci([0.5], bounds=(1.0, 0.0))
    # diffs 1.0, 0.1: mean .55, se = .45, half = 12.7062047 * .45 = 5.717792: both ends cut to [-1, 1]
    d = stats.paired_difference({0: 1.0, 1: 0.2}, {0: 0.0, 1: 0.1}, bounds=(-1.0, 1.0))
    assert (d["low"], d["high"], d["clipped"]) == (-1.0, 1.0, ["low", "high"])
    assert d["half_width"] == pytest.approx(5.717792, abs=1e-6)
    c = stats.curve_ci([{0: 0.97}, {0: 1.0}], bounds=(0.0, 1.0))
    assert c["high"] == [1.0] and c["low"] == [pytest.approx(0.794407, abs=1e-6)]
    assert study_report._pct(ci) == "98.5 [79.4, 100.0*]"  # the cut end is marked
    assert study_report._pct(inside) == "50.0 [25.2, 74.8]"


def test_minimum_detectable_effect_table_and_power():
    # df 9 (10 seeds): t(.975) 2.2621572, t(.8) 0.8834039 (tables)
    assert stats.minimum_detectable_effect(0.02, 10) == pytest.approx(3.1455611 * 0.02 / 10**0.5, abs=1e-6)
    # its meaning, by simulation: a true effect of one MDE is detected (|t| > t crit) about 80% of the time
    import random

    rng, n, sd = random.Random(0), 10, 1.0
    mde, crit = stats.minimum_detectable_effect(sd, n), stats.t_quantile(0.975, n - 1)
    hits = 0
    for _ in range(4000):
        ci = stats.mean_ci([rng.gauss(mde, sd) for _ in range(n)])
        hits += abs(ci["mean"]) / (ci["sd"] / n**0.5) > crit
    assert 0.74 < hits / 4000 < 0.86  # the t-based formula is a close approximation of the noncentral t
    with pytest.raises(ValueError, match="n=1"):
        stats.minimum_detectable_effect(0.1, 1)


def test_welch_difference_against_the_formula():
    # by hand: a = (1, 2, 3, 4), b = (2, 4, 9): means 2.5, 5; variances 1.6667, 13; se² = v_a/4 + v_b/3
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 9.0]
    va, vb = 5 / 3, 13.0
    se2 = va / 4 + vb / 3
    df = se2**2 / ((va / 4) ** 2 / 3 + (vb / 3) ** 2 / 2)  # Welch-Satterthwaite
    half = stats.t_quantile(0.975, df) * math.sqrt(se2)
    w = stats.welch_difference(a, b)
    assert w["mean"] == pytest.approx(-2.5)
    assert w["df"] == pytest.approx(df, rel=1e-9)
    assert w["low"] == pytest.approx(-2.5 - half, rel=1e-9)
    assert w["high"] == pytest.approx(-2.5 + half, rel=1e-9)
    assert 0.0 < w["p"] < 1.0 and (w["n_a"], w["n_b"]) == (4, 3)
    # unequal variances matter: the pooled (Student) interval is another one
    assert stats.welch_difference([0, 0.1, 0.2], [5, 15, 25])["df"] < 3
    # no spread anywhere: no interval, never a made-up width
    flat = stats.welch_difference([1.0, 1.0], [2.0, 2.0])
    assert flat["mean"] == -1.0 and flat["low"] is None and flat["p"] is None
    with pytest.raises(ValueError, match="sample b has 1 value"):
        stats.welch_difference([1.0, 2.0], [3.0])
    with pytest.raises(ValueError, match="finite"):
        stats.welch_difference([1.0, float("nan")], [3.0, 4.0])


def test_curve_ci_and_steps_to_reach():
    c = stats.curve_ci([{0: 0.2, 5: 0.3, 10: 0.5}, {0: 0.2, 5: 0.5, 7: 0.9}])
    assert c["step"] == [0, 5]  # only the shared steps
    assert c["mean"] == pytest.approx([0.2, 0.4])
    # step 5: values .3, .5 -> sd .141421, half = 12.7062047 * .141421 / sqrt(2) = 1.270620
    assert c["high"][1] - 0.4 == pytest.approx(1.270620, abs=1e-5)
    assert stats.steps_to_reach([0, 5, 10], [0.2, 0.45, 0.5], 0.45) == 5
    assert stats.steps_to_reach([0, 5, 10], [0.2, 0.3, 0.4], 0.45) is None


def test_aggregate_steps_to_reach_grpo_final():
    def run(variant, seed, curve):
        return {
            "variant": variant, "seed": seed, "curve": {str(k): v for k, v in curve.items()},
            "final": {"sampled": curve[max(curve)], "greedy": None}, "train_seconds": 1.0, "history": [],
        }  # fmt: skip

    runs = {
        "a": run("grpo", 0, {0: 0.2, 5: 0.3, 10: 0.4}),
        "b": run("grpo", 1, {0: 0.2, 5: 0.3, 10: 0.5}),
        "c": run("oar-g", 0, {0: 0.2, 5: 0.5, 10: 0.6}),
        "d": run("oar-g", 1, {0: 0.2, 5: 0.4, 10: 0.5}),
        "e": run("random", 0, {0: 0.2, 5: 0.2, 10: 0.3}),
    }
    agg = aggregate({"main": ["grpo", "oar-g", "random"]}, runs)["main"]
    assert agg["grpo"]["steps_to_grpo_final"] == 10  # GRPO's final mean 0.45 first reached at its end
    assert agg["oar-g"]["steps_to_grpo_final"] == 5  # mean curve 0.45 at step 5
    assert agg["random"]["steps_to_grpo_final"] is None and agg["random"]["seeds"] == [0]
    assert agg["oar-g"]["diff_to_grpo"]["diffs"] == pytest.approx([0.2, 0.0])
