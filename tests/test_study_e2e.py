"""`oar-rl study` end to end on the tiny warm start: 2 methods x 2 seeds x 2 steps, real TRL training,
real evaluation, recall vs the oracle and vs ground-truth roles, study.json + PNGs + report.html."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from oar_rl.rewards import completion_text
from oar_rl.study import cli as study_cli
from oar_rl.study import tasks


def _even(text: str, answer: str) -> bool:
    """A checker the barely trained test model passes about half the time (so advantages are non-zero
    and the oracle finds pivots): the completion has an even number of characters."""
    return len(text) % 2 == 0


def _reward(completions, answer, **kwargs):
    return [float(_even(completion_text(c), a)) for c, a in zip(completions, answer, strict=True)]


def _roles(prompt, completion_ids, tokenizer):
    return ["pivot" if i % 3 == 0 else "filler" for i in range(len(completion_ids))]


@pytest.fixture
def parity_task(monkeypatch):
    base = tasks.get_task("arithmetic")
    task = replace(base, name="parity", check=_even, reward=_reward, label_roles=_roles)
    monkeypatch.setitem(tasks._REGISTRY, "parity", task)
    return task


def test_tiny_study_end_to_end_then_resume(tmp_path, parity_task, monkeypatch, capsys):
    out = tmp_path / "out"
    args = ["--tiny", "--task", "parity", "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    assert study_cli.main(args) == 0
    study = json.loads((out / "study.json").read_text())
    assert study["complete"] and study["scope"] == {"methods": ["grpo", "oar-g"], "seeds": 2, "ablations": []}
    assert sorted(study["runs"]) == ["grpo/seed0", "grpo/seed1", "oar-g/seed0", "oar-g/seed1"]
    for run in study["runs"].values():
        assert list(run["curve"]) == ["0", "1", "2"] and 0.0 <= run["final"]["sampled"] <= 1.0
        assert run["final"]["greedy"] is not None and run["history"]
    main = study["groups"]["main"]
    assert main["oar-g"]["diff_to_grpo"]["seeds"] == [0, 1]
    assert "oar/ess_ratio" in main["oar-g"]["credit_metrics"]  # advantages were non-zero, OAR reshaped them
    recall = study["recall"]
    assert recall["trajectories"] >= 1, recall
    assert {"random", "entropy", "oar-g/as-mean", "oar-p/lt-logits"} <= set(recall["oracle"]["recall"])
    gt = recall["ground_truth"]
    assert gt["unlabelled"] == 0 and 0.3 < gt["pivot_fraction"] < 0.45  # every third token
    assert study["wall"]["this_invocation_seconds"] > 0 and study["learning_rate"]["value"] == 5e-5
    for png in ("accuracy_main.png", "diff_to_grpo.png", "recall_oracle.png", "recall_ground_truth.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert "Recall@K% vs ground-truth pivots" in html and html.count("data:image/png;base64,") >= 4

    # A rerun trains nothing and reproduces the same aggregate.
    def no_training(*a, **k):
        raise AssertionError("a finished run was retrained")

    monkeypatch.setattr(study_cli, "train_and_evaluate", no_training)
    assert study_cli.main(args) == 0
    again = json.loads((out / "study.json").read_text())
    assert again["groups"] == study["groups"] and again["runs"] == study["runs"]
