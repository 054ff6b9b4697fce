"""OAR-GP (oar_rl.importance.hybrid): selection, splice and the top-K% recall figure."""

from __future__ import annotations

import math

import pytest
import torch

from oar_rl.importance import gradient_importance, perturbation_importance
from oar_rl.importance.hybrid import hybrid_importance, splice_scores, top_fraction_mask, topk_recall
from oar_rl.tiny import tiny_qwen2

V = 40


def _ref_recall(scores, reference, mask, fraction):
    """Plain-Python expected recall under random tie-breaking, the two top sets drawn independently.

    Under a uniformly random order of ties, token j (h valid tokens scored above it, m tied with it,
    itself included) sits at place h + p with p uniform over 0..m-1, so P(j in top k) is the share of
    those places below k; the expected overlap of two independent sets is the sum of the products.
    """
    hit = total = 0.0
    for s_row, r_row, m_row in zip(scores.tolist(), reference.tolist(), mask.tolist(), strict=True):
        valid = [j for j, m in enumerate(m_row) if m]
        k = math.ceil(len(valid) * fraction)

        def chance(row, j, valid=valid, k=k):
            higher = sum(row[i] > row[j] for i in valid)
            tied = sum(row[i] == row[j] for i in valid)
            return sum(higher + p < k for p in range(tied)) / tied

        hit += sum(chance(s_row, j) * chance(r_row, j) for j in valid)
        total += k
    return hit / total


def test_top_fraction_and_recall_by_hand():
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    ref = torch.tensor([[5.0, 1.0, 4.0, 0.0, 2.0, 9.0], [0.0, 3.0, 1.0, 7.0, 0.0, 0.0]])
    ours = torch.tensor([[0.0, 1.0, 4.0, 3.0, 2.0, 9.0], [0.0, 3.0, 3.0, 7.0, 0.0, 0.0]])
    # row 0: n=5, k=ceil(0.4*5)=2: ref top {0, 2}, ours top {2, 3} (pos 5 is padding) -> 1 hit
    # row 1: n=3, k=ceil(1.2)=2: ref top {1, 2}, ours top {1, 2} (tie 3.0/3.0, both in) -> 2 hits
    sel = top_fraction_mask(ref, mask, 0.4)
    assert sel.tolist() == [
        [True, False, True, False, False, False],
        [False, True, True, False, False, False],
    ]
    assert topk_recall(ours, ref, mask, 0.4) == pytest.approx(3 / 4)
    assert topk_recall(ref, ref, mask, 0.4) == 1.0
    g = torch.Generator().manual_seed(0)
    for _ in range(20):  # random ties and masks against the slow reference
        m = torch.rand(3, 9, generator=g) > 0.3
        a = torch.randint(0, 4, (3, 9), generator=g).float()
        b = torch.randint(0, 4, (3, 9), generator=g).float()
        for f in (0.1, 0.2, 0.5):
            if m.any():
                assert topk_recall(a, b, m, f) == pytest.approx(_ref_recall(a, b, m, f))
    assert math.isnan(topk_recall(ours, ref, torch.zeros_like(mask), 0.2))
    # one score per span: the span tied at the cut is no better or worse for where the reference's top
    # token sits in it (breaking ties by position gave 1.0 for the first token, 0.0 for the last)
    one = torch.ones(1, 5, dtype=torch.bool)
    span = torch.tensor([[2.0, 2.0, 2.0, 2.0, 1.0]])  # k = ceil(0.2 * 5) = 1
    for j in range(4):
        reference = torch.zeros(1, 5)
        reference[0, j] = 1.0
        assert topk_recall(span, reference, one, 0.2) == pytest.approx(1 / 4)
    assert topk_recall(span, span, one, 0.2) == pytest.approx(1 / 4)  # two independent draws of a tie
    with pytest.raises(ValueError, match="NaN on 1 tokens of the mask"):
        topk_recall(torch.tensor([[float("nan"), 1.0, 0.0, 0.0, 0.0]]), span, one, 0.2)
    with pytest.raises(ValueError, match="fraction"):
        top_fraction_mask(ref, mask, 0.0)


def test_splice_keeps_orders_and_meets_at_p_min():
    scored = torch.ones(1, 5, dtype=torch.bool)
    grad = torch.tensor([[9.0, 1.0, 8.0, 3.0, 2.0]])
    pert = torch.tensor([[0.5, 0.0, 0.2, 0.0, 0.0]])
    sel = torch.tensor([[True, False, True, False, False]])
    out = splice_scores(grad, pert, sel, scored)
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.2 / 3, 0.2, 0.2, 0.2 * 2 / 3]]))
    # OAR-P finds a screened token irrelevant: the others get the floor 0
    out = splice_scores(grad, torch.tensor([[0.5, 0, 0.0, 0, 0]]), sel, scored)
    assert out.tolist() == [[0.5, 0.0, 0.0, 0.0, 0.0]]


def _batch():
    g = torch.Generator().manual_seed(3)
    B, P, C = 3, 5, 10
    p_ids, c_ids = torch.randint(4, V, (B, P), generator=g), torch.randint(4, V, (B, C), generator=g)
    p_mask, c_mask = torch.ones(B, P, dtype=torch.long), torch.ones(B, C, dtype=torch.long)
    p_mask[1, :2] = 0
    c_mask[2, 6:] = 0
    return p_ids, p_mask, c_ids, c_mask


def test_hybrid_on_a_tiny_model():
    model = tiny_qwen2(V, seed=2, hidden_size=32)
    batch = _batch()
    gk = dict(noise_std=1e-2, generator=None)
    p_kw = dict(mask_token_id=1)
    exact = perturbation_importance(model, *batch, **p_kw)
    torch.manual_seed(0)
    full = hybrid_importance(model, *batch, fraction=1.0, gradient_kwargs=gk, perturbation_kwargs=p_kw)
    torch.testing.assert_close(full, exact)  # fraction 1: exact OAR-P
    assert topk_recall(full, exact, batch[3], 0.2) == 1.0

    torch.manual_seed(0)
    grad = gradient_importance(model, *batch, **gk)
    torch.manual_seed(0)
    hyb = hybrid_importance(model, *batch, fraction=0.3, gradient_kwargs=gk, perturbation_kwargs=p_kw)
    mask = batch[3].bool()
    sel = top_fraction_mask(grad, mask, 0.3)
    assert sel.sum(dim=1).tolist() == [3, 3, 2]  # ceil(0.3 * 10), ceil(0.3 * 10), ceil(0.3 * 6)
    torch.testing.assert_close(hyb[sel], exact[sel])  # rescored tokens carry exact OAR-P
    for b in range(3):
        rest = mask[b] & ~sel[b]
        assert float(hyb[b][rest].max()) <= float(hyb[b][sel[b]].min()) + 1e-12
        # unscreened tokens keep OAR-G's order
        assert torch.equal(
            torch.argsort(hyb[b][rest], stable=True), torch.argsort(grad[b][rest], stable=True)
        )
    assert (hyb[~mask] == 0).all()
    rec = topk_recall(hyb, exact, mask, 0.2)
    assert rec == pytest.approx(_ref_recall(hyb, exact, mask, 0.2))
    with pytest.raises(ValueError, match="positions"):
        hybrid_importance(model, *batch, perturbation_kwargs={"positions": sel})
