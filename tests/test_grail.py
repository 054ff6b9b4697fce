"""GRAIL (credit="grail"): the weight math and the saliency scorer against slow per-row references, the
rollout selection, the config checks, the analysis method and a two-step OARTrainer run."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from datasets import Dataset

import oar_rl
from conftest import ANSWERS, PROMPTS, make_args, make_trainer, pad_texts
from oar_rl.answer_span import answer_span_mask
from oar_rl.config import OARConfig
from oar_rl.credits import compute_importance
from oar_rl.importance import grail_importance, reasoning_positions
from oar_rl.importance.grail import grail_credit
from oar_rl.reshape import grail_rollout_rows, grail_token_advantages, grail_weights
from oar_rl.tiny import tiny_qwen2

EPS = 1e-8


# ---------------------------------------------------------------------------------------------------
# the weight math against a per-row, per-token reference


def slow_weights(scores, mask, scored, rows=None, mu=1.0, sigma=0.5, w_min=0.5, w_max=5.0):
    """One row and one token at a time in float64, straight from the definition."""
    B, C = scores.shape
    out = torch.zeros(B, C, dtype=torch.float64)
    for b in range(B):
        take = [t for t in range(C) if mask[b, t] and scored[b, t] and (rows is None or rows[b])]
        xs = [math.log(float(scores[b, t]) + EPS) for t in take]
        if xs:
            m = sum(xs) / len(xs)
            sd = math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs) + EPS)
        for t in range(C):
            if not mask[b, t]:
                continue
            if t in take:
                z = (math.log(float(scores[b, t]) + EPS) - m) / sd
                out[b, t] = min(max(mu + sigma * z, w_min), w_max)
            else:
                out[b, t] = 1.0
    return out


def random_case(seed: int, B: int = 7, C: int = 11):
    g = torch.Generator().manual_seed(seed)
    scores = torch.exp(3 * torch.randn(B, C, generator=g))  # several orders of magnitude
    lengths = torch.randint(0, C + 1, (B,), generator=g)
    mask = torch.arange(C)[None] < lengths[:, None]
    scored = mask & (torch.rand(B, C, generator=g) < 0.7)
    scored[0] = False  # a row without a span
    scored[1, :] = False
    scored[1, 0] = mask[1, 0]  # a single scored token
    return scores, mask, scored


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"mu": 1.5, "sigma": 2.0, "w_min": 0.1, "w_max": 2.0},
        {"sigma": 0.0},
        {"w_min": 1.0, "w_max": 1.0},
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grail_weights_match_slow_reference(options, seed):
    scores, mask, scored = random_case(seed)
    rows = torch.tensor([True, True, False, True, True, False, True])
    for r in (None, rows):
        got = grail_weights(scores, mask, scored, rows=r, **options)
        assert got.dtype == torch.float32
        torch.testing.assert_close(
            got.double(), slow_weights(scores, mask, scored, r, **options), rtol=1e-5, atol=1e-6
        )


def test_grail_weights_by_hand():
    # log-scores 0 and 2 (up to the 1e-8): z = -1, +1 -> 1 -/+ 0.5; padding 0; an unscored token 1
    s = torch.tensor([[1.0, math.exp(2.0), 7.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    scored = torch.tensor([[1, 1, 0, 0]])
    torch.testing.assert_close(grail_weights(s, mask, scored), torch.tensor([[0.5, 1.5, 1.0, 0.0]]))
    # σ_w = 3: 1 - 3 = -2 is clamped to w_min, 1 + 3 = 4 stays; no renormalisation (sum 5.5 != 3)
    w = grail_weights(s, mask, scored, sigma=3.0)
    torch.testing.assert_close(w, torch.tensor([[0.5, 4.0, 1.0, 0.0]]))
    # a single scored token, or equal scores: z = 0, w = μ_w
    torch.testing.assert_close(
        grail_weights(torch.tensor([[3.0, 3.0, 5.0]]), torch.ones(1, 3), torch.tensor([[1, 1, 0]]), mu=2.0),
        torch.tensor([[2.0, 2.0, 1.0]]),
    )
    # the z-score is scale-free: multiplying a row's saliencies by 1000 leaves its weights unchanged
    s2 = torch.tensor([[0.01, 0.3, 0.02, 0.5]])
    torch.testing.assert_close(
        grail_weights(s2, torch.ones(1, 4), torch.ones(1, 4)),
        grail_weights(s2 * 1000, torch.ones(1, 4), torch.ones(1, 4)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_rollout_selection_and_token_advantages():
    adv = torch.tensor([-1.0, 0.5, 0.0, -0.2])
    assert grail_rollout_rows(adv, "wrong").tolist() == [True, False, False, True]
    assert grail_rollout_rows(adv, "correct").tolist() == [False, True, False, False]
    assert grail_rollout_rows(adv, "all").tolist() == [True, True, True, True]
    scores, mask, scored = random_case(5, B=4, C=6)
    scored[:, :3] = mask[:, :3]  # every row with something to reweight
    for rollouts in ("wrong", "correct", "all"):
        sel = grail_rollout_rows(adv, rollouts)
        token_adv, w = grail_token_advantages(adv, scores, mask, scored, rollouts=rollouts)
        ref = slow_weights(scores, mask, scored, rows=sel)
        torch.testing.assert_close(w.double(), ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(token_adv.double(), adv.double()[:, None] * ref, rtol=1e-5, atol=1e-6)
        # rows outside the selection are plain GRPO
        assert torch.equal(w[~sel], mask[~sel].float())
    assert (grail_token_advantages(adv, scores, mask, scored)[0][2] == 0).all()  # A_i = 0: nothing


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rollouts": "both"}, r"rollouts='both' is not valid; choose one of wrong, correct, all"),
        ({"sigma": -0.1}, r"sigma must be >= 0"),
        ({"w_min": 2.0, "w_max": 1.0}, r"w_max must be >= w_min, got w_max=1.0 < w_min=2.0"),
        ({"w_min": -0.5}, r"w_min must be >= 0"),
        ({"mu": math.nan}, r"mu must be a finite number, got nan"),
        ({"w_max": math.inf}, r"w_max must be a finite number, got inf"),
    ],
)
def test_bad_options(kwargs, match):
    scores, mask, scored = random_case(0)
    adv = torch.randn(scores.shape[0])
    with pytest.raises(ValueError, match=match):
        grail_token_advantages(adv, scores, mask, scored, **kwargs)


def test_bad_inputs():
    scores, mask, scored = random_case(0)
    bad = scores.clone()
    b, t = scored.nonzero()[0].tolist()
    bad[b, t] = -1.0
    with pytest.raises(ValueError, match="scores must be >= 0"):
        grail_weights(bad, mask, scored)
    bad[b, t] = math.nan
    with pytest.raises(ValueError, match="scores must be finite on valid tokens"):
        grail_weights(bad, mask, scored)
    bad = scores.clone()
    bad[~scored] = math.nan  # unscored positions are never read
    torch.testing.assert_close(grail_weights(bad, mask, scored), grail_weights(scores, mask, scored))
    with pytest.raises(ValueError, match=r"rows must be a bool tensor of shape \(7,\)"):
        grail_weights(scores, mask, scored, rows=torch.ones(7))
    with pytest.raises(ValueError, match=r"advantages must be a \(B,\) tensor with B=7"):
        grail_token_advantages(torch.ones(3), scores, mask, scored)
    with pytest.raises(ValueError, match="advantages must be finite"):
        grail_token_advantages(torch.full((7,), math.nan), scores, mask, scored)


# ---------------------------------------------------------------------------------------------------
# the saliency scorer against an autograd reference, one unpadded sequence at a time


@pytest.fixture(scope="module")
def batch(tokenizer):
    """Left-padded prompts of different lengths, right-padded completions: spans (one with a token after
    it), a span at the very first token (nothing before it), rows without a span, an empty row."""
    prompts = ["12+7=", "a?", "what is 3*4?", "hi", "q", "5-1="]
    completions = [
        "so \\boxed{19}",
        "x",  # no span
        "3*4=12 \\boxed{12}!",
        "",  # no valid token
        "no tags",  # no span
        "\\boxed{4} done",
    ]
    p_ids, p_mask = pad_texts(tokenizer, prompts, "left")
    c_ids, c_mask = pad_texts(tokenizer, completions, "right")
    ans = answer_span_mask(c_ids, c_mask, tokenizer, pattern="boxed")
    # the last row: make the span start at the first completion token
    ans[5] = False
    ans[5, 0] = True
    return p_ids, p_mask, c_ids, c_mask, ans


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_qwen2(len(tokenizer), seed=1, hidden_size=32)


def slow_saliency(model, p_ids, p_mask, c_ids, c_mask, ans, temperature=1.0):
    """s_t = ||dJ/de_t * e_t|| for each reasoning token, from the full logits of one unpadded sequence."""
    out = torch.zeros(c_ids.shape, dtype=torch.float64)
    embed = model.get_input_embeddings()
    for b in range(c_ids.shape[0]):
        span = ans[b].nonzero().flatten()
        if span.numel() == 0:
            continue
        p = p_ids[b][p_mask[b].bool()]
        n = int(c_mask[b].sum())
        ids = torch.cat([p, c_ids[b, :n]])
        e = embed(ids).detach().requires_grad_(True)  # (L, H)
        logits = model(inputs_embeds=e[None]).logits[0] / temperature  # (L, V)
        lp = torch.log_softmax(logits[len(p) + span - 1], dim=-1)  # positions predicting the span
        nll = -lp[torch.arange(span.numel()), c_ids[b, span]].sum()
        (g,) = torch.autograd.grad(nll, e)
        s = (g * e).norm(dim=-1)[len(p) :]  # (n,)
        for t in range(int(span.min())):
            out[b, t] = float(s[t].detach())
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_saliency_matches_autograd_reference(temperature, model, batch):
    p_ids, p_mask, c_ids, c_mask, ans = batch
    got = grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans, temperature=temperature)
    ref = slow_saliency(model, p_ids, p_mask, c_ids, c_mask, ans, temperature)
    torch.testing.assert_close(got.double(), ref, rtol=2e-4, atol=1e-7)
    reasoning = reasoning_positions(c_mask, ans)
    assert (got[reasoning] > 0).all() and (got[~reasoning] == 0).all()
    # rows without a span, the empty row and the span-first row: nothing scored
    assert not reasoning[[1, 3, 4, 5]].any() and reasoning[[0, 2]].any()
    # span and later tokens of row 2 are not reasoning tokens
    first = int(ans[2].nonzero().min())
    assert not reasoning[2, first:].any() and reasoning[2, :first].all()


def test_temperature_changes_saliency(model, batch):
    p_ids, p_mask, c_ids, c_mask, ans = batch
    a = grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans)
    b = grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans, temperature=0.5)
    assert not torch.allclose(a, b)


def test_scorer_leaves_model_as_found_and_chunks(tokenizer, batch):
    p_ids, p_mask, c_ids, c_mask, ans = batch
    model = tiny_qwen2(len(tokenizer), seed=4)
    model.train()
    model.model.norm.eval()
    modes = {n: m.training for n, m in model.named_modules()}
    model.lm_head.weight.requires_grad_(False)  # mixed requires_grad must survive
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    ref = grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans)
    assert all(p.grad is None for p in model.parameters())
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    torch.testing.assert_close(
        grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans, batch_size=1), ref
    )
    with torch.no_grad():  # the trainer may call it from a no_grad region
        torch.testing.assert_close(
            grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans), ref
        )
    with torch.inference_mode(), pytest.raises(RuntimeError, match=r"outside torch\.inference_mode"):
        grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans)
    with pytest.raises(ValueError, match="GRAIL needs an answer_mask"):
        grail_importance(model, p_ids, p_mask, c_ids, c_mask)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="temperature must be"):
            grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans, temperature=bad)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans, batch_size=0)
    no_span = torch.zeros_like(ans)
    assert (grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=no_span) == 0).all()


def test_scorer_with_checkpointing_and_frozen_params(tokenizer, batch):
    """Gradient checkpointing on and every parameter frozen (PEFT-like): same scores, no grads."""
    p_ids, p_mask, c_ids, c_mask, ans = batch
    model = tiny_qwen2(len(tokenizer), seed=6)
    ref = grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans)
    model.gradient_checkpointing_enable()
    model.train()
    for p in model.parameters():
        p.requires_grad_(False)
    torch.testing.assert_close(grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans), ref)
    assert model.training and all(not p.requires_grad and p.grad is None for p in model.parameters())


def test_grail_credit_scores_only_selected_rows(monkeypatch, model, batch):
    import oar_rl.importance.grail as grail_module  # grail_credit scores through this module's name

    p_ids, p_mask, c_ids, c_mask, ans = batch
    adv = torch.tensor([-1.0, -1.0, 0.5, -0.3, 0.0, -2.0])
    calls: list[int] = []
    real = grail_module.grail_scores

    def spy(*args, **kwargs):
        calls.append(args[1].input_ids.shape[0])  # rows actually scored (args[1]: the ScoringBatch)
        return real(*args, **kwargs)

    monkeypatch.setattr(grail_module, "grail_scores", spy)
    scores = grail_importance(model, p_ids, p_mask, c_ids, c_mask, answer_mask=ans)
    reasoning = reasoning_positions(c_mask, ans)
    for rollouts, n_scored in (("wrong", 1), ("correct", 1), ("all", 2)):
        calls.clear()
        token_adv, w = grail_credit(
            model, p_ids, p_mask, c_ids, c_mask, adv, answer_mask=ans, rollouts=rollouts
        )
        assert calls == [n_scored]  # rows 0 (A < 0) and 2 (A > 0) are the only ones with reasoning tokens
        ref_adv, ref_w = grail_token_advantages(adv, scores, c_mask, reasoning, rollouts=rollouts)
        torch.testing.assert_close(w, ref_w)
        torch.testing.assert_close(token_adv, ref_adv)
    # rows without a span, and the span and later tokens, keep weight 1
    assert torch.equal(w[[1, 3, 4, 5]], c_mask[[1, 3, 4, 5]].float())
    first = int(ans[2].nonzero().min())
    assert (w[2, first:][c_mask[2, first:].bool()] == 1).all() and not (w[2, :first] == 1).all()
    # compute_importance dispatches "grail" and slices the answer mask with `rows`
    rows = torch.tensor([True, False, True, False, False, False])
    part = compute_importance("grail", model, p_ids, p_mask, c_ids, c_mask, rows=rows, answer_mask=ans)
    torch.testing.assert_close(part, scores * rows[:, None])


def test_exports():
    for name in ("grail_importance", "grail_credit", "grail_weights", "grail_token_advantages"):
        assert name in oar_rl.__all__ and callable(getattr(oar_rl, name))


# ---------------------------------------------------------------------------------------------------
# config and trainer


def test_config_defaults_and_bad_values(tmp_path):
    common = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])
    args = OARConfig(credit="grail", **common)
    assert (args.grail_mu, args.grail_sigma, args.grail_min, args.grail_max) == (1.0, 0.5, 0.5, 5.0)
    assert args.grail_rollouts == "wrong"
    for name in ("grail_mu", "grail_sigma", "grail_min", "grail_max", "grail_rollouts"):
        assert OARConfig.__dataclass_fields__[name].metadata["help"]
    bad = [
        (
            {"grail_rollouts": "both"},
            r"grail_rollouts='both' is not valid; choose one of wrong, correct, all",
        ),
        ({"grail_sigma": -1.0}, r"grail_sigma must be >= 0"),
        ({"grail_min": 2.0, "grail_max": 1.0}, r"grail_max must be >= grail_min"),
        ({"grail_mu": math.nan}, r"grail_mu must be a finite number, got nan"),
    ]
    for overrides, match in bad:
        with pytest.raises(ValueError, match=match):
            OARConfig(credit="grail", **common, **overrides)


def _capture(trainer) -> list[dict]:
    """Per generation batch: TRL's sequence advantages, what the seam returned, and the policy that generated
    it (a copy taken before the step)."""
    records: list[dict] = []
    assign, generate = trainer._assign_credit, trainer._generate_and_score_completions

    def assign_spy(output, mask):
        records[-1]["seq_adv"] = output["advantages"].clone()
        return assign(output, mask)

    def generate_spy(inputs):
        records.append({"policy": copy.deepcopy(trainer.model).eval()})
        out = generate(inputs)
        records[-1]["out"] = {k: v.clone() for k, v in out.items() if isinstance(v, torch.Tensor)}
        return out

    trainer._assign_credit = assign_spy
    trainer._generate_and_score_completions = generate_spy
    return records


@pytest.mark.parametrize("rollouts", ["wrong", "all"])
def test_two_grail_steps(tmp_path, tokenizer, rollouts):
    pattern = "([a-z])"  # the random policy writes no answer format: the last lowercase letter is the span
    args = make_args(
        tmp_path,
        credit="grail",
        answer_pattern=pattern,
        grail_rollouts=rollouts,
        gradient_checkpointing=True,  # GRPOConfig's default, which this test always ran with
    )
    dataset = Dataset.from_dict({"prompt": PROMPTS[:4], "answer": ANSWERS[:4]})
    trainer = make_trainer(args, tokenizer, dataset)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    records = _capture(trainer)
    trainer.train()

    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(v, after[k]) for k, v in before.items())
    keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
    reweighted = 0
    for rec in records:
        out, seq_adv = rec["out"], rec["seq_adv"]
        mask = out["completion_mask"]
        ans = answer_span_mask(out["completion_ids"], mask, tokenizer, pattern=pattern)
        # the batch's credit equals a direct recomputation with the policy that generated it
        expected, w = grail_credit(
            rec["policy"], *(out[k] for k in keys), seq_adv, answer_mask=ans, rollouts=rollouts, batch_size=4
        )
        torch.testing.assert_close(out["advantages"], expected, rtol=1e-5, atol=1e-6)
        selected = grail_rollout_rows(seq_adv, rollouts) & reasoning_positions(mask, ans).any(1)
        assert torch.equal(out["advantages"][~selected], (seq_adv[:, None] * mask)[~selected])
        changed = ~torch.isclose(w, mask.float()).all(1)
        assert torch.equal(changed, selected & (reasoning_positions(mask, ans).sum(1) > 1))
        reweighted += int(changed.sum())
        assert ((w[selected] >= 0.5 - 1e-6) | (mask[selected] == 0)).all() and (w <= 5.0 + 1e-6).all()
    assert reweighted > 0  # the test exercised the reweighting
    logged = [h for h in trainer.state.log_history if "oar/ess_ratio" in h]
    assert len(logged) == 2 and all(0.0 < h["oar/ess_ratio"] <= 1.0 + 1e-6 for h in logged)


def test_attribute_method(tokenizer, model, batch):
    from oar_rl.analysis.attribute import METHODS, Trajectory, method_scores

    assert "grail" in METHODS
    p_ids, p_mask, c_ids, c_mask, _ = batch
    trajs = [Trajectory("", "", "", p_ids[b][p_mask[b].bool()], c_ids[b][c_mask[b].bool()]) for b in (0, 2)]
    scores, reasoning = method_scores(model, tokenizer, trajs, ["grail"], answer_pattern="boxed")
    s = scores["grail"]
    assert s.shape == reasoning.shape and (s[~reasoning] == 0).all() and (s[reasoning] > 0).any()
