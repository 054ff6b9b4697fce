"""Mid-run checkpoints of study runs (`oar_rl.study.checkpoints`): a run stopped after a checkpoint and
resumed by a new trainer ends where the uninterrupted run ends, with its held-out curve and seconds
carried over; an incomplete checkpoint is never resumed from; the study resumes a stopped run and
records where."""

from __future__ import annotations

import json

import pytest
import torch

from oar_rl.study import checkpoints as C


class Stop(Exception):
    """Stands in for a process stopped between two steps."""


def _stop_after(monkeypatch, step: int):
    """Make every run stop (raise Stop) right after its checkpoint at `step` is complete; returns the
    real `on_save`, to put back."""
    save = C.RunCheckpoints.on_save

    def stop(self, args, state, control, **kwargs):
        save(self, args, state, control, **kwargs)
        if state.global_step == step:
            raise Stop

    monkeypatch.setattr(C.RunCheckpoints, "on_save", stop)
    return save


@pytest.fixture
def tiny(tmp_path):
    from oar_rl.data.arithmetic import load
    from oar_rl.study.training import heldout_accuracy
    from oar_rl.tiny import TEST_RECIPE, load_default_model

    _, tok, path = load_default_model(TEST_RECIPE, cache_dir=tmp_path / "cache", progress=False)
    ev = load("eval", 4)
    rows = [{"prompt": p, "answer": a} for p, a in zip(ev["prompt"], ev["answer"], strict=True)]

    def evaluate(model):
        return heldout_accuracy(
            model,
            tok,
            rows,
            lambda t, a: len(t) % 2 == 0,
            temperature=1.0,
            samples=2,
            seed=7,
            max_new_tokens=12,
        )

    return path, load("train", 8), evaluate


def _parity(completions, answer, **kwargs):
    """A reward the barely trained test model earns about half the time: every step has a gradient."""
    from oar_rl.rewards import completion_text

    return [float(len(completion_text(c)) % 2 == 0) for c in completions]


def _train(tiny, workdir, checkpoints=None, heldout=None, steps_made=None):
    from oar_rl.study.training import StepProgress, train_policy

    path, data, _ = tiny
    callbacks = [heldout] if heldout else []
    if steps_made is not None:  # counts the steps this process trains
        callbacks.append(StepProgress(lambda: steps_made.append(1)))
    return train_policy(
        path, data, _parity, credit="oar-g", seed=3, steps=3, prompts_per_step=2, num_generations=2,
        learning_rate=1e-3, max_completion_length=12, temperature=1.0, show_progress=False, workdir=workdir,
        callbacks=callbacks, checkpoints=checkpoints,
    )  # fmt: skip


def _losses(history):
    return [h["loss"] for h in history if "loss" in h]


def test_a_stopped_run_resumes_onto_the_uninterrupted_run(tiny, tmp_path, monkeypatch):
    from oar_rl.study.training import HeldOutEval

    evaluate = tiny[2]
    full_curve = HeldOutEval(evaluate, 1, 3)
    m_full, h_full, _ = _train(
        tiny, tmp_path / "w0", C.RunCheckpoints(tmp_path / "full", 1, [full_curve]), full_curve
    )

    stopped_curve = HeldOutEval(evaluate, 1, 3)
    save = _stop_after(monkeypatch, 2)
    run = {"protocol": "p", "seed": 3}
    with pytest.raises(Stop):
        _train(
            tiny, tmp_path / "w1", C.RunCheckpoints(tmp_path / "run", 1, [stopped_curve], run), stopped_curve
        )
    monkeypatch.setattr(C.RunCheckpoints, "on_save", save)
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    (tmp_path / "run" / "checkpoint-3").mkdir()  # a save cut short: no study_state.json, never resumed from

    with pytest.raises(ValueError, match="another protocol, rate or seed"):  # another run's checkpoint
        C.RunCheckpoints(tmp_path / "run", 1, [HeldOutEval(evaluate, 1, 3)], {**run, "seed": 4}).resume()
    curve = HeldOutEval(evaluate, 1, 3)
    resumed = C.RunCheckpoints(tmp_path / "run", 1, [curve], run)
    made: list[int] = []
    m, h, seconds = _train(tiny, tmp_path / "w2", resumed, curve, made)
    assert resumed.resumed_at == [2] and len(made) == 1  # step 3 only: steps 1-2 came from the checkpoint
    assert resumed.prior_seconds > 0 and seconds > resumed.prior_seconds
    assert curve.curve == pytest.approx(full_curve.curve) and sorted(curve.curve) == [1, 2, 3]
    assert curve.curve[1] == stopped_curve.curve[1]  # steps 1-2 measured by the stopped process, kept
    assert _losses(h) == pytest.approx(_losses(h_full), rel=1e-6, abs=1e-9) and len(_losses(h)) == 3
    for (name, p), (_, q) in zip(m.named_parameters(), m_full.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=name)
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(tiny[0])  # the runs moved: the equality above can fail
    assert any(
        not torch.allclose(p, q, atol=1e-4) for p, q in zip(m.parameters(), start.parameters(), strict=True)
    )
    state = json.loads((tmp_path / "run" / "checkpoint-3" / C.STATE_FILE).read_text())
    assert state["step"] == 3 and state["resumed_at"] == [2]  # the final step is saved too


def test_latest_checkpoint_skips_incomplete_and_refuses_a_mismatch(tmp_path):
    assert C.latest_checkpoint(tmp_path / "none") is None
    for step in (5, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-5" / C.STATE_FILE).write_text(json.dumps({"step": 5}))
    (tmp_path / "checkpoint-x").mkdir()
    path, state = C.latest_checkpoint(tmp_path)
    assert path.name == "checkpoint-5" and state["step"] == 5
    (tmp_path / "checkpoint-10" / C.STATE_FILE).write_text(json.dumps({"step": 7}))
    with pytest.raises(ValueError, match="step 7 is not the checkpoint's 10"):
        C.latest_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="every=0"):
        C.RunCheckpoints(tmp_path, 0, [])


def test_checkpoints_are_not_protocol_and_bad_values_are_named():
    from dataclasses import replace

    from oar_rl.study.args import build_parser, settings_from_args
    from oar_rl.study.config import PRESETS

    s = PRESETS["pretrained"]
    assert s.checkpoint_every == 5
    assert replace(s, checkpoint_every=None).protocol() == s.protocol()
    assert "checkpoint_every" not in s.tuning_protocol()
    parse = build_parser().parse_args
    assert settings_from_args(parse(["--pretrained", "--checkpoint-every", "0"])).checkpoint_every is None
    assert settings_from_args(parse(["--tiny", "--checkpoint-every", "2"])).checkpoint_every == 2
    with pytest.raises(ValueError, match="--checkpoint-every -1"):
        settings_from_args(parse(["--tiny", "--checkpoint-every", "-1"]))
    with pytest.raises(ValueError, match="checkpoint_every=0"):
        replace(s, checkpoint_every=0)


def test_the_study_resumes_a_stopped_run_and_records_where(tmp_path, monkeypatch):
    from oar_rl.study import cli as study_cli

    out = tmp_path / "out"
    args = ["--tiny", "--credits", "grpo", "--seeds", "1", "--recall", "0", "--checkpoint-every", "1",
            "--out", str(out), "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    save = _stop_after(monkeypatch, 1)
    with pytest.raises(Stop):
        study_cli.main(args)
    assert (out / ".checkpoints" / "runs" / "grpo.seed0" / "checkpoint-1" / C.STATE_FILE).is_file()
    assert not (out / "runs" / "grpo.seed0.json").exists()
    monkeypatch.setattr(C.RunCheckpoints, "on_save", save)
    assert study_cli.main(args) == 0
    rec = json.loads((out / "runs" / "grpo.seed0.json").read_text())
    assert rec["resumed_at"] == [1] and rec["final"]["step"] == 2 and len(_losses(rec["history"])) == 2
    assert "checkpoint_every" not in rec["protocol"]
    assert not any((out / ".checkpoints" / "runs").iterdir())  # served, removed
    _stop_after(monkeypatch, 1)
    with pytest.raises(Stop):  # --fresh: the stored run and any checkpoint go, the run trains again
        study_cli.main([*args, "--fresh"])
    assert (out / ".checkpoints" / "runs" / "grpo.seed0" / "checkpoint-1").is_dir()
    monkeypatch.setattr(C.RunCheckpoints, "on_save", save)
    assert study_cli.main([*args, "--fresh"]) == 0  # --fresh again: the stopped run's checkpoint is gone
    assert "resumed_at" not in json.loads((out / "runs" / "grpo.seed0.json").read_text())
