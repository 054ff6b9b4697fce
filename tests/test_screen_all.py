"""`screen all`: the whole plan in its order (the screen's decision stages, the confirmation of the
winners, the later stages), sharing runs with other processes through claim files, and training a later
stage's run instead of idling while the runs it needs are another process's. Training is an instant
fake; the claim files, the run store, the decision rule and the reports are the real ones."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from conftest import register_fake_task
from oar_rl.study import claims, runner
from oar_rl.study.claims import claimable
from oar_rl.study.runner import RunStore
from oar_rl.study.screen import main, protocol
from oar_rl.study.screen_plan import Arm, ScreenPlan

PLAN = ScreenPlan(
    name="t",
    task="fake-screen",
    arms=(
        Arm("grpo", "grpo", baseline=None),
        Arm("a", "oar-g"),
        Arm("b", "random"),
        Arm("grpo2", "grpo", (("learning_rate", 2e-4),), baseline=None, stage=2),
        Arm("a2", "oar-g", (("learning_rate", 2e-4),), "grpo2", stage=2),
    ),
    screen_seeds=(1, 2),
    confirm_seeds=(7,),
    learning_rate=4e-4,
    lr_source="test",
    eval={"screen": ("validation", 3), "confirm": ("test", 5)},
    confirm_curve=(2, 1),
    screen_format=1,
    decision_stages=(1,),
    k_winners=1,
)


def _record(name: str, seed: int, lr: float) -> dict:
    final = {"grpo": 0.5, "a": 0.6, "b": 0.4}.get(name, 0.5)
    return {
        "variant": name, "method": "x", "credit": "x", "overrides": {}, "seed": seed, "learning_rate": lr,
        "curve": {}, "final": {"sampled": final, "greedy": final, "step": 2},
        "train_seconds": 1.0, "eval_seconds": 0.1, "wall_seconds": 1.1, "history": [],
    }  # fmt: skip


@pytest.fixture
def fake_task(monkeypatch, tmp_path):
    register_fake_task(monkeypatch, "fake-screen", tmp_path)


def test_all_runs_the_plan_in_order_and_trains_a_later_stage_while_it_waits(tmp_path, fake_task, monkeypatch):
    out = tmp_path / "out"
    store = RunStore(out / "screen" / "runs", protocol("screen", PLAN))
    other = subprocess.Popen(["sleep", "120"])  # another live process on this machine holds ("b", 2)
    claim = out / "screen" / ".claims" / "runs" / "b.seed2.json.claim"
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"pid": other.pid, "host": socket.gethostname(), "since": 0.0}))
    calls: list[tuple[str, int, str]] = []

    def fake_train(task, ws, settings, variant, seed, train_rows, eval_rows, workdir, progress, **kw):
        calls.append((variant.name, seed, eval_rows[0]["prompt"].rstrip("0123456789")))
        if variant.name == "grpo2" and seed == 1:  # meanwhile the other process finishes its run
            assert not claimable(store, "b", 2)
            store.put("b", 2, _record("b", 2, 4e-4))
            claim.unlink()
        return _record(variant.name, seed, kw["learning_rate"])

    def no_wait():
        raise AssertionError("it waited on another process's run instead of training a later stage's")

    monkeypatch.setattr(runner, "train_and_evaluate", fake_train)
    monkeypatch.setattr(claims, "_wait", no_wait)
    try:
        assert main(["all", "--out", str(out)], plan=PLAN) == 0
    finally:
        other.kill()
        other.wait()
    assert calls == [
        ("grpo", 1, "validation"), ("a", 1, "validation"), ("b", 1, "validation"),
        ("grpo", 2, "validation"), ("a", 2, "validation"),
        ("grpo2", 1, "validation"),  # instead of waiting on ("b", 2)
        ("grpo", 7, "test"), ("a", 7, "test"),  # the winner's confirmation, with its baseline
        ("a2", 1, "validation"), ("grpo2", 2, "validation"), ("a2", 2, "validation"),
    ]  # fmt: skip
    assert json.loads((out / "screen" / "study.json").read_text())["winners"] == ["a"]
    assert (out / "confirm.md").exists() and not any(claim.parent.iterdir())
    assert main(["all", "--out", str(out)], plan=PLAN) == 0 and len(calls) == 11  # complete: trains nothing


def test_all_refuses_the_options_of_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["all", "--arms", "a", "--out", str(tmp_path)], plan=PLAN)
    assert "--stages and --arms are for `run`" in capsys.readouterr().err


def test_a_claim_being_written_is_held_and_a_stale_unreadable_one_is_not(tmp_path):
    import os
    import time

    store = RunStore(tmp_path / "runs", {"p": 1})
    path = tmp_path / ".claims" / "runs" / "x.seed0.json.claim"
    path.parent.mkdir(parents=True)
    path.write_text("")  # created, not yet filled
    assert not claimable(store, "x", 0)
    old = time.time() - 600
    os.utime(path, (old, old))
    assert claimable(store, "x", 0)
    path.write_text(json.dumps({"pid": os.getpid(), "host": "another-machine"}))
    assert not claimable(store, "x", 0)  # another machine's claim is never taken over
