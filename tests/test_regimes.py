"""The long regime's pre-registered comparison of gaps (experiments/credit_long/regimes.py)."""

from __future__ import annotations

import pytest

from experiments.credit_long import regimes
from oar_rl.study import stats
from oar_rl.study.screen import gaps


def _runs(acc: dict[str, dict[int, float]]) -> dict[str, dict[int, dict]]:
    return {arm: {s: {"final": {"sampled": a}} for s, a in by_seed.items()} for arm, by_seed in acc.items()}


def _screen(seeds, gaps_by_rule, base=0.5):
    """GRPO at `base` + a per-seed wobble; each rule at GRPO + its gap (points) + its own wobble."""
    acc = {"grpo": {s: base + 0.01 * (i % 3) for i, s in enumerate(seeds)}}
    for rule, gap in gaps_by_rule.items():
        acc[rule] = {s: acc["grpo"][s] + gap / 100 + 0.004 * ((i * 7) % 5 - 2) for i, s in enumerate(seeds)}
    return _runs(acc)


SHORT, LONG = range(2000, 2005), range(3000, 3005)


def test_gaps_pair_by_seed_and_skip_unpaired():
    runs = _runs({"grpo": {1: 0.5, 2: 0.6}, "oar-g": {1: 0.55, 3: 0.9}})
    assert gaps(runs, "oar-g", "grpo") == {1: pytest.approx(5.0)}
    assert gaps(runs, "grpo", None) == {}


def test_growth_is_welch_of_long_minus_short():
    short = _screen(SHORT, dict.fromkeys(regimes.RULES, 0.0))
    long = _screen(LONG, dict.fromkeys(regimes.RULES, 3.0))
    res = regimes.cross_regime(short, long)
    row = res["rows"][0]
    ref = stats.welch_difference(
        list(gaps(long, "oar-g", "grpo").values()), list(gaps(short, "oar-g", "grpo").values())
    )
    assert row["growth"]["mean"] == pytest.approx(3.0) and row["growth"]["low"] == pytest.approx(ref["low"])
    assert len(row["short"]["seeds"]) == len(row["long"]["seeds"]) == 5


@pytest.mark.parametrize(
    ("long_gaps", "expected"),
    [
        ({"oar-g": 5.0}, "supported"),  # OAR-G's gap grows, no rule's shrinks
        ({"first-error": 5.0, "random": -5.0}, "not decided"),  # one rule shrinks: not supported
        ({"oar-g": -5.0, "first-error": -5.0}, "refuted"),
        ({"oar-g": -5.0}, "not decided"),  # refuting needs both deciding rules
        ({}, "not decided"),
    ],
)
def test_the_pre_registered_verdict(long_gaps, expected):
    short = _screen(SHORT, dict.fromkeys(regimes.RULES, 0.0))
    long = _screen(LONG, {r: long_gaps.get(r, 0.0) for r in regimes.RULES})
    assert regimes.cross_regime(short, long)["verdict"] == expected


def test_no_verdict_while_a_screen_is_incomplete(tmp_path):
    short = _screen(SHORT, dict.fromkeys(regimes.RULES, 0.0))
    long = _screen(list(LONG)[:3], {r: 9.0 for r in regimes.RULES})  # 3 of 5 seeds
    res = regimes.cross_regime(short, long)
    assert res["verdict"] == "incomplete" and res["rows"][0]["growth"]["mean"] == pytest.approx(9.0)
    md = regimes.markdown(res)
    assert "No verdict yet" in md and "| oar-g | 5 |" in md
    regimes.plot(res, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000
