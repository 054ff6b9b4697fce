"""The pure reshaping math against slow, obviously correct per-row references."""

from __future__ import annotations

import math

import pytest
import torch

from oar_rl.reshape import (
    EPS,
    bilevel_weights,
    entropy_shaped_advantages,
    masked_quantile,
    normalize_importance,
    rescale_sum,
    token_advantages,
)

SEEDS = [0, 1, 2, 3]
SHAPES = [(1, 1), (3, 7), (5, 33), (8, 128)]


def random_batch(seed: int, shape: tuple[int, int], *, heavy_tail: bool = True):
    """Raw scores (some huge, some zero) with right padding of random lengths, incl. empty/1-token rows."""
    g = torch.Generator().manual_seed(seed)
    b, c = shape
    scores = torch.rand(shape, generator=g) ** 3
    if heavy_tail:
        scores = scores * torch.exp(4 * torch.randn(shape, generator=g))
    lengths = torch.randint(0, c + 1, (b,), generator=g)
    if b > 2:
        lengths[0], lengths[1] = c, min(1, c)
    mask = torch.arange(c)[None, :] < lengths[:, None]
    scores = torch.where(mask, scores, torch.full_like(scores, 123.0))  # junk on padding must not matter
    return scores, mask


# ---- slow references: one row at a time, straight from the equations --------------------------------
def ref_normalize(scores, mask):
    out = torch.zeros_like(scores, dtype=torch.float32)
    for i in range(scores.shape[0]):
        valid = [j for j in range(scores.shape[1]) if mask[i, j]]
        if not valid:
            continue
        bar = {j: math.log(1.0 + float(scores[i, j])) for j in valid}
        lo, hi = min(bar.values()), max(bar.values())
        for j in valid:
            out[i, j] = (bar[j] - lo) / (hi - lo + EPS)
    return out


def ref_bilevel(norm, mask, tau, beta, threshold, floor):
    out = torch.zeros_like(norm, dtype=torch.float32)
    for i in range(norm.shape[0]):
        valid = [j for j in range(norm.shape[1]) if mask[i, j]]
        if not valid:
            continue
        vals = torch.tensor([float(norm[i, j]) for j in valid])
        q = float(torch.quantile(vals, tau)) if threshold == "quantile" else tau
        omega = []
        for v in vals.tolist():
            if v < q:
                omega.append(max(v / (q + EPS), floor))
            else:
                omega.append(1.0 + beta * (v - q) / (1.0 - q + EPS))
        total = sum(omega)
        for j, w in zip(valid, omega, strict=True):
            out[i, j] = w * len(valid) / total if total > 0 else 1.0
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_normalize_matches_reference(seed, shape):
    scores, mask = random_batch(seed, shape)
    got = normalize_importance(scores, mask)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref_normalize(scores, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("tau", "beta", "threshold", "floor"),
    [
        (0.4, 2.0, "quantile", 0.0),
        (0.7, 1.0, "quantile", 0.1),
        (0.3, 2.0, "value", 0.0),
        (0.0, 0.5, "value", 0.2),
        (1.0, 2.0, "quantile", 0.0),
        (0.0, 2.0, "quantile", 0.0),
    ],
)
def test_bilevel_matches_reference(seed, shape, tau, beta, threshold, floor):
    scores, mask = random_batch(seed, shape)
    norm = normalize_importance(scores, mask)
    got = bilevel_weights(norm, mask, tau=tau, beta=beta, threshold=threshold, floor=floor)
    torch.testing.assert_close(
        got, ref_bilevel(norm, mask, tau, beta, threshold, floor), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("q", [0.0, 0.13, 0.4, 0.5, 0.99, 1.0])
def test_masked_quantile_equals_torch_quantile(seed, q):
    scores, mask = random_batch(seed, (6, 19))
    got = masked_quantile(scores, mask, q)
    for i in range(6):
        row = scores[i][mask[i]]
        want = torch.quantile(row, q) if row.numel() else torch.tensor(0.0)
        torch.testing.assert_close(got[i], want, rtol=1e-6, atol=1e-6)


def test_hand_worked_case():
    # One row, 5 valid tokens + 1 pad; raw I = e-1, 0, e^2-1, e^0.5-1, e^1.5-1 (so log1p is easy).
    scores = torch.tensor([[math.e - 1, 0.0, math.e**2 - 1, math.e**0.5 - 1, math.e**1.5 - 1, 9.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    # log1p -> 1, 0, 2, 0.5, 1.5 ; min 0, max 2 -> Î = 0.5, 0, 1, 0.25, 0.75 (÷ (2 + eps))
    norm = normalize_importance(scores, mask)
    torch.testing.assert_close(norm, torch.tensor([[0.5, 0.0, 1.0, 0.25, 0.75, 0.0]]), rtol=1e-6, atol=1e-7)
    # quantile at tau=0.5 of {0, .25, .5, .75, 1} is 0.5 -> q = 0.5
    # ω: 0.5 ≥ q -> 1 + 2(0)/0.5 = 1 ; 0 < q -> 0/0.5 = 0 ; 1 -> 1 + 2(.5)/.5 = 3 ;
    #    0.25 -> .25/.5 = 0.5 ; 0.75 -> 1 + 2(.25)/.5 = 2       Σω = 6.5, T = 5 -> scale 5/6.5
    w = bilevel_weights(norm, mask, tau=0.5, beta=2.0)
    expected = torch.tensor([[1.0, 0.0, 3.0, 0.5, 2.0, 0.0]]) * (5 / 6.5)
    torch.testing.assert_close(w, expected, rtol=1e-5, atol=1e-6)
    # With A = -2 the token advantages are -2 ω̃ and sum to A·T = -10.
    adv, w2 = token_advantages(torch.tensor([-2.0]), scores, mask, tau=0.5, beta=2.0)
    torch.testing.assert_close(w2, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(adv.sum(), torch.tensor(-10.0), rtol=1e-5, atol=1e-5)


# ---- properties ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("threshold", ["quantile", "value"])
@pytest.mark.parametrize("floor", [0.0, 0.1])
def test_weight_properties(seed, threshold, floor):
    scores, mask = random_batch(seed, (16, 40))
    norm = normalize_importance(scores, mask)
    w = bilevel_weights(norm, mask, tau=0.4, beta=2.0, threshold=threshold, floor=floor)
    # sums to T per row, zero on padding
    torch.testing.assert_close(w.sum(1), mask.sum(1).float(), rtol=1e-5, atol=1e-4)
    assert torch.all(w[~mask] == 0)
    assert torch.all(w >= 0)
    # monotone in Î within each row
    for i in range(16):
        v, ww = norm[i][mask[i]], w[i][mask[i]]
        order = torch.argsort(v)
        assert torch.all(ww[order].diff() >= -1e-6)


def test_continuity_at_the_cut():
    q = 0.4
    below = torch.tensor([[q - 1e-6, 0.0, 1.0]])
    at = torch.tensor([[q, 0.0, 1.0]])
    mask = torch.ones_like(at, dtype=torch.bool)
    wb = bilevel_weights(below, mask, tau=q, threshold="value")
    wa = bilevel_weights(at, mask, tau=q, threshold="value")
    # ω(q⁻) → 1 = ω(q), and the two rows normalise by (almost) the same sum
    torch.testing.assert_close(wb, wa, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_token_advantages_signs_and_mass(seed):
    scores, mask = random_batch(seed, (12, 30))
    g = torch.Generator().manual_seed(seed)
    adv = torch.randn(12, generator=g)
    adv[3] = 0.0
    tok, w = token_advantages(adv, scores, mask)
    torch.testing.assert_close(tok.sum(1), adv * mask.sum(1), rtol=1e-4, atol=1e-4)
    # never the opposite sign; same sign wherever the weight is positive
    assert torch.all(tok * adv[:, None] >= 0)
    pos = (w > 0) & mask
    assert torch.all(torch.sign(tok[pos]) == torch.sign(adv[:, None].expand_as(tok)[pos]))


def test_uniform_importance_gives_plain_grpo():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    adv = torch.tensor([1.5, -0.5, 2.0])
    for scores in (torch.zeros(3, 4), torch.full((3, 4), 3.7)):
        for threshold in ("quantile", "value"):
            tok, w = token_advantages(adv, scores, mask, threshold=threshold)
            torch.testing.assert_close(w, mask.float())
            torch.testing.assert_close(tok, adv[:, None] * mask.float())


def test_scored_mask_keeps_unscored_tokens_at_one():
    scores = torch.tensor([[0.1, 5.0, 0.0, 2.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    scored = torch.tensor([[1, 1, 1, 0, 0, 0]])  # e.g. the answer span starts at position 3
    tok, w = token_advantages(torch.tensor([1.0]), scores, mask, scored_mask=scored)
    assert w[0, 3] == 1.0 and w[0, 4] == 1.0 and w[0, 5] == 0.0
    torch.testing.assert_close(w[0, :3].sum(), torch.tensor(3.0))
    torch.testing.assert_close(tok.sum(), torch.tensor(5.0))


def test_empty_and_single_token_rows():
    scores = torch.tensor([[1.0, 2.0], [4.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
    tok, w = token_advantages(torch.tensor([1.0, -1.0, 3.0]), scores, mask)
    assert w[1].tolist() == [1.0, 0.0]  # single token: weight 1
    assert w[2].tolist() == [0.0, 0.0] and tok[2].tolist() == [0.0, 0.0]  # nothing to weight
    assert torch.isfinite(tok).all()


def test_rescale_sum_and_zero_rows():
    w = torch.tensor([[0.0, 0.0, 0.0], [1.0, 3.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    out = rescale_sum(w, mask)
    torch.testing.assert_close(out, torch.tensor([[1.0, 1.0, 0.0], [0.75, 2.25, 0.0]]))


def test_bf16_and_float64_inputs_give_float32():
    scores, mask = random_batch(0, (4, 9))
    for dtype in (torch.bfloat16, torch.float64):
        assert normalize_importance(scores.to(dtype), mask).dtype == torch.float32
    assert bilevel_weights(normalize_importance(scores, mask), mask.float()).dtype == torch.float32


# ---- Eq. 6 -----------------------------------------------------------------------------------------
def test_entropy_shaping_matches_reference_and_hand_case():
    g = torch.Generator().manual_seed(0)
    adv = torch.randn(6, generator=g)
    ent = torch.rand(6, 11, generator=g) * 3
    mask = torch.rand(6, 11, generator=g) > 0.3
    got = entropy_shaped_advantages(adv, ent, mask, alpha=0.4, kappa=2.0)
    for i in range(6):
        for j in range(11):
            want = adv[i] + min(0.4 * ent[i, j], abs(adv[i]) / 2.0) if mask[i, j] else 0.0
            assert abs(float(got[i, j]) - float(want)) < 1e-6
    # hand case: A = -1, H = (0.5, 5): bonus = min(0.2, 0.5) = 0.2 and min(2, 0.5) = 0.5
    out = entropy_shaped_advantages(torch.tensor([-1.0]), torch.tensor([[0.5, 5.0]]), torch.ones(1, 2))
    torch.testing.assert_close(out, torch.tensor([[-0.8, -0.5]]))


def test_entropy_shaping_keeps_the_sign_of_every_advantage():
    g = torch.Generator().manual_seed(1)
    adv, ent = torch.randn(64, generator=g), torch.rand(64, 9, generator=g) * 20  # bonuses at their cap
    for kappa in (1.0 + 1e-6, 2.0, 10.0):
        out = entropy_shaped_advantages(adv, ent, torch.ones(64, 9), alpha=5.0, kappa=kappa)
        assert bool((out * adv[:, None] > 0).all())
        capped = 5.0 * ent >= adv.abs()[:, None] / kappa  # the bonus at its cap |A|/κ: the sign's edge
        assert int(capped.sum()) > 500
        want = (adv[:, None] + adv.abs()[:, None] / kappa).expand_as(out)
        torch.testing.assert_close(out[capped], want[capped])


def test_rescale_sum_where_float32_overflows():
    """A denormal row total overflows count / total, a huge row overflows its sum: both rows are rescaled
    in float64 (before: inf and nan, or every weight 0), the other rows exactly as before."""
    tiny, huge = 1e-45, 3e38
    w = torch.tensor([[tiny, 0.0, 0.0, 0.0], [huge, huge, 0.0, huge], [1.0, 2.0, 3.0, 4.0]])
    out = rescale_sum(w, torch.ones(3, 4))
    want = torch.tensor([[4.0, 0.0, 0.0, 0.0], [4 / 3, 4 / 3, 0.0, 4 / 3], [0.4, 0.8, 1.2, 1.6]])
    torch.testing.assert_close(out, want)
    assert torch.equal(out[2], rescale_sum(w[2:], torch.ones(1, 4))[0])


def test_entropy_shaping_detaches_entropy():
    ent = torch.rand(2, 3, requires_grad=True)
    out = entropy_shaped_advantages(torch.tensor([1.0, -1.0]), ent, torch.ones(2, 3))
    assert not out.requires_grad


# ---- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: normalize_importance(torch.tensor([[1.0, float("nan")]]), torch.ones(1, 2)), "finite"),
        (lambda: normalize_importance(torch.tensor([[1.0, float("inf")]]), torch.ones(1, 2)), "finite"),
        (lambda: normalize_importance(torch.ones(2, 3), torch.ones(2, 4)), "shape"),
        (lambda: normalize_importance(torch.ones(2, 3), torch.full((2, 3), 2)), "only 0 and 1"),
        (lambda: normalize_importance(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3)), "floating"),
        (lambda: normalize_importance(torch.ones(3), torch.ones(3)), r"\(B, C\)"),
        (lambda: bilevel_weights(torch.zeros(1, 2), torch.ones(1, 2), tau=1.5), "tau"),
        (lambda: bilevel_weights(torch.zeros(1, 2), torch.ones(1, 2), tau=-0.1), "tau"),
        (lambda: bilevel_weights(torch.zeros(1, 2), torch.ones(1, 2), beta=-1.0), "beta"),
        (lambda: bilevel_weights(torch.zeros(1, 2), torch.ones(1, 2), floor=2.0), "floor"),
        (lambda: bilevel_weights(torch.zeros(1, 2), torch.ones(1, 2), threshold="median"), "threshold"),
        (lambda: token_advantages(torch.ones(3), torch.ones(2, 4), torch.ones(2, 4)), "advantages"),
        (
            lambda: token_advantages(torch.tensor([float("nan")]), torch.ones(1, 4), torch.ones(1, 4)),
            "finite",
        ),
        (lambda: rescale_sum(torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2)), "non-negative"),
        (
            lambda: entropy_shaped_advantages(torch.ones(1), torch.ones(1, 2), torch.ones(1, 2), kappa=0),
            "kappa",
        ),
        (  # below 1 the bonus could outweigh |A| and turn a wrong rollout's tokens positive
            lambda: entropy_shaped_advantages(torch.ones(1), torch.ones(1, 2), torch.ones(1, 2), kappa=0.5),
            r"kappa must be > 1 .*got 0.5",
        ),
        (
            lambda: entropy_shaped_advantages(torch.ones(1), torch.ones(1, 2), torch.ones(1, 2), alpha=-1),
            "alpha",
        ),
    ],
)
def test_bad_input_raises_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_nan_on_padding_is_ignored():
    scores = torch.tensor([[1.0, 2.0, float("nan")]])
    out = normalize_importance(scores, torch.tensor([[1, 1, 0]]))
    assert torch.isfinite(out).all()
