"""The training-curve plots and the token heatmap renderer; the embedded tasks' exact reward."""

from __future__ import annotations

import pytest

from oar_rl.analysis import heatmap, plots
from oar_rl.tasks import exact_reward


def _fake_history(offset: float) -> list[dict]:
    return [
        {
            "step": s,
            "reward": offset + 0.1 * s,
            "entropy": 1.0 - 0.05 * s,
            "oar/ess_ratio": 0.9,
            "oar/top10_mass": 0.2 + offset,
        }
        for s in (1, 2, 3)
    ]


def test_arithmetic_reward():
    assert exact_reward(["<answer>3</answer>", "<answer>4</answer>", ""], ["3", "3", "3"]) == [
        1,
        0,
        0,
    ]


def test_aggregate_matches_reference():
    h1 = [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.3}, {"step": 3, "loss": 1.0}]
    h2 = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": float("nan")}, {"step": 3, "reward": 0.2}]
    agg = plots.aggregate([h1, h2], "reward")
    # Only step 1 is logged (finite) by both seeds: mean (0.1+0.5)/2 = 0.3, min 0.1, max 0.5.
    assert agg == {"step": [1.0], "mean": [pytest.approx(0.3)], "low": [0.1], "high": [0.5]}
    assert plots.curve(h1, "reward") == ([1, 2], [0.1, 0.3])


def test_moving_average_matches_reference():
    values = [1.0, 5.0, 2.0, 8.0, 4.0]
    # Window 3, trailing, fewer at the start: 1, (1+5)/2, (1+5+2)/3, (5+2+8)/3, (2+8+4)/3.
    assert plots.moving_average(values, 3) == pytest.approx([1.0, 3.0, 8 / 3, 5.0, 14 / 3], abs=1e-12)
    assert plots.moving_average(values, 1) == values
    h = [{"step": i + 1, "reward": v} for i, v in enumerate(values)]
    assert plots.aggregate([h], "reward", smooth=2)["mean"] == pytest.approx([1.0, 3.0, 3.5, 5.0, 6.0])
    with pytest.raises(ValueError, match="window"):
        plots.moving_average(values, 0)


def test_plots(tmp_path):
    histories = {"grpo": [_fake_history(0.0), _fake_history(0.1)], "oar-g": [_fake_history(0.2)]}
    written = plots.plot_curves(histories, tmp_path)
    assert sorted(written) == ["entropy", "oar/ess_ratio", "oar/top10_mass", "reward"]
    for path in written.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmap_escapes_and_checks_lengths():
    row = heatmap.heatmap_row(["<", "a", " "], [1.0, 0.0, 2.0])
    assert "&lt;" in row and "&nbsp;" in row and "<a" not in row.replace("<span", "")
    assert row.count("<span title=") == 3
    assert 'title="0.000" style="background:transparent"' in row
    assert "rgba(230, 85, 13, 0.950)" in row  # 2.0 is clipped to 1
    unscored = heatmap.heatmap_row(["7", "<"], [None, float("nan")])
    assert unscored.count('title="not scored"') == 2 and "rgba" not in unscored
    with pytest.raises(ValueError, match="one to one"):
        heatmap.heatmap_row(["a"], [0.1, 0.2])
    table = heatmap.heatmap_html("1+1<2", [("OAR-P", ["x"], [0.5])])
    assert "1+1&lt;2" in table and "OAR-P" in table
