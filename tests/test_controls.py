"""The controls of every recall table: the `position` signal and paired differences to the controls."""

from __future__ import annotations

import pytest
import torch

from oar_rl.analysis.recall import with_position
from oar_rl.analysis.recall_stats import causal_recall, control_differences
from oar_rl.importance import position_importance


def test_position_importance_counts_from_one_and_is_zero_on_padding():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert position_importance(mask).tolist() == [[1.0, 2.0, 3.0, 0.0], [1.0, 2.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="2-D"):
        position_importance(torch.ones(3))


def test_position_ranks_the_last_tokens_first():
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 8:] = False  # a shorter row: its last valid tokens are 6 and 7
    late = torch.zeros(2, 10, dtype=torch.bool)
    late[0, 9], late[1, 7] = True, True
    early = torch.zeros(2, 10, dtype=torch.bool)
    early[:, 0] = True
    scores = with_position({}, mask)
    assert causal_recall(scores["position"], late, mask, (0.1,)) == {0.1: 1.0}
    assert causal_recall(scores["position"], early, mask, (0.5,)) == {0.5: 0.0}


def test_control_differences_pair_every_other_signal_with_each_control():
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(6, 12, dtype=torch.bool)
    truth = torch.zeros(6, 12, dtype=torch.bool)
    truth[:, 10] = True
    scores = with_position({"oracle-like": truth.float(), "random": torch.rand(6, 12, generator=gen)}, mask)
    d = control_differences(scores, truth, mask, (0.1, 0.2), seed=0)
    assert set(d) == {"oracle-like − position", "oracle-like − random"}
    for c in ("position", "random"):
        ks = (0.1, 0.2)
        top, ctrl = causal_recall(truth.float(), truth, mask, ks), causal_recall(scores[c], truth, mask, ks)
        for k, (diff, lo, hi) in d[f"oracle-like − {c}"].items():
            assert diff == pytest.approx(top[k] - ctrl[k]) and lo <= diff <= hi


def test_step_bounds_join_digit_free_sentences_to_the_next_step():
    from experiments.real_model.steps import step_bounds

    r = "Let's see. Leo has 4 + 6 = 10 stamps. Finally, 10 - 9 = 1."
    assert [r[:b] for b in step_bounds(r)] == ["Let's see. Leo has 4 + 6 = 10 stamps.", r]
    r = "Tom has 4 + 6 = 10 pens. Ann has 3.5 - 2 = 1.5 cards. So Tom has 10 pens. Done."
    bounds = step_bounds(r)
    assert [r[:b].split(". ")[-1] for b in bounds] == [
        "Tom has 4 + 6 = 10 pens.",
        "Ann has 3.5 - 2 = 1.5 cards.",
        "Done.",
    ]
    assert bounds[-1] == len(r) and step_bounds("no digits here. none.") == [len("no digits here. none.")]


def test_per_step_recall_separates_early_pivots_from_late_ones():
    from experiments.real_model.steps import per_step_recall

    mask = torch.ones(4, 10, dtype=torch.bool)
    steps = torch.tensor([[1] * 5 + [2] * 5] * 4)
    oracle = torch.zeros(4, 10, dtype=torch.bool)
    oracle[:, 3] = True  # a step-1 pivot, not at the step's end
    oracle[:, 9] = True  # a step-2 pivot right before the answer
    scores = with_position({"truth": oracle.float(), "random": torch.rand(4, 10)}, mask)
    out = per_step_recall(scores, oracle, mask, steps, seed=0)
    assert (out["1"]["references"], out["1"]["pivots"], out["2"]["pivots"]) == (4, 4, 4)
    # ranked among all ten tokens, the top 10% (one token) is the last: position finds step 2's pivot only
    assert out["1"]["all"]["recall"]["position"]["0.1"] == 0.0
    assert out["2"]["all"]["recall"]["position"]["0.1"] == 1.0
    # within step 1 (five tokens; the top 20% is one token, its last, index 4), position still misses it
    assert out["1"]["within"]["recall"]["position"]["0.2"] == 0.0
    assert out["1"]["within"]["recall"]["truth"]["0.2"] == 1.0
    assert out["1"]["all"]["paired_difference"]["truth − position"]["0.2"][0] == pytest.approx(1.0)


def test_step_index_assigns_each_reasoning_token_to_its_sentence():
    from types import SimpleNamespace

    from experiments.real_model.steps import step_index
    from oar_rl.data.wordproblems import build_tokenizer

    tok = build_tokenizer()
    reasoning = "Okay. First, the pears go down: 15-8=7. Then 7-2=5."
    text = reasoning + " <answer>5</answer>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    end = len(tok(reasoning, add_special_tokens=False)["input_ids"])
    traj = SimpleNamespace(completion_ids=torch.tensor(ids))
    steps = step_index(tok, [traj], [end], (1, len(ids) + 2))[0]
    pieces = [tok.decode([i]) for i in ids]
    step1 = "".join(p for p, s in zip(pieces, steps.tolist(), strict=False) if s == 1)
    step2 = "".join(p for p, s in zip(pieces, steps.tolist(), strict=False) if s == 2)
    assert (step1, step2) == ("Okay. First, the pears go down: 15-8=7.", " Then 7-2=5.")
    assert steps[end:].tolist() == [0] * (len(ids) + 2 - end)


def test_study_recall_scores_any_standalone_rule_beside_the_controls(tmp_path, capsys):
    """`python -m oar_rl.study.recall --credits` takes the screened rules (span-level OAR-P here), each
    with its paired differences to both controls; a bad name exits 2 naming the valid ones."""
    import json

    from oar_rl.study.recall import main

    with pytest.raises(SystemExit) as e:
        main(["--credits", "oar-p,nope", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "'nope' is not a registered credit rule" in err and "valid: oar-p," in err
    assert main(["--trajectories", "2", "--credits", "oar-p-span", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err  # the standalone command says its phases (minutes on a real model)
    assert "[recall] sampling 20 warm-start completions" in err and "[recall] the oracle on 2 correct" in err
    assert "[recall] scoring the signals" in err
    truth = json.loads((tmp_path / "recall.json").read_text())["ground_truth"]
    names = set(truth["recall"])
    assert {"position", "random"} <= names and any(n.startswith("oar-p-span") for n in names)
    assert any(k.startswith("oar-p-span") and k.endswith("− position") for k in truth["paired_difference"])
