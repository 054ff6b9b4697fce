"""`oar-rl demo` end to end on the smallest configuration, interruption/resume, bad input; the plots,
heatmap and report renderers."""

from __future__ import annotations

import json

import pytest

from oar_rl import demo, tiny
from oar_rl.analysis import heatmap, plots, report
from oar_rl.io import default_file_mode
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


@pytest.fixture
def fake_work(monkeypatch):
    """Replace model building, training and evaluation by instant fakes; record the training calls."""
    calls: list[tuple[str, int]] = []
    state = {"interrupt_at": None}

    def fake_load(recipe, *, cache_dir=None, progress=True):
        return object(), object(), "unused"

    def fake_train(method, seed, settings, model_path, workdir, **kwargs):
        if state["interrupt_at"] is not None and len(calls) == state["interrupt_at"]:
            raise KeyboardInterrupt
        calls.append((method, seed))
        return object(), _fake_history(0.01 * len(calls)), 0.5

    monkeypatch.setattr(tiny, "load_default_model", fake_load)
    monkeypatch.setattr(demo, "train_one", fake_train)
    monkeypatch.setattr(demo, "evaluate", lambda *a, **k: {"sampled": 0.25, "greedy": 0.5})
    monkeypatch.setattr(demo, "token_heatmap", lambda *a, **k: None)
    return calls, state


def test_interrupt_then_resume_then_new_config_starts_clean(tmp_path, fake_work):
    calls, state = fake_work
    out = tmp_path / "out"
    args = ["--tiny", "--out", str(out), "--methods", "grpo,oar-g", "--seeds", "2"]
    state["interrupt_at"] = 3  # Ctrl-C during the 4th run
    assert demo.main(args) == 130
    partial = json.loads((out / "summary.json").read_text())
    assert partial["complete"] is False
    assert sorted(partial["runs"]) == ["grpo/seed0", "grpo/seed1", "oar-g/seed0"]
    assert not (out / "report.html").exists()
    (out / "report.html").write_text("stale")  # e.g. left by an older run: must not survive a rerun

    state["interrupt_at"] = None
    assert demo.main(args) == 0
    assert calls[3:] == [("oar-g", 1)]  # only the missing run is trained
    done = json.loads((out / "summary.json").read_text())
    assert done["complete"] is True and len(done["runs"]) == 4
    assert done["runs"]["grpo/seed0"] == partial["runs"]["grpo/seed0"]
    assert "stale" not in (out / "report.html").read_text() and (out / "reward.png").exists()

    # Adding a method reuses the finished runs of the same configuration.
    assert demo.main([*args[:-3], "grpo,oar-g,oar-p", "--seeds", "2"]) == 0
    assert calls[4:] == [("oar-p", 0), ("oar-p", 1)]

    # A different configuration (steps) never mixes with the old results.
    assert demo.main([*args, "--steps", "3"]) == 0
    assert calls[6:] == [("grpo", 0), ("oar-g", 0), ("grpo", 1), ("oar-g", 1)]
    fresh = json.loads((out / "summary.json").read_text())
    assert sorted(fresh["runs"]) == ["grpo/seed0", "grpo/seed1", "oar-g/seed0", "oar-g/seed1"]
    assert fresh["config"]["steps"] == 3 and fresh["config_hash"] != done["config_hash"]


def test_unwritable_out_fails_before_any_work(tmp_path, monkeypatch, capsys):
    def no_work(*a, **k):
        raise AssertionError("no work may start when --out is unusable")

    monkeypatch.setattr(tiny, "load_default_model", no_work)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert demo.main(["--tiny", "--out", str(blocker / "sub")]) == 2
    assert "--out" in capsys.readouterr().err
    assert demo.main(["--tiny", "--out", str(blocker)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_bad_arguments(tmp_path, capsys):
    assert demo.main(["--tiny", "--out", str(tmp_path), "--methods", "grpo,ppo"]) == 2
    assert "valid methods" in capsys.readouterr().err
    assert demo.main(["--tiny", "--out", str(tmp_path), "--seeds", "0"]) == 2
    assert "seeds=0" in capsys.readouterr().err
    assert demo.main(["--tiny", "--quick", "--out", str(tmp_path)]) == 2


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


def test_plots_and_report(tmp_path):
    histories = {"grpo": [_fake_history(0.0), _fake_history(0.1)], "oar-g": [_fake_history(0.2)]}
    written = plots.plot_curves(histories, tmp_path)
    assert sorted(written) == ["entropy", "oar/ess_ratio", "oar/top10_mass", "reward"]
    for path in written.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = {
        "complete": True,
        "config": {"methods": ["grpo", "oar-g"], "eval_split": "eval", "eval_problems": 4},
        "warm_start": {"recipe_hash": "abc"},
        "runs": {
            "grpo/seed0": {
                "method": "grpo",
                "before": {"sampled": 0.2, "greedy": 0.5},
                "after": {"sampled": 0.4, "greedy": 0.5},
            },
            "grpo/seed1": {
                "method": "grpo",
                "before": {"sampled": 0.2, "greedy": 0.5},
                "after": {"sampled": 0.6, "greedy": 0.75},
            },
        },
    }
    rows = report.accuracy_table(summary)
    assert rows[0]["method"] == "grpo" and rows[0]["seeds"] == 2
    assert rows[0]["delta_sampled"] == [pytest.approx(0.2), pytest.approx(0.4)]
    assert rows[1]["seeds"] == 0
    html = report.render_report(summary, {k: str(v) for k, v in written.items()}, "<p>HEAT</p>")
    assert html.count("data:image/png;base64,") == 4 and "<p>HEAT</p>" in html
    assert "50.0% ± 14.1" in html  # after (T=1): mean 0.5, sample std of (0.4, 0.6) = 0.1414


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


@pytest.mark.slow
def test_demo_end_to_end_tiny(tmp_path, monkeypatch):
    """The real thing on the smallest configuration: test recipe, 2 steps of 2x2 completions, 3 methods."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert demo.main(["--tiny", "--out", str(out), "--cache-dir", str(cache)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True
    assert sorted(summary["runs"]) == ["grpo/seed0", "oar-g/seed0", "oar-p/seed0"]
    for run in summary["runs"].values():
        assert [h["step"] for h in run["history"] if "reward" in h] == [1, 2]
        assert 0.0 <= run["after"]["sampled"] <= 1.0 and 0.0 <= run["after"]["greedy"] <= 1.0
        assert run["before"] == summary["warm_start"]["accuracy"]
    for name in ("reward.png", "entropy.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "OAR-P" in html and "OAR-G" in html
    assert (out / "report.html").stat().st_mode & 0o777 == default_file_mode()  # not mkstemp's 0o600
    # A rerun with the same configuration trains nothing.
    monkeypatch.setattr(demo, "train_one", lambda *a, **k: pytest.fail("finished runs must be skipped"))
    assert demo.main(["--tiny", "--out", str(out), "--cache-dir", str(cache)]) == 0
