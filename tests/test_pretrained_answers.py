"""The pretrained regime's pre-registered answers (experiments/pretrained_regime/answers.py), on run files
made here: the paired differences against a hand computation, the decisions, the arms' directories."""

from __future__ import annotations

import json
import math

import pytest

from experiments.pretrained_regime import answers as A
from experiments.pretrained_regime.plan import PLANS

P20, P30 = PLANS["steps20"], PLANS["steps30"]


def _run(
    folder, variant, seed, sampled, greedy, seconds=100.0, protocol="p", lr=1e-5, steps=20, machine=None
):
    path = folder / "runs" / f"{variant}.seed{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"variant": variant, "seed": seed, "protocol_hash": protocol, "train_seconds": seconds,
           "protocol": {"learning_rate": lr, "steps": steps, "task": "wordproblems-smollm2"},
           "final": {"sampled": sampled, "greedy": greedy, "samples": 300, "step": 20}}  # fmt: skip
    if machine is not None:
        rec["machine"] = machine
    path.write_text(json.dumps(rec))


XEON = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_capability": "AVX512", "cpu_count": 2, "torch_threads": 1}
EPYC = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "cpu_count": 2, "torch_threads": 2}


def _store(tmp_path, oar_shift=0.03, steps26_shift=0.05):
    rates, s26 = tmp_path / "confirm", tmp_path / "grpo-steps26"
    rates.mkdir()
    (rates / "warm_start.json").write_text(json.dumps({"accuracy": {"sampled": 0.4, "greedy": 0.667}}))
    noise = [0.01, -0.02, 0.0, 0.015, -0.005, 0.02, -0.01, 0.005, 0.0, -0.015]
    for s in range(10):
        base = 0.5 + 0.01 * s
        _run(rates, "grpo", s, base, 0.7, seconds=100.0)
        _run(rates, "oar-g", s, base + oar_shift + noise[s], 0.7 + noise[s], seconds=130.0)
        _run(s26, "grpo", s, base + steps26_shift, 0.69, seconds=126.0, protocol="q", steps=26)
    return noise


def test_p1_p2_match_a_hand_computation(tmp_path):
    noise = _store(tmp_path)
    res = A.answers(tmp_path, P20)
    p1 = next(
        c for c in res["contrasts"] if c["label"] == "P1" and c["metric"] == "sampled" and not c["subset"]
    )
    diffs = [0.03 + e for e in noise]
    mean = sum(diffs) / 10
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 9)
    half = 2.2621571627409915 * sd / math.sqrt(10)  # t_{0.975, 9}
    assert p1["mean"] == pytest.approx(mean, abs=1e-12)
    assert (p1["low"], p1["high"]) == pytest.approx((mean - half, mean + half), abs=1e-9)
    assert p1["decision"] == "supported" and p1["n"] == 10 and p1["seconds_ratio"] == pytest.approx(1.3)
    p2 = next(c for c in res["contrasts"] if c["label"] == "P2" and c["metric"] == "sampled")
    assert p2["treatment"] == "oar-g" and p2["reference"] == "grpo-steps26"
    assert p2["mean"] == pytest.approx(mean - 0.05, abs=1e-12) and p2["decision"] == "contradicted"
    sub = next(c for c in res["contrasts"] if c["subset"] == "seeds 1-9" and c["metric"] == "sampled")
    assert sub["n"] == 9 and sub["decision"] == "reported"
    assert res["arms"]["grpo"]["gain_sampled"] == pytest.approx(0.545 - 0.4)
    assert "| P1 | oar-g − grpo | sampled | 10 |" in A.markdown(res)


def test_not_distinguishable_when_the_interval_spans_zero(tmp_path):
    _store(tmp_path, oar_shift=0.0)
    res = A.answers(tmp_path, P20)
    p1 = next(
        c for c in res["contrasts"] if c["label"] == "P1" and c["metric"] == "sampled" and not c["subset"]
    )
    assert p1["low"] < 0 < p1["high"] and p1["decision"] == "not distinguishable"


def test_mixed_protocols_and_foreign_variants_stop_it(tmp_path):
    _store(tmp_path)
    _run(tmp_path / "confirm", "grpo", 3, 0.5, 0.7, protocol="other")
    with pytest.raises(ValueError, match="protocols"):
        A.answers(tmp_path, P20)
    _run(tmp_path / "confirm", "grpo", 3, 0.5, 0.7)
    _run(tmp_path / "grpo-steps26", "grpo", 3, 0.5, 0.7, protocol="q", lr=3e-5, steps=26)  # another rate
    with pytest.raises(ValueError, match="learning_rate"):
        A.answers(tmp_path, P20)
    _run(tmp_path / "grpo-steps26", "grpo", 3, 0.5, 0.7, protocol="q", steps=26)
    _run(tmp_path / "grpo-steps26", "oar-g", 0, 0.5, 0.7, protocol="q", steps=26)
    with pytest.raises(ValueError, match="no arm"):
        A.answers(tmp_path, P20)


def test_main_refuses_a_folder_without_the_grid(tmp_path, capsys):
    with pytest.raises(SystemExit):
        A.main(["--out", str(tmp_path), "--plan", "steps20"])
    assert "confirm/warm_start.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        A.main(["--out", str(tmp_path)])  # the default plan: the amended one
    assert "confirm30/warm_start.json" in capsys.readouterr().err


def test_grpo_seed0_is_shown_beside_the_grids_test_run(tmp_path):
    _store(tmp_path)
    assert "grpo_seed0" not in A.answers(tmp_path, P20)  # no grid run: nothing to show
    _run(tmp_path / "rates", "grpo", 0, 0.61, 0.66)
    res = A.answers(tmp_path, P20)
    assert res["grpo_seed0"]["grid"]["sampled"] == 0.61 and res["grpo_seed0"]["confirm"]["sampled"] == 0.5
    assert "61.0 and 50.0 sampled" in A.markdown(res)
    assert {c["treatment"] for c in res["contrasts"] if c["label"] == "S"} == {"entropy", "lowest-prob"}


def test_an_incomplete_or_missing_arm_decides_nothing(tmp_path):
    _store(tmp_path)
    (tmp_path / "confirm" / "runs" / "oar-g.seed7.json").unlink()  # a lost run
    res = A.answers(tmp_path, P20)
    p1 = next(
        c for c in res["contrasts"] if c["label"] == "P1" and c["metric"] == "sampled" and not c["subset"]
    )
    assert p1["n"] == 9 and p1["decision"] == "incomplete (9 of 10)"
    for f in (tmp_path / "grpo-steps26" / "runs").iterdir():
        f.unlink()
    p2 = next(c for c in A.answers(tmp_path, P20)["contrasts"] if c["label"] == "P2")
    assert p2["n"] == 0 and p2["decision"] == "no run files of grpo-steps26"
    assert "no run files of grpo-steps26" in A.markdown(A.answers(tmp_path, P20))


def test_the_amended_plan_reads_its_own_folders_seeds_and_steps(tmp_path, capsys):
    """Amendment 1 (steps30): confirm30/ at 30 steps, grpo-steps39/ at 39, seeds 0-5 decide; a run
    trained for the other plan's steps stops it; main writes answers30.*, not the first plan's files."""
    conf, comp = tmp_path / "confirm30", tmp_path / "grpo-steps39"
    conf.mkdir()
    (conf / "warm_start.json").write_text(json.dumps({"accuracy": {"sampled": 0.4, "greedy": 0.667}}))
    noise = [0.01, -0.02, 0.0, 0.015, -0.005, 0.02]
    for s in range(6):
        _run(conf, "grpo", s, 0.5, 0.7, steps=30)
        _run(conf, "oar-g", s, 0.53 + noise[s], 0.7, seconds=130.0, steps=30)
        _run(comp, "grpo", s, 0.55, 0.7, seconds=130.0, protocol="q", steps=39)
    _run(tmp_path / "steps30", "grpo", 0, 0.52, 0.66, steps=30)  # the bar's test run
    res = A.answers(tmp_path, P30)
    p1 = next(c for c in res["contrasts"] if c["label"] == "P1" and c["metric"] == "sampled")
    diffs = [0.03 + e for e in noise]
    assert p1["n"] == 6 and p1["mean"] == pytest.approx(sum(diffs) / 6, abs=1e-12)
    assert p1["decision"] == "supported"
    sub = next(c for c in res["contrasts"] if c["subset"] and c["metric"] == "sampled")
    assert sub["subset"] == "seeds 1-5" and sub["n"] == 5
    p2 = next(c for c in res["contrasts"] if c["label"] == "P2" and c["metric"] == "sampled")
    assert p2["reference"] == "grpo-steps39" and p2["decision"] == "contradicted"
    assert res["grpo_seed0"]["grid"]["sampled"] == 0.52
    assert {c["label"] for c in res["contrasts"]} == {"P1", "P2"}  # stage 2 is not in this plan
    assert "30 steps of 8 x 8 (grpo-steps39: 39), seeds 0-5" in A.markdown(res)
    (conf / "runs" / "oar-g.seed5.json").unlink()
    assert next(c for c in A.answers(tmp_path, P30)["contrasts"] if c["label"] == "P1")["decision"] == (
        "incomplete (5 of 6)"
    )
    _run(conf, "oar-g", 5, 0.5, 0.7, steps=30)
    assert A.main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / "answers30.md").is_file() and not (tmp_path / "answers.md").exists()
    capsys.readouterr()
    _run(comp, "grpo", 2, 0.55, 0.7, protocol="q", steps=26)  # the first plan's compute steps
    with pytest.raises(ValueError, match="26 steps; plan steps30 trains grpo-steps39 for 39"):
        A.answers(tmp_path, P30)


def test_seconds_are_compared_within_a_machine(tmp_path):
    """Amendment 2: seed 0's GRPO runs were made on the Xeon at one thread, the rest on the AMD EPYC at
    two. The seconds ratio pairs only runs of one machine and thread count; each arm's median is given
    per machine; P2 is also reported on seeds 1-5."""
    conf, comp = tmp_path / "confirm30", tmp_path / "grpo-steps39"
    conf.mkdir()
    (conf / "warm_start.json").write_text(json.dumps({"accuracy": {"sampled": 0.4, "greedy": 0.667}}))
    for s in range(6):
        m = XEON if s == 0 else EPYC
        fast = 1.0 if s == 0 else 2.3  # the AMD EPYC's steps take longer
        _run(conf, "grpo", s, 0.5, 0.7, seconds=100.0 * fast, steps=30, machine=m)
        _run(conf, "oar-g", s, 0.52 + 0.01 * s, 0.7, seconds=100.0 * 2.3 * (1.2 + 0.02 * s), steps=30,
             machine=EPYC)  # fmt: skip
        _run(comp, "grpo", s, 0.55, 0.7, seconds=130.0 * fast, protocol="q", steps=39, machine=m)
    res = A.answers(tmp_path, P30)
    p1 = next(c for c in res["contrasts"] if c["label"] == "P1" and c["metric"] == "sampled")
    assert p1["n"] == 6 and p1["seconds_seeds"] == 5
    assert p1["seconds_ratio"] == pytest.approx(1.2 + 0.02 * 3)  # the median of seeds 1-5's ratios
    subsets = {(c["label"], c["subset"]) for c in res["contrasts"] if c["metric"] == "sampled"}
    assert subsets == {("P1", ""), ("P1", "seeds 1-5"), ("P2", ""), ("P2", "seeds 1-5")}
    grpo = res["arms"]["grpo"]
    assert grpo["train_seconds"] == {A.machine({"machine": EPYC}): pytest.approx(230.0),
                                     A.machine({"machine": XEON}): pytest.approx(100.0)}  # fmt: skip
    assert A.machine({"machine": XEON}).startswith(
        "Intel(R) Xeon(R) Processor (AVX512), 2 cores, 1 torch thread,"
    )
    assert A.machine({}).startswith("not recorded")
    md = A.markdown(res)
    assert "230 (AMD EPYC (AVX2), 2 cores, 2 torch threads, torch ?: 1, 2, 3, 4, 5); 100 (Intel(R)" in md
    assert "| 1.26x (5) |" in md
    json.dumps(res)  # the answers file holds it


def test_pairs_across_machines_are_also_left_out_in_a_report_of_their_own(tmp_path):
    """Amendment 3: GRPO seed 2 of grpo-steps39 made on the Xeon at two threads, its OAR-G pair on the
    AMD EPYC: P2 is also reported on seeds 1, 3, 4, 5 (one machine and thread count), deciding nothing;
    P1, whose pairs all share a machine past seed 0, gets no such report."""
    xeon2 = {**XEON, "torch_threads": 2}
    conf, comp = tmp_path / "confirm30", tmp_path / "grpo-steps39"
    conf.mkdir()
    (conf / "warm_start.json").write_text(json.dumps({"accuracy": {"sampled": 0.4, "greedy": 0.667}}))
    gaps = [0.0, 0.01, -0.03, 0.02, 0.04, -0.01]
    for s in range(6):
        m = XEON if s == 0 else EPYC
        _run(conf, "grpo", s, 0.5, 0.7, steps=30, machine=m)
        _run(conf, "oar-g", s, 0.5, 0.7, steps=30, machine=EPYC)
        _run(comp, "grpo", s, 0.5 - gaps[s], 0.7, protocol="q", steps=39, machine=xeon2 if s == 2 else m)
    res = A.answers(tmp_path, P30)
    sampled = [c for c in res["contrasts"] if c["metric"] == "sampled"]
    assert {(c["label"], c["subset"]) for c in sampled} == {
        ("P1", ""),
        ("P1", "seeds 1-5"),
        ("P2", ""),
        ("P2", "seeds 1-5"),
        ("P2", "one machine: seeds 1, 3, 4, 5"),
    }
    one = next(c for c in sampled if c["subset"].startswith("one machine"))
    assert one["n"] == 4 and one["mean"] == pytest.approx((0.01 + 0.02 + 0.04 - 0.01) / 4, abs=1e-12)
    assert one["decision"] == "reported" and one["seconds_seeds"] == 4
    assert "oar-g − grpo-steps39 (one machine: seeds 1, 3, 4, 5) | sampled | 4 |" in A.markdown(res)
