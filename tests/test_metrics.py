"""ESS ratio (Eq. 27) and top-10% advantage mass (Eq. 28) against per-row references."""

from __future__ import annotations

import math

import pytest
import torch

from oar_rl.metrics import ess_ratio, top_advantage_mass


def batch(seed, b=9, c=37):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(b, c, generator=g) * torch.exp(torch.randn(b, c, generator=g))
    lengths = torch.randint(1, c + 1, (b,), generator=g)
    lengths[0] = 1
    mask = torch.arange(c)[None] < lengths[:, None]
    return w, mask


def ref_ess(w, mask):
    out = []
    for i in range(w.shape[0]):
        v = [float(x) for x, m in zip(w[i], mask[i], strict=True) if m]
        out.append(sum(v) ** 2 / (len(v) * sum(x * x for x in v)))
    return torch.tensor(out)


def ref_top(a, mask, fraction):
    out = []
    for i in range(a.shape[0]):
        v = sorted((abs(float(x)) for x, m in zip(a[i], mask[i], strict=True) if m), reverse=True)
        k = max(1, math.floor(fraction * len(v)))
        out.append(sum(v[:k]) / sum(v))
    return torch.tensor(out)


@pytest.mark.parametrize("seed", range(5))
def test_ess_matches_reference(seed):
    w, mask = batch(seed)
    torch.testing.assert_close(ess_ratio(w, mask), ref_ess(w, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fraction", [0.1, 0.25, 1.0])
def test_top_mass_matches_reference(seed, fraction):
    a, mask = batch(seed)
    a = a * torch.where(torch.rand(a.shape, generator=torch.Generator().manual_seed(seed)) > 0.5, 1.0, -1.0)
    torch.testing.assert_close(
        top_advantage_mass(a, mask, fraction), ref_top(a, mask, fraction), rtol=1e-5, atol=1e-6
    )


def test_hand_worked_cases():
    # uniform weights -> ESS ratio 1 ; weights (3, 1, 0, 0): (4)^2 / (4 * 10) = 0.4
    mask = torch.ones(2, 4)
    w = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 1.0, 0.0, 0.0]])
    torch.testing.assert_close(ess_ratio(w, mask), torch.tensor([1.0, 0.4]))
    # 20 tokens, K = 2; |A| = 10, 5, then eighteen 1s: (10 + 5) / 33
    a = torch.tensor([[10.0, -5.0] + [1.0] * 18])
    torch.testing.assert_close(top_advantage_mass(a, torch.ones(1, 20)), torch.tensor([15 / 33]))
    # 9 tokens -> K = max(1, 0) = 1
    torch.testing.assert_close(
        top_advantage_mass(torch.ones(1, 9) * 2, torch.ones(1, 9)), torch.tensor([1 / 9])
    )


def test_documented_edge_conventions():
    mask = torch.tensor([[0, 0, 0], [1, 1, 0], [1, 1, 1]])
    w = torch.tensor([[5.0, 5.0, 5.0], [0.0, 0.0, 9.0], [2.0, 2.0, 2.0]])
    torch.testing.assert_close(ess_ratio(w, mask), torch.tensor([1.0, 1.0, 1.0]))
    a = torch.zeros(3, 3)
    torch.testing.assert_close(top_advantage_mass(a, mask), torch.tensor([0.0, 0.5, 1 / 3]))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ess_ratio(torch.tensor([[-1.0, 2.0]]), torch.ones(1, 2)), "non-negative"),
        (lambda: ess_ratio(torch.tensor([[float("nan"), 2.0]]), torch.ones(1, 2)), "finite"),
        (lambda: top_advantage_mass(torch.ones(1, 2), torch.ones(1, 2), fraction=0.0), "fraction"),
        (lambda: top_advantage_mass(torch.ones(1, 2), torch.ones(1, 3)), "shape"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
