"""The sweep's learning-rate choice (oar_rl.study.lr_choice): the sampled rule, and the greedy floor."""

from __future__ import annotations

import pytest

from oar_rl.study.lr_choice import NoRateQualifies, choose_rate, greedy_clause


def _results(*rows: tuple[float, float, float | None]) -> dict:
    out = {}
    for lr, mean, greedy in rows:
        out[f"{lr:g}"] = {"learning_rate": lr, "mean": mean}
        if greedy is not None:
            out[f"{lr:g}"]["greedy_mean"] = greedy
    return out


def test_without_a_tolerance_the_highest_mean_wins_ties_to_the_smaller_rate():
    assert choose_rate(_results((1e-6, 0.40, None), (3e-6, 0.52, None), (1e-5, 0.47, None))) == 3e-6
    assert choose_rate(_results((1e-5, 0.50, None), (3e-6, 0.50, None))) == 3e-6


def test_a_rate_that_breaks_greedy_beyond_the_tolerance_cannot_be_chosen():
    res = _results((1e-6, 0.42, 0.66), (3e-6, 0.50, 0.65), (1e-5, 0.58, 0.60))
    assert choose_rate(res) == 1e-5  # the sampled rule alone would take it
    # warm start greedy 0.667: 1e-5 is 6.7 points below it, 3e-6 1.7 points
    assert choose_rate(res, warm_greedy=0.6667, greedy_tolerance=2.0) == 3e-6
    assert choose_rate(res, warm_greedy=0.6667, greedy_tolerance=10.0) == 1e-5
    assert choose_rate(res, warm_greedy=0.6667, greedy_tolerance=1.0) == 1e-6


def test_a_mean_exactly_at_the_floor_qualifies():
    # 0.64 = 0.66 - 2 points, up to rounding in the subtraction
    assert choose_rate(_results((1e-5, 0.7, 0.64)), warm_greedy=0.66, greedy_tolerance=2.0) == 1e-5


def test_no_qualifying_rate_says_so_with_every_figure():
    res = _results((1e-5, 0.58, 0.60), (3e-5, 0.61, 0.50))
    with pytest.raises(NoRateQualifies) as err:
        choose_rate(res, warm_greedy=0.70, greedy_tolerance=2.0)
    msg = str(err.value)
    assert "within 2 points of the warm start's 70.0" in msg
    assert "1e-05: greedy 60.0, sampled 58.0" in msg and "3e-05: greedy 50.0, sampled 61.0" in msg


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="no results"):
        choose_rate({})
    with pytest.raises(ValueError, match="together"):
        choose_rate(_results((1e-5, 0.5, 0.5)), greedy_tolerance=2.0)
    with pytest.raises(ValueError, match=r"\[1e-05\] have no greedy accuracy"):
        choose_rate(_results((1e-5, 0.5, None)), warm_greedy=0.5, greedy_tolerance=2.0)


def test_the_rule_text():
    assert greedy_clause(None, None) == ""
    assert "at most 2 points below the warm start's (66.7%)" in greedy_clause(2 / 3, 2.0)
