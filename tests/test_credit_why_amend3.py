"""Issue 56: Amendment 3's arms in the plan, its settings derived from the committed run files, its answers
("not yet run" until its runs are in), and run files whose protocol block says what each arm trained with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.credit_why import amend3
from experiments.credit_why.plan import (
    CONFIRM_ARMS,
    SAMPLES_COMPLETIONS,
    SECONDS_PROMPTS,
    amendment3_names,
    confirm_plan,
)
from oar_rl.study.config import protocol_hash
from oar_rl.study.provenance import run_settings
from oar_rl.study.runner import RunStore
from oar_rl.study.screen import load_runs, protocol

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results/credit-why"
PLAN = confirm_plan(2e-4, 1e-4, 30)
SEEDS = tuple(range(400, 410))
SHOWN = ("learning_rate", "prompts_per_step", "num_generations")


def test_the_amendments_arms_are_in_the_plan_and_change_no_protocol():
    by = {a.name: (a.method, dict(a.overrides), a.stage) for a in PLAN.arms}
    assert by["first-error[lr=2e-4]"] == ("first-error", {"learning_rate": 2e-4}, 3)
    assert by["grpo[lr=1e-4]"] == ("grpo", {"learning_rate": 1e-4}, 3)
    assert by["grpo-seconds"] == ("grpo", {"learning_rate": 2e-4, "prompts_per_step": SECONDS_PROMPTS}, 3)
    assert by["grpo-samples"] == ("grpo", {"learning_rate": 2e-4, "num_generations": SAMPLES_COMPLETIONS}, 3)
    assert len(PLAN.arms) == 11 and len(CONFIRM_ARMS) == 7  # the leaderboard's blinded arms stay the seven
    assert protocol("confirm", PLAN) == protocol("confirm", confirm_plan(2e-4, 1e-4, 30, amendment3=False))
    assert protocol_hash(protocol("confirm", PLAN)) == "3124d18dbddb41e9"  # the 70 committed files'


def _committed() -> dict:
    return load_runs(OUT, "confirm", PLAN)


def test_the_amendments_settings_are_what_the_committed_run_files_give():
    from experiments.credit_why.__main__ import _same_load

    runs = _committed()
    rec = amend3.derive(runs, _same_load(OUT, ("grpo", "grpo-compute", "first-error")))
    sec, smp = rec["seconds_matched"], rec["samples_matched"]
    assert (
        (sec["prompts_per_step"], smp["num_generations"])
        == (SECONDS_PROMPTS, SAMPLES_COMPLETIONS)
        == (21, 15)
    )
    assert sec["exact"] == pytest.approx(20.92, abs=0.005) and sec["runs"] == {"grpo": 6, "grpo-compute": 5,
                                                                                "first-error": 7}  # fmt: skip
    assert smp["compute_completions_per_step"] == 240 == 16 * SAMPLES_COMPLETIONS
    assert rec["detectable"]["first-error − grpo"]["sampled"]["mde"] == pytest.approx(3.24, abs=0.005)
    assert rec["budget"]["runs"] == 40 and rec["budget"]["cpu_hours"] == pytest.approx(7.07, abs=0.005)
    assert json.loads((OUT / "amend3.json").read_text()) == json.loads(
        json.dumps(rec)
    )  # committed = regenerated
    assert (OUT / "amend3.md").read_text() == amend3.markdown_settings(rec)
    prereg = (OUT / "PREREGISTRATION.md").read_text()
    amendment = prereg[prereg.index("## Amendment 3") :]
    for figure in ("20.92", "**21 prompts per step**", "**16 prompts × 15 completions**", "3.2", "11.9",
                   "7.1 CPU-hours"):  # fmt: skip
        assert figure in amendment, figure


def test_a_run_files_protocol_block_states_what_each_arm_trained_with(monkeypatch, tmp_path):
    """Through the writer: what `train_variant` hands to training for each arm of the plan is what the
    run file's protocol block says (an arm's override missing from the block fails here)."""
    from oar_rl.study import runner, training
    from oar_rl.study.screen_plan import run_inputs, settings

    seen: dict = {}
    monkeypatch.setattr(training, "train_policy", lambda *a, **kw: (seen.update(kw), (None, [], 0.0))[1])

    class Task:
        answer_pattern = None
        trainer_kwargs = None
        check = staticmethod(lambda t, g: True)
        reward = staticmethod(lambda *a, **k: [])

    class WS:
        path = tmp_path

    assert run_inputs  # the engine's inputs: `settings` is what every run of the plan trains from
    s = settings("confirm", PLAN)
    store = RunStore(tmp_path / "runs", protocol("confirm", PLAN))
    for arm in PLAN.arms:
        lr = runner.train_variant(
            Task, WS, s, arm.variant(), 400, [], tmp_path, [], learning_rate=s.learning_rate
        )[3]
        rec = store.put(arm.name, 400, {"variant": arm.name, "method": arm.method, "seed": 400,
                                        "overrides": dict(arm.overrides), "learning_rate": lr})  # fmt: skip
        block = json.loads((tmp_path / "runs" / RunStore.filename(arm.name, 400)).read_text())["protocol"]
        assert {k: block[k] for k in SHOWN} == {k: seen[k] for k in SHOWN}, arm.name
        for key, value in arm.overrides:
            assert block[key] == value, (arm.name, key)
        assert rec["protocol_hash"] == "3124d18dbddb41e9"
    assert len(store.check_all()) == len(PLAN.arms)


def test_the_committed_files_are_kept_as_written_and_their_settings_read_from_their_overrides():
    """The 70 files written before issue 56 hold the study protocol in `protocol` (learning rate 2e-4, 16
    prompts per step, whatever the arm used); `run_settings` gives each arm's own, as the plan fixes."""
    runs = _committed()
    assert sum(len(runs.get(arm.name, {})) for arm in PLAN.arms[:7]) == 70
    for arm in PLAN.arms[:7]:
        for seed, rec in runs[arm.name].items():
            assert "protocol_changes" not in rec and rec["protocol"] == protocol("confirm", PLAN)
            own = run_settings(rec)
            for key, value in arm.overrides:
                assert own[key] == value, (arm.name, seed, key)


def _fake(arms, gap: dict[str, float], seeds=SEEDS) -> dict:
    runs: dict = {}
    for a in arms:
        for s in seeds:
            acc = 0.5 + gap.get(a, 0.0) + 0.001 * (s % 3) + 0.0005 * ((s * len(a)) % 3 - 1)  # seed, jitter
            hist = [{"loss": 0.0, "completions/mean_length": 100.0}]
            final = {"sampled": acc, "greedy": 0.7 + gap.get(a, 0.0)}
            runs.setdefault(a, {})[s] = {
                "final": final,
                "train_seconds": 100.0,
                "overrides": {},
                "history": hist,
            }
    return runs


def test_the_amendments_answers_wait_for_its_runs_then_read_its_four_contrasts():
    names = amendment3_names(2e-4, 1e-4)
    base = _fake([n for n, _, _ in CONFIRM_ARMS], {"first-error": 0.01, "grpo-compute": 0.04})
    warm = {"greedy": 0.708}
    rec = amend3.answers(base, warm, SEEDS, (2e-4, 1e-4))
    assert not rec["complete"] and rec["runs"] == 0 and rec["of"] == 40
    text = "\n".join(amend3.markdown(rec))
    assert "Not yet run: 0 of 40 runs in" in text and "%" not in text
    runs = {
        **base,
        **_fake(names, {"first-error[lr=2e-4]": 0.03, "grpo[lr=1e-4]": -0.01, "grpo-samples": 0.04}),
    }
    rec = amend3.answers(runs, warm, SEEDS, (2e-4, 1e-4))
    c = rec["contrasts"]
    assert list(c) == ["first-error − grpo at 1e-4", "first-error − grpo at 2e-4",
                       "first-error − grpo-seconds", "grpo-compute − grpo-samples"]  # fmt: skip
    assert c["first-error − grpo at 1e-4"]["sampled"]["mean"] == pytest.approx(2.0, abs=0.1)
    assert c["first-error − grpo at 2e-4"]["sampled"]["mean"] == pytest.approx(3.0, abs=0.1)
    assert c["grpo-compute − grpo-samples"]["greedy"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert rec["interaction"]["mean"] == pytest.approx(1.0, abs=0.1)
    r = c["first-error − grpo-seconds"]  # the Bonferroni 98.75% interval is the wider one
    assert r["sampled_adjusted"]["low"] < r["sampled"]["low"] and abs(amend3.ADJUSTED - 0.9875) < 1e-12
    assert "above 0" in "\n".join(amend3.markdown(rec))
    # the descriptive contrasts the amendment names, and the runs more than 2 greedy points down
    d = rec["descriptive"]
    assert list(d) == ["grpo-seconds − grpo", "grpo-samples − grpo"]
    assert rec["seconds_match"] == pytest.approx(1.0)  # every fake run trained 100 s
    slow = {
        **runs,
        "grpo-seconds": {s: {**r, "train_seconds": 100.0 + s - 400} for s, r in runs["grpo-seconds"].items()},
    }
    assert amend3.answers(slow, warm, SEEDS, (2e-4, 1e-4))["seconds_match"] == pytest.approx(1.045)
    ph = rec["post_hoc"]["first-error[lr=2e-4] − grpo-seconds"]["sampled"]  # labelled post hoc, no decision
    assert ph["mean"] == pytest.approx(3.0, abs=0.1)
    assert d["grpo-samples − grpo"]["sampled"]["mean"] == pytest.approx(4.0, abs=0.1)
    assert (
        rec["arms"]["grpo[lr=1e-4]"]["greedy_down"] == 0 and rec["arms"]["grpo-samples"]["greedy_down"] == 0
    )
    low = _fake(names, {"grpo[lr=1e-4]": -0.05})  # greedy 65%: 5.8 points below the warm start's 70.8%
    assert (
        amend3.answers({**base, **low}, warm, SEEDS, (2e-4, 1e-4))["arms"]["grpo[lr=1e-4]"]["greedy_down"]
        == 10
    )
    text = "\n".join(amend3.markdown(rec))
    assert "| grpo-samples − grpo (descriptive) |" in text and "| 0/10 |" in text
    assert "| first-error[lr=2e-4] − grpo-seconds (post hoc, added after the runs were read) |" in text


def test_a_claim_at_95_but_not_at_the_bonferroni_level_says_so():
    at95 = {"low": 0.2, "high": 3.0}
    assert amend3._verdict(at95) == "above 0"
    assert amend3._verdict(at95, {"low": -0.1, "high": 3.3}) == "above 0 (not at 98.75%)"
    assert amend3._verdict(at95, {"low": 0.05, "high": 3.2}) == "above 0"
    assert (
        amend3._verdict({"low": -1.0, "high": 1.0}, {"low": -1.5, "high": 1.5})
        == "not distinguishable from 0"
    )


def test_the_dry_run_lists_every_run_and_trains_nothing(tmp_path, capsys):
    from experiments.credit_why import __main__ as cli

    for name in ("rates.json",):
        (tmp_path / name).write_text((OUT / name).read_text())
    assert cli.main(["confirm", "--dry-run", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "protocol 3124d18dbddb41e9" in text and "110 runs to do" in text
    assert "| grpo-seconds | 3 | grpo | 2e-4 | 21 | 8 | 0 | 10 | – |" in text
    assert "| grpo-samples | 3 | grpo | 2e-4 | 16 | 15 | 0 | 10 | – |" in text
    assert not (tmp_path / "confirm").exists()
    assert cli.main(["confirm", "--dry-run", "--out", str(OUT)]) == 0
    text = capsys.readouterr().out
    landed = sum(len(_committed().get(arm.name, {})) for arm in PLAN.arms[7:])  # Amendment 3's, as they land
    assert (
        f"{40 - landed} runs to do" in text
        and "| first-error | 1 | first-error | 1e-4 | 16 | 8 | 10 | 0 | yes |" in text
    )
