"""`oar-rl attribute` and `oar-rl oracle` end to end on a tiny random model (bench: test_bench.py)."""

from __future__ import annotations

import json

import pytest
import torch

from oar_rl.analysis import attribute, recall
from oar_rl.cli import main as cli_main


def test_attribute_scores_a_given_trace(tiny_model_dir, tmp_path):
    out = tmp_path / "attr"
    rc = attribute.main(
        [
            "--model",
            str(tiny_model_dir),
            "--prompt",
            "Compute 2+3.",
            "--completion",
            "First 2+3=5.<answer>5</answer>",
            "--credits",
            "oar-p,oar-g,entropy,random",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    page = (out / "heatmaps.html").read_text()
    for name in ("oar-p", "oar-g", "entropy", "random"):  # one coloured row per method on the one line
        assert page.count(f"<tr><th>{name}</th>") == 1


def test_oracle_study_end_to_end(tiny_model_dir, tmp_path, monkeypatch):
    import oar_rl.data.arithmetic as arithmetic

    # A random model never solves arithmetic; make "correct" mean an odd-length completion so that about
    # half the sampled traces are correct and substitutions that change the greedy suffix flip correctness.
    monkeypatch.setattr(arithmetic, "check", lambda text, answer: len(text) % 2 == 1)
    out = tmp_path / "oracle"
    rc = recall.main(
        [
            "--model",
            str(tiny_model_dir),
            "--trajectories",
            "3",
            "--max-problems",
            "160",  # sampled in chunks of 32 only until 3 correct ones are found
            "--max-new-tokens",
            "10",
            "--credits",
            "oar-p,random",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    result = json.loads((out / "recall.json").read_text())
    assert result["trajectories"] == 3 and result["pivots"] > 0
    for curve in result["recall"].values():
        values = [curve[k] for k in sorted(curve, key=float)]
        assert all(0.0 <= v <= 1.0 for v in values)
        assert values == sorted(values)  # recall grows with K
        assert curve["1"] == 1.0  # every pivot is within the top 100%
    assert (out / "recall.png").stat().st_size > 1000
    assert "<th>oracle</th>" in (out / "heatmaps.html").read_text()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["attribute", "--credits", "oar-x"], "'oar-x' is not a registered credit rule"),
        (["attribute", "--model", "/nonexistent/model"], "no such local directory"),
        (["attribute", "--completion", "x"], "--completion needs --prompt"),
        (["oracle", "--split", "bogus"], "--split"),
        (["oracle", "--split", "hard"], "--split"),  # an arithmetic split; the default task is wordproblems
        (["oracle", "--trajectories", "0"], "--trajectories"),
    ],
)
def test_bad_input_is_a_clear_error(argv, needle, capsys, tmp_path):
    assert cli_main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert needle in capsys.readouterr().err


def test_unwritable_out_is_refused(tiny_model_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert attribute.main(["--model", str(tiny_model_dir), "--out", str(blocker / "sub")]) == 2
    assert "--out" in (err := capsys.readouterr().err) and "not writable" in err


def test_oracle_takes_the_task_and_its_splits(tiny_model_dir, tmp_path, monkeypatch):
    """`--task arithmetic --split hard`: the task's own split and checker (exact_check, patched here)."""
    import oar_rl.data.arithmetic as arithmetic

    monkeypatch.setattr(arithmetic, "check", lambda text, answer: True)
    out = tmp_path / "o"
    argv = ["--task", "arithmetic", "--split", "hard", "--model", str(tiny_model_dir), "--trajectories", "2"]
    argv += ["--max-problems", "8", "--max-new-tokens", "4", "--credits", "random", "--out", str(out)]
    assert recall.main(argv) == 0
    result = json.loads((out / "recall.json").read_text())
    assert result["trajectories"] == 2 and result["settings"]["split"] == "hard"
    assert result["settings"]["task"] == "arithmetic" and result["settings"]["max_new_tokens"] == 4


def test_real_recall_problem_generators_state_their_gold():
    """The real-model recall's problems: each gold answer is the arithmetic of its own prompt."""
    import re

    from experiments.real_model.recall import make_own_problems, make_problems

    own = make_own_problems(50, seed=3)
    assert own == make_own_problems(50, seed=3) and len(own["prompt"]) == 50
    for prompt, gold in zip(own["prompt"], own["answer"], strict=True):
        a, b = map(int, re.match(r"\w+ has (\d+) \w+ and buys (\d+) more", prompt).groups())
        assert gold == str(a + b) and "\\boxed{}" in prompt
    for prompt, ref, gold in make_problems(50, seed=3):
        pattern = r"\w+ has (\d+) \w+\. \w+ buys (\d+) more and then gives away (\d+)"
        a, b, c = map(int, re.match(pattern, prompt).groups())
        assert gold == str(a + b - c) and int(gold) > 0 and ref.endswith(f"\\boxed{{{gold}}}.")


def test_readout_rows_cut_each_continuation_to_its_budget_and_stop_at_eos():
    """The forced read-out: prefix + the continuation's first `budget` tokens + the phrase; a continuation
    that ended (EOS within its budget) is not read out."""
    from experiments.real_model.recall import readout_rows

    eos, phrase = 0, torch.tensor([90, 91])
    prefixes = [torch.tensor([5, 6]), torch.tensor([7]), torch.tensor([8, 9, 10])]
    new = torch.tensor([[11, 12, 13], [14, 0, 15], [16, 17, 0]])  # row 2's EOS is past its budget
    rows, conts = readout_rows(prefixes, new, [2, 3, 0], phrase, eos)
    assert rows[0].tolist() == [5, 6, 11, 12, 90, 91] and conts[0].tolist() == [11, 12]
    assert rows[1] is None and conts[1].tolist() == [14]
    assert rows[2].tolist() == [8, 9, 10, 90, 91] and conts[2].tolist() == []


def test_oracle_cache_resumes_and_refuses_another_run(tmp_path):
    """Labels written after each trajectory come back on a restart; a file from another model, mode or
    seed is refused, not mixed in."""
    from experiments.real_model.recall import OracleCache
    from oar_rl.analysis.attribute import Trajectory

    t = Trajectory("q", "a 1.", "1", torch.tensor([1]), torch.tensor([2, 3]))
    other = Trajectory("q", "a 2.", "2", torch.tensor([1]), torch.tensor([2, 4]))
    cache = OracleCache(tmp_path / "oracle.json", "m", False, 0)
    assert cache.get(t) is None
    cache.put(t, torch.tensor([True, False]), True)
    again = OracleCache(tmp_path / "oracle.json", "m", False, 0)
    labels, finishable = again.get(t)
    assert labels.tolist() == [True, False] and finishable and again.hits == 1
    assert again.get(other) is None
    with pytest.raises(SystemExit, match="seed"):
        OracleCache(tmp_path / "oracle.json", "m", False, 1)
