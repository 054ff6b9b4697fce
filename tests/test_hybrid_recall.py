"""experiments/hybrid_recall (`python -m experiments.hybrid_recall`): the pooled recall and its
bootstrap, and a tiny run on the shipped word-problem model (figures printed, never asserted)."""

from __future__ import annotations

import json

import pytest
import torch

from experiments.hybrid_recall import hybrid_recall as hr


def test_recall_counts_and_pooled_interval():
    ref = torch.tensor([[5.0, 4, 3, 2, 1, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    got = torch.tensor([[5.0, 0, 3, 2, 1, 0, 0, 0, 0, 9], [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]])
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 5:] = False  # row 1: 5 tokens, top 20% = 1 token
    hits, sizes = hr.recall_counts(got, ref, mask, 0.2)
    # row 0: ref top-2 {0, 1}, got top-2 {9, 0} -> 1 hit; row 1: ref top {4}, got top {0} -> 0
    assert hits.tolist() == [1, 0] and sizes.tolist() == [2, 1]
    # a score that ties every token: each of the 2 reference tokens is in its top 2 of 10 with chance 1/5
    tied, tied_sizes = hr.recall_counts(torch.ones(2, 10), ref, mask, 0.2)
    assert tied.tolist() == pytest.approx([2 / 5, 1 / 5]) and tied_sizes.tolist() == [2, 1]
    res = hr.pooled_with_interval(hits, sizes, n_boot=500, seed=0)
    assert res["recall"] == pytest.approx(1 / 3) and res["rows"] == 2
    lo, hi = res["ci95"]
    assert 0.0 <= lo <= res["recall"] <= hi <= 0.5  # resamples: {0,0} 0, {0,1} 1/3, {1,1} 1/2 at most
    same = hr.pooled_with_interval(torch.tensor([2, 1]), torch.tensor([2, 1]), n_boot=100, seed=0)
    assert same["recall"] == 1.0 and same["ci95"] == [1.0, 1.0]
    empty = hr.pooled_with_interval(torch.tensor([0]), torch.tensor([0]), n_boot=10, seed=0)
    assert empty["rows"] == 0


def test_tiny_run_on_the_word_problem_model(tmp_path):
    out = tmp_path / "hr"
    argv = ["--models", "wordproblems", "--n", "2", "--probes", "lt-logits", "--fractions", "0.25,1"]
    assert hr.main([*argv, "--boot", "50", "--out", str(out)]) == 0
    res = json.loads((out / "hybrid_recall.json").read_text())
    recall = res["models"]["wordproblems"]["probes"]["lt-logits"]["recall"]["0.2"]
    assert set(recall) == {"oar-g", "oar-gp@0.25", "oar-gp@1", "random"}
    assert recall["oar-gp@1"]["recall"] == 1.0  # fraction 1 is exact OAR-P
    assert "| oar-gp@0.25 |" in (out / "hybrid_recall.md").read_text()
