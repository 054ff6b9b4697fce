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
    row = heatmap.heatmap_row(["<", "a", " "], [1.0, 0.0, 2.0], "OAR-P")
    assert "&lt;" in row and "<a" not in row.replace("<span", "")
    assert '"> </span>' in row  # a space token keeps its width (the row is white-space: pre)
    assert row.count(" title=") == 3
    assert 'title="OAR-P · #1 · 0.000" style="background:transparent"' in row  # hover: method, index, score
    assert "rgba(230, 85, 13, 0.950)" in row  # 2.0 is clipped to 1
    unscored = heatmap.heatmap_row(["7", "<"], [None, float("nan")], start=5)
    assert (
        unscored.count(' · not scored"') == 2
        and "rgba" not in unscored
        and 'title="#6 · not scored"' in unscored
    )
    with pytest.raises(ValueError, match="one to one"):
        heatmap.heatmap_row(["a"], [0.1, 0.2])
    table = heatmap.heatmap_html("1+1<2", [("OAR-P", ["x"], [0.5])])
    assert "1+1&lt;2" in table and "OAR-P" in table
    marked = heatmap.heatmap_html(
        "p", [("m", ["a", "\n", "b"], [0.1, 0.2, None])], answer=[0, 0, 1], reasoning_end=2
    )
    assert "⏎" in marked and "\n</span>" not in marked  # a newline is drawn, and ends the line
    assert marked.count('class="oar-chunk"') == 2
    assert 'class="oar-off oar-ans oar-end"' in marked  # "b": not scored, the answer, the reasoning's end
    assert "reasoning: tokens 0–1, ending at the blue bar; answer span (underlined): tokens 2–2" in marked
    tail = heatmap.heatmap_row(["a", "b"], [0.1, 0.2], reasoning_end=2)
    assert tail.count("oar-end-after") == 1 and 'oar-end"' not in tail  # the reasoning runs to the end


def test_heatmap_png_wraps_long_traces(tmp_path):
    import torch

    from oar_rl.analysis.attribute import Trajectory
    from oar_rl.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    texts = ["1+2=3. " * 14, "4+5=9."]  # 98 and 6 tokens
    trajs = [Trajectory("p", t, "", torch.tensor([1]), torch.tensor(tok(t)["input_ids"])) for t in texts]
    mask = torch.zeros(2, 98, dtype=torch.bool)
    mask[0, :90] = True  # the first trace's last 8 tokens are not drawn
    mask[1, :6] = True
    rows = {"oar-p": torch.rand(2, 98), "oracle": torch.zeros(2, 98)}
    panels = heatmap.heatmap_png(trajs, tok, rows, mask, tmp_path / "h.png", line_tokens=40)
    assert panels == [(0, 0, 40), (0, 40, 80), (0, 80, 90), (1, 0, 6)]
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="line_tokens must be >= 1, got 0"):
        heatmap.heatmap_png(trajs, tok, rows, mask, tmp_path / "h.png", line_tokens=0)


def test_real_recall_refuses_a_bad_max_traces(capsys):
    from experiments.real_model import recall as real_recall

    with pytest.raises(SystemExit) as exit_:
        real_recall.main(["--max-traces", "0"])  # refused before any model is loaded
    assert exit_.value.code == 2 and "--max-traces must be >= 1, got 0" in capsys.readouterr().err
