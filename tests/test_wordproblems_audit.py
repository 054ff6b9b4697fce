"""The word-problem data audit (`experiments/wordproblems_audit`): it passes on a small sample of the real
data, and it can fail -- an altered gold answer, a shared prompt, a wrong reference step, a teacher's
operator flip are each reported."""

from __future__ import annotations

import copy
import json

import pytest

from experiments.wordproblems_audit import audit, report
from experiments.wordproblems_audit.reader import Story
from experiments.wordproblems_audit.solutions import check_reference, read_teacher
from oar_rl.data import wordproblems as wp

SMALL = {"teacher_n": 300, "overlap_sizes": {"train": 30, "validation": 20, "test": 20}, "sft_n": 300}


@pytest.fixture(scope="module")
def long_result():
    return audit.run_task("wordproblems-long", 40, **SMALL)


def test_the_audit_passes_on_the_long_regime(long_result):
    r = long_result
    assert {s: g["disagreements"] for s, g in r["gold"].items()} == {"train": 0, "validation": 0, "test": 0}
    assert all(g["n"] == 40 and g["unreadable"] == 0 for g in r["gold"].values())
    assert all(x["bad_solutions"] == 0 and x["restates"] > 0 for x in r["references"].values())
    t = r["teacher"]
    assert t["configured"] == {"slip_prob": 0.08, "misread_prob": 0.6}
    assert t["prompts_equal_train_stream"] and t["counts"].get("bad", 0) == 0
    assert 0.2 < t["misread_rate"] < 0.6 and 0.04 < t["slip_rate_per_result"] < 0.12
    assert set(t["misread_rate_by_kind"]) == {"gets_from", "takes_from"}
    assert all(v == 0 for x in r["overlap"]["pairs"].values() for v in x.values())
    assert audit.failures(r) == []


def test_an_altered_gold_answer_is_reported(long_result):
    problems = wp.split_problems("validation", 5, "wordproblems-long")
    rows = [(p.prompt, p.answer) for p in problems]
    assert audit.audit_gold(rows)["disagreements"] == 0
    rows[2] = (rows[2][0], rows[2][1] + 1)
    g = audit.audit_gold(rows, "validation")
    assert g["disagreements"] == 1
    assert g["examples"] == [
        {
            "split": "validation",
            "index": 2,
            "prompt": rows[2][0],
            "gold": rows[2][1],
            "reader": problems[2].answer,
        }
    ]
    broken = copy.deepcopy(long_result)
    broken["gold"]["validation"] = g
    assert audit.failures(broken) == ["wordproblems-long validation: 1 gold disagreements, 0 unreadable"]


def test_a_shared_prompt_story_or_chain_is_reported(long_result):
    rows = [(p.prompt, p.answer) for p in wp.split_problems("train", 6, "wordproblems-long")]
    # the same story told with its first distractor sentence dropped: another prompt, the same story
    first = rows[0][0].split(". ")
    st = Story(rows[0][0])
    retold = next(
        ". ".join(first[:i] + first[i + 1 :]) for i, k in enumerate(st.kinds, start=1) if k == "distractor"
    )
    found = audit.overlap({"a": rows[:4], "b": [*rows[2:6], (retold, rows[0][1])]}, [("a", "b")])
    assert found["pairs"]["a & b"] == {"prompt": 2, "story": 3, "chain": 3}
    broken = copy.deepcopy(long_result)
    broken["overlap"]["pairs"] = found["pairs"]
    assert audit.failures(broken) == [f"wordproblems-long a & b: {k} shared by {by}" for by, k in
                                      (("prompt", 2), ("story", 3), ("chain", 3))]  # fmt: skip
    broken["structure_overlap_fails"] = False  # the short regime: only prompts fail
    assert audit.failures(broken) == ["wordproblems-long a & b: 2 shared by prompt"]


def test_a_wrong_reference_step_and_a_teacher_misread_are_seen():
    p = next(p for p in wp.generate(wp.LONG_CONFIG, 50, 7) if p.steps[1][1] != "*" and p.steps[0][1] != "*")
    st = Story(p.prompt)
    assert set(check_reference(st, p.solution, p.answer, restate=True, neutral=True)) == {"steps", "restates"}
    a, op, b, r = p.steps[0]
    eq = f"{a}{op}{b}={r}."
    wrong = p.solution.replace(eq, f"{a}{op}{b}={r + 1}.", 1)
    assert check_reference(st, wrong, p.answer, restate=True, neutral=True)["result"] == 1
    assert check_reference(st, p.solution, p.answer + 1, restate=True, neutral=True)["answer_tag"] == 1
    demo = next(
        d for d in wp.generate(wp.LONG_CONFIG, 300, 4331, slip_prob=0.0, misread_prob=0.6)
        if d.solution.split("<answer>")[1].split("<")[0] != str(d.answer)
    )  # fmt: skip
    seen = read_teacher(Story(demo.prompt), demo.solution, restate=True)
    assert seen["misreads"] == 1 and seen["slips"] == 0 and seen["bad"] == []
    assert seen["misread_kinds"][0] in {"gets_from", "takes_from"}


def test_a_failing_reference_or_an_unexplained_teacher_deviation_fails_the_audit(long_result):
    broken = copy.deepcopy(long_result)
    broken["references"]["test"]["bad_solutions"] = 1
    broken["teacher"]["counts"]["bad"] = 2
    assert audit.failures(broken) == [
        "wordproblems-long test: 1 reference solutions fail a check",
        "wordproblems-long: 2 demonstrations deviate other than by a slip or a misread",
    ]


def test_the_short_regime_reads_too():
    r = audit.run_task("wordproblems", 20, **SMALL)
    assert sum(g["disagreements"] for g in r["gold"].values()) == 0
    assert all(x["bad_solutions"] == 0 and x["restates"] == 0 for x in r["references"].values())
    assert r["teacher"]["misread_rate"] is None and 0.1 < r["teacher"]["slip_rate_per_result"] < 0.3
    assert audit.failures(r) == []


def test_main_writes_both_files_and_exits_1_on_a_failure(tmp_path, monkeypatch, long_result):
    monkeypatch.setattr(report, "run_task", lambda task, n, teacher_n=None: long_result)
    out = tmp_path / "audit"
    assert report.main(["--n", "40", "--tasks", "wordproblems-long", "--out", str(out)]) == 0
    record = json.loads((out / "audit.json").read_text())
    assert record["failures"] == [] and record["tasks"][0]["task"] == "wordproblems-long"
    assert "**Verdict: pass**" in (out / "audit.md").read_text()
    broken = copy.deepcopy(long_result)
    broken["gold"]["test"]["disagreements"] = 2
    monkeypatch.setattr(report, "run_task", lambda task, n, teacher_n=None: broken)
    assert report.main(["--n", "40", "--tasks", "wordproblems-long", "--out", str(out)]) == 1
    assert "**Verdict: FAIL**" in (out / "audit.md").read_text()
