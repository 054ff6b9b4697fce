"""`oar-rl study` end to end on the tiny warm start: 2 methods x 2 seeds x 2 steps, real TRL training,
real evaluation, recall vs the oracle and vs ground-truth roles, study.json + PNGs + report.html."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from oar_rl import tasks
from oar_rl.rewards import completion_text
from oar_rl.study import cli as study_cli


def _even(text: str, answer: str) -> bool:
    """A checker the barely trained test model passes about half the time (so advantages are non-zero
    and the oracle finds pivots): the completion has an even number of characters."""
    return len(text) % 2 == 0


def _reward(completions, answer, **kwargs):
    return [float(_even(completion_text(c), a)) for c, a in zip(completions, answer, strict=True)]


def _roles(prompt, completion_ids, tokenizer):
    return ["pivot" if i % 3 == 0 else "filler" for i in range(len(completion_ids))]


def _char_roles(text):
    return ["pivot" if i % 3 == 0 else "filler" for i in range(len(text))]


@pytest.fixture
def parity_task(monkeypatch):
    base = tasks.get_task("arithmetic")
    task = replace(
        base,
        name="parity",
        check=_even,
        reward=_reward,
        label_roles=_roles,
        trainer_kwargs=lambda: {"token_roles": _char_roles},
    )
    monkeypatch.setitem(tasks._REGISTRY, "parity", task)
    return task


def test_tiny_study_end_to_end_then_resume(tmp_path, parity_task, monkeypatch, capsys):
    out = tmp_path / "out"
    args = ["--tiny", "--task", "parity", "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    assert study_cli.main(args) == 0
    study = json.loads((out / "study.json").read_text())
    assert study["complete"] and study["scope"] == {
        "methods": ["grpo", "oar-g"],
        "seeds": 2,
        "method_seeds": {},
        "ablations": [],
    }
    assert sorted(study["runs"]) == ["grpo/seed0", "grpo/seed1", "oar-g/seed0", "oar-g/seed1"]
    for run in study["runs"].values():
        assert list(run["curve"]) == ["0", "1", "2"] and 0.0 <= run["final"]["sampled"] <= 1.0
        assert run["final"]["greedy"] is not None and run["history"]
        assert run["machine"]["cpu_capability"] and "machine" not in run["protocol"]  # issue 34
    main = study["groups"]["main"]
    assert main["oar-g"]["diff_to_grpo"]["seeds"] == [0, 1]
    assert "oar/ess_ratio" in main["oar-g"]["credit_metrics"]  # advantages were non-zero, OAR reshaped them
    recall = study["recall"]
    assert recall["trajectories"] >= 1, recall
    assert {"random", "entropy", "oar-g/as-mean", "oar-p/lt-logits"} <= set(recall["oracle"]["recall"])
    gt = recall["ground_truth"]
    assert gt["unlabelled"] == 0 and 0.3 < gt["pivot_fraction"] < 0.45  # every third token
    # the warm start's task figures, as `make demo` reports them in summary.json["task"]
    figures = json.loads((out / "summary.json").read_text())["task"]
    assert figures == study["task"]["figures"] and figures["labelled"] > 0
    assert set(figures["entropy_by_role"]) >= {"pivot", "filler"} and 0.0 < figures["pivot_fraction"] < 1.0
    assert study["wall"]["this_invocation_seconds"] > 0 and study["learning_rate"]["value"] == 5e-5
    for png in ("accuracy_main.png", "diff_to_grpo.png", "recall_oracle.png", "recall_ground_truth.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert "Recall@K% vs ground-truth pivots" in html and html.count("data:image/png;base64,") >= 4
    assert "Machines: " in html and "(4 runs)" in html and "reproduce on another CPU" in html

    # A rerun trains nothing and reproduces the same aggregate.
    def no_training(*a, **k):
        raise AssertionError("a finished run was retrained")

    monkeypatch.setattr(study_cli, "train_and_evaluate", no_training)
    assert study_cli.main(args) == 0
    again = json.loads((out / "study.json").read_text())
    assert again["groups"] == study["groups"] and again["runs"] == study["runs"]

    # The study's real files on a leaderboard of its own, beside the committed regimes (`--source`)
    from pathlib import Path

    from experiments.leaderboard import leaderboard

    page, root = tmp_path / "board.md", Path(__file__).resolve().parents[1]
    argv = ["--root", str(root), "--source", f"mine={out}", "--out", str(page)]
    assert leaderboard.main(argv) == 0, capsys.readouterr().err

    def cells(line: str) -> list[str]:
        return [c.split("</td>")[0] for c in line.split("<td>")[2:]]  # after the rule's own cell

    text = page.read_text()
    summary = cells(next(line for line in text.splitlines() if "<code>oar-g</code>" in line))
    assert summary[-1] == "exploratory, 2 seeds"  # the summary's last column group is the study's
    assert summary[-2] not in ("n/a", "")  # its Δ vs GRPO, from the study's own run files
    rows = [line for line in text.split("## mine: details")[1].splitlines() if "<code>oar-g</code>" in line]
    delta, blame = cells(rows[0]), cells(rows[1])  # the study's details: its Δ table, then its credit table
    assert (
        delta[0] == summary[-2]
        and delta[1] == "exploratory, 2 seeds"
        and delta[2].startswith(f"study {out}, ")
    )
    assert blame[2] != "n/a"  # its ground-truth recall, from the study's own recall.json


def test_heldout_evaluation_does_not_change_training(tmp_path):
    """Evaluating every step (forked RNG) must leave the training run exactly as without evaluation."""
    from oar_rl.data.arithmetic import load
    from oar_rl.study.training import HeldOutEval, train_policy
    from oar_rl.tasks import exact_reward
    from oar_rl.tiny import TEST_RECIPE, load_default_model

    _, tok, path = load_default_model(TEST_RECIPE, cache_dir=tmp_path / "cache", progress=False)
    rows = [
        {"prompt": p, "answer": a}
        for p, a in zip(load("eval", 4)["prompt"], load("eval", 4)["answer"], strict=True)
    ]

    def evaluate(m):
        from oar_rl.study.training import heldout_accuracy

        return heldout_accuracy(m, tok, rows, _even, temperature=1.0, samples=2, seed=7, max_new_tokens=12)

    common = dict(credit="random", seed=3, steps=2, prompts_per_step=2, num_generations=2, learning_rate=1e-3)
    common.update(max_completion_length=12, temperature=1.0, show_progress=False)
    data = load("train", 8)
    evaluated = HeldOutEval(evaluate, 1, 2)
    m1, h1, _ = train_policy(
        path, data, exact_reward, workdir=tmp_path / "a", callbacks=[evaluated], **common
    )
    m2, h2, _ = train_policy(path, data, exact_reward, workdir=tmp_path / "b", **common)
    assert sorted(evaluated.curve) == [1, 2]
    drop = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}
    keys = [k for k in h1[0] if k not in drop and "seconds" not in k and "time" not in k]
    assert [[h[k] for k in keys if k in h] for h in h1] == [[h[k] for k in keys if k in h] for h in h2]
    for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters(), strict=True):
        assert torch.equal(p1, p2), n1


def test_the_study_recall_scores_the_studys_own_rules(tmp_path, parity_task, monkeypatch):
    """A study's recall covers the built-in scorers and every method of the study with a standalone scorer:
    a --credit-module rule that reads the probe appears under every probe (before: the built-in list
    only, so the user's rule was missing). The extra signals key recall.json, so adding a rule recomputes
    the cached recall; a study of built-in methods keeps the key its recall files always had. Training is
    faked: the recall is the real pipeline on the tiny warm start."""
    from oar_rl import credits
    from oar_rl.credit_modules import LOADED
    from oar_rl.probes import PROBES
    from oar_rl.study.config import protocol_hash

    def fake_train(task, ws, settings, variant, seed, *a, learning_rate, **k):
        return {
            "variant": variant.name, "method": variant.method, "credit": variant.credit,
            "overrides": dict(variant.overrides), "seed": seed, "learning_rate": learning_rate,
            "curve": {"1": 0.5, "2": 0.5}, "final": {"sampled": 0.5, "greedy": 0.5, "step": 2},
            "train_seconds": 1.0, "eval_seconds": 0.1, "wall_seconds": 1.1, "history": [],
        }  # fmt: skip

    monkeypatch.setattr(study_cli, "train_and_evaluate", fake_train)
    src = tmp_path / "t_recall_rule.py"
    src.write_text(
        "from oar_rl import register_credit\n"
        "register_credit('t-recall', lambda m, b, probe, **kw: b.completion_mask.float().cumsum(1),\n"
        "                reshape='bilevel', probe=True)\n"
    )
    out = tmp_path / "out"
    base = ["--tiny", "--task", "parity", "--seeds", "1", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    try:
        assert study_cli.main([*base, "--credits", "grpo"]) == 0
        study = json.loads((out / "study.json").read_text())
        cached = json.loads((out / "recall.json").read_text())
        assert cached["protocol_hash"] == protocol_hash({**study["protocol"], "recall_format": 2})
        assert not any(k.startswith("t-recall") for k in study["recall"]["oracle"]["recall"])
        assert study_cli.main([*base, "--credits", "grpo,t-recall", "--credit-module", str(src)]) == 0
        recall = json.loads((out / "recall.json").read_text())
        assert recall["protocol_hash"] != cached["protocol_hash"]  # recomputed, not read back
        names = set(recall["result"]["oracle"]["recall"])
        assert {f"t-recall/{p}" for p in PROBES} <= names and {"oar-g/as-mean", "position", "random"} <= names
        assert json.loads((out / "study.json").read_text())["recall"] == recall["result"]
    finally:
        LOADED.pop(str(src.resolve()), None)
        if "t-recall" in credits.CREDIT_MODES:
            credits.unregister_credit("t-recall")
