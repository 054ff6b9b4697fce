"""The long-chain regime (issue 33): its generator, teacher, splits and figures, and that the short regime
it sits beside is unchanged (same problems, same recipe hashes)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from oar_rl.data import wordproblems as wp

ROOT = Path(__file__).resolve().parents[1]


def _digest(problems) -> str:
    return hashlib.sha256("".join(p.prompt + p.solution for p in problems).encode()).hexdigest()[:12]


def test_the_short_regime_is_unchanged():
    """The streams every committed short-regime result was made on (digests taken before issue 33)."""
    assert _digest(wp.split_problems("validation", 50)) == "bba34702a7fe"
    slipped = wp.generate(wp.DEFAULT_CONFIG, 2000, 4321, slip_prob=0.2)
    assert hashlib.sha256("".join(p.solution for p in slipped).encode()).hexdigest()[:12] == "81bbbbe965a3"
    from oar_rl.shipped import FIRST_WORDPROBLEMS_RECIPE, WORDPROBLEMS_RECIPE

    assert WORDPROBLEMS_RECIPE.hash() == "24cc7917ecfa2133"
    assert FIRST_WORDPROBLEMS_RECIPE.hash() == "d30225c1cf6e2256"
    assert "trap_prob" not in wp.DEFAULT_CONFIG.to_dict()


def test_long_problems_are_long_and_their_roles_are_the_labellers():
    problems = wp.split_problems("validation", 60, "wordproblems-long")
    events = [len(p.steps) - sum(op == "*" for _, op, _, _ in p.steps) for p in problems]
    assert min(events) >= 6 and max(events) <= 8
    for p in problems:
        assert list(p.roles) == wp.label_roles(p.solution)
        assert p.solution.endswith(f"<answer>{p.answer}</answer>")  # the clean stream is right
        assert 0 <= p.answer <= wp.LONG_CONFIG.max_result
    traps = [p for p in problems if any(t in p.prompt for t in (" gets ", " takes "))]
    assert 0.3 < len(traps) / len(problems) < 0.7  # trap_prob 0.5
    assert all(not any(t in p.prompt for t in (" gets ", " takes ")) for p in wp.split_problems("eval", 200))


def test_long_splits_are_disjoint_from_train_and_from_the_short_regime():
    cfg, size, seed = wp.LONG_SPLITS["train"]
    train = {p.prompt for p in wp.generate(cfg, size, seed)}
    held = wp.split_problems("eval", 100, "wordproblems-long")
    assert {p.prompt for p in held}.isdisjoint(train)
    assert {p.prompt for p in wp.split_problems("validation", 100, "wordproblems-long")}.isdisjoint(train)
    assert {p.prompt for p in held}.isdisjoint({p.prompt for p in wp.split_problems("eval", 100)})
    with pytest.raises(ValueError, match="unknown word-problem task 'nope'"):
        wp.split_problems("eval", 1, "nope")


def test_teacher_misreads_only_trap_steps_and_carries_the_misread():
    steps = [(10, "+", 3, 13), (13, "-", 4, 9), (9, "+", 5, 14)]
    kinds = ["gain", "loss", "gain"]
    traps = [False, True, False]
    flipped = 0
    for seed in range(200):
        out = wp.teacher_slips(steps, kinds, 10, random.Random(seed), 0.0, traps, 0.6)
        assert out[0] == steps[0] and out[2][1] == "+"
        if out[1][1] == "+":  # misread: 13+4=17, carried: 17+5=22
            flipped += 1
            assert out[1] == (13, "+", 4, 17) and out[2] == (17, "+", 5, 22)
        else:
            assert out == steps
    assert 90 < flipped < 150  # ~0.6 of 200
    assert wp.teacher_slips(steps, kinds, 10, random.Random(0), 0.0, [False] * 3, 0.6) == steps


def test_long_config_is_validated_and_keeps_its_later_fields():
    assert wp.LONG_CONFIG.to_dict()["trap_prob"] == 0.5
    with pytest.raises(ValueError, match=r"trap_prob=1\.5"):
        wp.WordProblemConfig(name="wordproblems-long", trap_prob=1.5)
    with pytest.raises(ValueError, match="must be one of"):
        wp.WordProblemConfig(name="other")
    with pytest.raises(ValueError, match=r"misread_prob=1\.0"):
        wp.generate(wp.LONG_CONFIG, 1, 0, misread_prob=1.0)


def test_the_long_tokenizer_holds_every_new_word_as_one_token():
    tok = wp.build_tokenizer(wp.LONG_CONFIG)
    for word in ("gets", "takes", "becomes", "makes", "count"):
        assert len(tok(" " + word, add_special_tokens=False)["input_ids"]) == 1, word
    p = wp.split_problems("validation", 1, "wordproblems-long")[0]
    assert tok.decode(tok(p.solution, add_special_tokens=False)["input_ids"]) == p.solution


def test_last_step_start_and_token_starts():
    from oar_rl.analysis.task_figures import last_step_start, token_starts

    text = "So 3+4=7. Good. Then 7-2=5. That makes 5 apples. Done. <answer>5</answer>"
    assert text[last_step_start(text) :].startswith("Then 7-2=5.")
    assert last_step_start("First 3+4=7. <answer>7</answer>") == 0
    assert last_step_start("no equation <answer>1</answer>") is None
    assert last_step_start("3+4=7 and no answer") is None
    tok = wp.build_tokenizer(wp.LONG_CONFIG)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    starts = token_starts(tok, ids)
    assert starts[0] == 0 and starts == sorted(starts)
    assert all(text[s:].startswith(tok.decode([i])) for s, i in zip(starts, ids, strict=True))
    assert [text[s] for s in starts][:3] == ["S", " ", "3"]


def test_task_registry_serves_the_long_regime():
    from oar_rl.tasks import get_task, task_names

    assert "wordproblems-long" in task_names()
    task = get_task("wordproblems-long")
    rows = task.prompts("test", 5)
    assert rows[0]["prompt"] == wp.split_problems("eval", 1, "wordproblems-long")[0].prompt
    assert task.max_completion_length >= 300
    with pytest.raises(ValueError, match="at most 500 test problems"):
        task.prompts("test", 501)


def test_requirements_are_checked_at_their_edges():
    from oar_rl.analysis.task_figures import check_requirements

    ok = {"mean_reasoning_tokens": 150, "min_events": 5, "pivots_outside_last_step": 0.4,
          "greedy_accuracy": 0.89, "sampled_accuracy": 0.45}  # fmt: skip
    assert all(r["met"] for r in check_requirements(ok).values())
    for key, bad in (("mean_reasoning_tokens", 149.9), ("greedy_accuracy", 0.9), ("sampled_accuracy", 0.19),
                     ("pivots_outside_last_step", None)):  # fmt: skip
        assert not check_requirements({**ok, key: bad})[key]["met"], key


def test_the_figures_table_says_how_many_trajectories_the_oracle_tried():
    """The committed long figures labelled 30 trajectories and recorded no more: the oracle had tried 40
    (the default) and skipped those that close no answer, which the table did not say."""
    import json

    from oar_rl.analysis.task_figures import format_table

    committed = json.loads((ROOT / "results/credit-long/task-figures/figures.json").read_text())
    assert "oracle on 30 of the samples." in format_table(committed)  # recorded before the tried count
    table = format_table({**committed, "oracle_rows_tried": 40})
    assert "oracle on the 30 of 40 sampled trajectories it could label" in table


def test_a_saved_models_recipe_hash_is_the_recipes():
    from oar_rl.analysis.task_figures import _recipe_hash
    from oar_rl.shipped import LONG_WORDPROBLEMS_RECIPE, shipped_path, verify_shipped

    verify_shipped("wordproblems-long")  # the shipped files match their manifest and the code's recipe
    assert _recipe_hash(shipped_path("wordproblems-long")) == LONG_WORDPROBLEMS_RECIPE.hash()
    assert LONG_WORDPROBLEMS_RECIPE.hash() == "da20d80fd55c8835"
