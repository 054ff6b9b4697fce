"""The controls of every recall table: the `position` signal and paired differences to the controls."""

from __future__ import annotations

import pytest
import torch

from oar_rl.analysis.oracle import causal_recall
from oar_rl.analysis.recall import control_differences, with_position
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
