"""The credit-rule registry (oar_rl.credits.register_credit, check_scores) and the rules of issue 33
(position, oar-p-span, entropy-80-20) against slow per-row references."""

from __future__ import annotations

import types

import pytest
import torch

from conftest import pad_texts
from float64 import float64_copy
from oar_rl import credits
from oar_rl.answer_span import answer_span_mask, scored_positions
from oar_rl.credits import compute_importance, register_credit
from oar_rl.importance import perturbation_importance
from oar_rl.importance.baselines import entropy_scores, position_scores, reasoning_entropy_scores
from oar_rl.importance.span import (
    fixed_length_steps,
    reasoning_steps,
    span_perturbation_scores,
    step_boundaries,
)
from oar_rl.probes import PROBES, prepare_batch
from oar_rl.reshape import top_quantile_mask
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2
from test_importance import _full_logits, _ref_div, _ref_probe


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def batch(tokenizer):
    """Left-padded prompts, right-padded completions with sentences, lines, a decimal, answer spans."""
    prompts = ["12+7=", "a?", "what is 3*4?", "q"]
    completions = [
        "add. so 12+7=19. \\boxed{19}",  # two sentences, then the span
        "x",  # single token, no span
        "3.5 is not it\n3*4=12 ok! \\boxed{12}",  # a decimal (no split), a line, an exclamation
        "no tags. none",  # no span
    ]
    p_ids, p_mask = pad_texts(tokenizer, prompts, "left")
    c_ids, c_mask = pad_texts(tokenizer, completions, "right")
    ans = answer_span_mask(c_ids, c_mask, tokenizer, pattern="boxed")
    return p_ids, p_mask, c_ids, c_mask, ans, completions


@pytest.fixture(scope="module")
def model64(tokenizer):
    return float64_copy(tiny_qwen2(len(tokenizer), seed=1, hidden_size=32))


@pytest.fixture
def rule(rule):
    """conftest's `rule` (registered for one test, removed after it) with reshape 'bilevel' by default."""

    def make(name, scorer, **kw):
        kw.setdefault("reshape", "bilevel")
        return rule(name, scorer, **kw)

    return make


# ---------------------------------------------------------------------------------------------------
# the registry and the checks on every call


def test_registration_is_public_and_refreshes_the_names(rule):
    import oar_rl

    assert oar_rl.register_credit is register_credit
    for name in ("position", "oar-p-span", "entropy-80-20"):
        assert name in credits.CREDITS and name in credits.SCORED_CREDITS
    assert credits.CREDIT_MODES["entropy-80-20"].config == {"top_entropy_quantile": 0.2}
    assert not credits.CREDIT_MODES["position"].needs_model and credits.CREDIT_MODES["oar-p-span"].probe
    rule("t-one", lambda m, b, **kw: b.completion_mask.float())
    assert credits.CREDITS[-1] == "t-one" and "t-one" in credits.SCORED_CREDITS
    assert "t-one" not in credits.MODEL_CREDITS


@pytest.mark.parametrize(
    "name, kw, match",
    [
        ("a/b", {"reshape": "bilevel"}, "name 'a/b' is not valid"),
        ("grpo", {"reshape": "bilevel"}, "name 'grpo' is not valid"),
        ("t-x", {"reshape": "sideways"}, "reshape='sideways' is not valid"),
        ("oar-g", {"reshape": "bilevel"}, "name 'oar-g' is a built-in rule's"),
    ],
)
def test_registration_rejects_bad_fields(name, kw, match):
    with pytest.raises(ValueError, match=match):
        register_credit(name, lambda m, b, **k: None, **kw)
    with pytest.raises(ValueError, match="needs a scorer"):
        register_credit("t-noscorer", None, reshape="bilevel")


@pytest.mark.parametrize(
    "scores, reshape, match",
    [
        (
            lambda m: m.float()[:, :-1],
            "bilevel",
            r"scores have shape \(4, \d+\), expected \(B, C\) = \(4, \d+\)",
        ),
        (lambda m: m.long(), "bilevel", "dtype torch.int64, expected a floating-point"),
        (
            lambda m: torch.where(m, float("nan"), 0.0),
            "bilevel",
            "must be finite on the scored tokens; found nan",
        ),
        (
            lambda m: torch.where(m, float("inf"), 0.0),
            "weights",
            "must be finite on the scored tokens; found inf",
        ),
        (lambda m: -m.float(), "bilevel", "reshape='bilevel' needs non-negative scores .* found -1.0"),
        (lambda m: -m.float(), "weights", "reshape='weights' needs non-negative scores"),
        (lambda m: [1.0], "uniform", "returned list, expected a \\(B, C\\) float torch.Tensor"),
    ],
)
def test_bad_scores_name_the_rule_and_the_field(rule, tokenizer, batch, scores, reshape, match):
    p_ids, p_mask, c_ids, c_mask, _, _ = batch
    rule("t-bad", lambda m, b, **kw: scores(b.completion_mask), reshape=reshape)
    model = tiny_qwen2(len(tokenizer), seed=0, hidden_size=32)
    with pytest.raises(ValueError, match="credit rule 't-bad'.*" + match):
        compute_importance("t-bad", model, p_ids, p_mask, c_ids, c_mask)


def test_negative_scores_pass_where_the_reshaping_allows_them_and_padding_is_zeroed(rule, tokenizer, batch):
    p_ids, p_mask, c_ids, c_mask, _, _ = batch
    rule("t-neg", lambda m, b, **kw: torch.full(b.completion_mask.shape, -2.0), reshape="grail")
    model = tiny_qwen2(len(tokenizer), seed=0, hidden_size=32)
    got = compute_importance("t-neg", model, p_ids, p_mask, c_ids, c_mask)
    assert (got[c_mask.bool()] == -2.0).all() and (got[~c_mask.bool()] == 0).all()
    # a model-free rule gets model=None, whatever the caller holds
    seen = []
    rule("t-free", lambda m, b, **kw: seen.append(m) or b.completion_mask.float())
    compute_importance("t-free", model, p_ids, p_mask, c_ids, c_mask)
    assert seen == [None]


# ---------------------------------------------------------------------------------------------------
# position


def test_position_scores_match_a_per_row_reference(model64, batch):
    p_ids, p_mask, c_ids, c_mask, ans, _ = batch
    for reasoning in (None, scored_positions(c_mask, ans)):
        b = prepare_batch(None, p_ids, p_mask, c_ids, c_mask, None, reasoning)
        got = position_scores(None, b)
        ref = torch.zeros(c_ids.shape)
        for i in range(c_ids.shape[0]):
            for t in range(c_ids.shape[1]):
                keep = bool(c_mask[i, t]) and (reasoning is None or bool(reasoning[i, t]))
                ref[i, t] = t + 1 if keep else 0.0
        assert torch.equal(got, ref)
    # compute_importance scores it without running the model (model=None reaches the scorer)
    got = compute_importance("position", model64, p_ids, p_mask, c_ids, c_mask, reasoning_mask=reasoning)
    assert torch.equal(got, ref)


# ---------------------------------------------------------------------------------------------------
# oar-p-span: steps, and the scores against one plain forward per masked step


def _slow_steps(tokenizer, ids_row, scored_row):
    """Step of each scored token: decode token by token, count the boundaries before its first char."""
    text, starts = "", []
    for k in range(len(ids_row)):
        starts.append(len(text))
        text = tokenizer.decode(ids_row[: k + 1])
    bounds = [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    bounds += [i + 1 for i, ch in enumerate(text[:-1]) if ch in ".!?" and text[i + 1].isspace()]
    return [sum(b <= starts[k] for b in bounds) if scored_row[k] else -1 for k in range(len(ids_row))]


def test_steps_split_sentences_and_lines_not_decimals(tokenizer, batch):
    _, _, c_ids, c_mask, ans, _ = batch
    assert step_boundaries("a. b\nc 3.5 d! e? f.") == [2, 5, 13, 16]
    scored = scored_positions(c_mask, ans)
    got = reasoning_steps(tokenizer, c_ids, scored)
    for i in range(c_ids.shape[0]):
        n = int(c_mask[i].sum())
        ref = _slow_steps(tokenizer, c_ids[i, :n].tolist(), scored[i, :n].tolist())
        assert got[i, :n].tolist() == ref and (got[i, n:] == -1).all()
    # row 2: "3.5 is not it\n" | "3*4=12 ok!" | " " (then the span): the decimal does not split
    row = got[2][scored[2]].tolist()
    assert row[:14] == [0] * 14 and row[14:24] == [1] * 10 and set(row[24:]) == {2}
    assert fixed_length_steps(scored, 4)[0, :9].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2]


def serial_span_oar_p(model, p_ids, p_mask, c_ids, c_mask, probe, ans, steps, mask_id):
    """One plain model(...) forward per (row, step), each row alone and unpadded, the step's tokens masked."""
    out = torch.zeros(c_ids.shape, dtype=torch.float64)
    for b in range(p_ids.shape[0]):
        pb, cb = p_ids[b][p_mask[b].bool()], c_ids[b][c_mask[b].bool()]
        ids = torch.cat([pb, cb])
        attn = torch.ones_like(ids)
        P, ans_b = pb.shape[0], ans[b][c_mask[b].bool()]
        clean = _ref_probe(_full_logits(model, ids, attn), attn, P, cb, ans_b, probe)
        for s in sorted(set(steps[b].tolist()) - {-1}):
            cols = (steps[b] == s).nonzero().flatten()
            pert = ids.clone()
            pert[P + cols] = mask_id
            out[b, cols] = _ref_div(
                clean, _ref_probe(_full_logits(model, pert, attn), attn, P, cb, ans_b, probe)
            )
    return out


@pytest.mark.parametrize("probe", PROBES)
def test_span_scores_match_the_serial_reference(probe, tokenizer, model64, batch):
    p_ids, p_mask, c_ids, c_mask, ans, _ = batch
    b = prepare_batch(model64, p_ids, p_mask, c_ids, c_mask, None if probe == "lt-logits" else ans)
    steps = reasoning_steps(tokenizer, c_ids, b.scored(probe).cpu())
    ref = serial_span_oar_p(model64, p_ids, p_mask, c_ids, c_mask, probe, ans, steps, mask_id=0)
    assert (ref != 0).sum() > 4
    for reuse in (True, False):
        for bs in (1, 3, 64):
            got = span_perturbation_scores(
                model64,
                b,
                probe=probe,
                tokenizer=tokenizer,
                mask_token_id=0,
                batch_size=bs,
                prefix_reuse=reuse,
            )
            torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-9)
    # one token per step is exact OAR-P
    one = torch.where(b.scored(probe), torch.arange(c_ids.shape[1]).expand_as(c_ids), -1)
    got = span_perturbation_scores(model64, b, probe=probe, steps=one, mask_token_id=0)
    exact = perturbation_importance(
        model64, p_ids, p_mask, c_ids, c_mask, probe=probe, answer_mask=ans, mask_token_id=0
    )
    torch.testing.assert_close(got, exact, rtol=1e-5, atol=1e-9)


def test_span_scores_need_steps_or_a_tokenizer(model64, batch):
    p_ids, p_mask, c_ids, c_mask, _, _ = batch
    b = prepare_batch(model64, p_ids, p_mask, c_ids, c_mask)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        span_perturbation_scores(model64, b, mask_token_id=0)
    with pytest.raises(ValueError, match=r"steps must be a \(B, C\)"):
        span_perturbation_scores(model64, b, steps=torch.zeros(2, 2), mask_token_id=0)


# ---------------------------------------------------------------------------------------------------
# entropy-80-20: TRL's mask, and the entropy the analyses read


def test_top_quantile_mask_is_trls_entropy_mask():
    from trl import GRPOTrainer

    g = torch.Generator().manual_seed(0)
    values = torch.rand(6, 9, generator=g)
    mask = torch.rand(6, 9, generator=g) > 0.3
    one_process = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(pad_across_processes=lambda x, **k: x, gather=lambda x: x)
    )
    for fraction in (0.2, 0.5, 1.0):
        ref = GRPOTrainer.get_high_entropy_mask(one_process, values, mask, 1 - fraction)
        assert torch.equal(top_quantile_mask(values, mask, fraction), ref)
    assert top_quantile_mask(values, mask, 0.2).sum() == pytest.approx(0.2 * mask.sum(), abs=1.0)


def test_entropy_80_20_scores_are_the_reasoning_entropy(model64, batch):
    p_ids, p_mask, c_ids, c_mask, ans, _ = batch
    reasoning = scored_positions(c_mask, ans)
    b = prepare_batch(model64, p_ids, p_mask, c_ids, c_mask, None, reasoning)
    full = entropy_scores(model64, prepare_batch(model64, p_ids, p_mask, c_ids, c_mask))
    got = reasoning_entropy_scores(model64, b)
    assert torch.equal(got, full * reasoning) and (got[reasoning] > 0).all()
    via = compute_importance("entropy-80-20", model64, p_ids, p_mask, c_ids, c_mask, reasoning_mask=reasoning)
    assert torch.equal(via, got)
