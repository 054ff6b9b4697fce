"""The pretrained confirmation's progress (experiments/pretrained_regime/progress.py), on folders made
here: run files and checkpoints found, the queue in confirm30.sh's order, the hours left by hand."""

from __future__ import annotations

import json

import pytest

from experiments.pretrained_regime import progress as P
from experiments.pretrained_regime.plan import PLANS

P30 = PLANS["steps30"]


def _folders(tmp_path):
    for name in ("confirm30", "grpo-steps39"):
        (tmp_path / name / "runs").mkdir(parents=True)
    (tmp_path / "confirm30" / "runs" / "grpo.seed0.json").write_text("{}")
    (tmp_path / "grpo-steps39" / "runs" / "grpo.seed0.json").write_text("{}")


def _checkpoint(tmp_path, folder, run, step, seconds, complete=True):
    d = tmp_path / folder / ".checkpoints" / "runs" / run / f"checkpoint-{step}"
    d.mkdir(parents=True)
    if complete:  # a checkpoint without its state file was cut short while saving: not read
        (d / "study_state.json").write_text(json.dumps({"step": step, "seconds": seconds}))


def test_the_queue_is_confirm30_shs_order():
    q = P.queue(P30)
    assert len(q) == 18
    assert [(r.folder, r.variant, r.seed, r.steps) for r in q[:4]] == [
        ("confirm30", "grpo", 0, 30), ("confirm30", "oar-g", 0, 30), ("grpo-steps39", "grpo", 0, 39),
        ("confirm30", "grpo", 1, 30),
    ]  # fmt: skip


def test_fit_puts_the_confirmation_folders_grpo_runs_first():
    q = P.queue(P30, fit=True)
    assert sorted(q, key=repr) == sorted(P.queue(P30), key=repr)
    assert [(r.folder, r.variant, r.seed) for r in q[:7]] == [("confirm30", "grpo", s) for s in range(6)] + [
        ("confirm30", "oar-g", 0)
    ]
    assert [(r.folder, r.seed) for r in q[7:9]] == [("grpo-steps39", 0), ("confirm30", 1)]


def test_hours_left_from_checkpoints_and_the_given_pace(tmp_path, capsys):
    _folders(tmp_path)
    _checkpoint(tmp_path, "confirm30", "oar-g.seed0", 4, 1600.0)
    _checkpoint(tmp_path, "confirm30", "oar-g.seed0", 6, 2400.0)
    _checkpoint(tmp_path, "confirm30", "oar-g.seed0", 8, 9999.0, complete=False)
    res = P.progress(tmp_path, P30, grpo_step=100.0, oar_g_ratio=1.5, eval_s=50.0)
    rows = {(r.folder, r.variant, r.seed): what for r, what, _ in res["rows"]}
    assert rows[("confirm30", "grpo", 0)] == "in"
    assert rows[("confirm30", "oar-g", 0)].startswith("checkpoint at step 6 of 30 (2,400 s, 400 s a step)")
    # oar-g seed 0: 24 steps at its own 400 s; then seeds 1-5: 5 x (30 x 100 + 30 x 150 + 39 x 100)
    want = 24 * 400 + 50 + 5 * (30 * 100 + 30 * 150 + 39 * 100 + 3 * 50)
    assert res["hours_left"] == pytest.approx(want / 3600)
    assert P.main(["--out", str(tmp_path), "--grpo-step", "100", "--oar-g-ratio", "1.5", "--eval", "50"]) == 0
    text = capsys.readouterr().out
    assert "confirm30/oar-g seed 0: checkpoint at step 6 of 30" in text
    assert f"2 of 18 run files in; about {want / 3600:.1f} machine-hours left" in text


def test_bad_input_is_refused_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit):
        P.main(["--out", str(tmp_path)])
    assert "no confirm30/ there" in capsys.readouterr().err
    _folders(tmp_path)
    with pytest.raises(SystemExit):
        P.main(["--out", str(tmp_path), "--grpo-step", "0"])
    assert "--grpo-step 0.0: must be a positive number" in capsys.readouterr().err
