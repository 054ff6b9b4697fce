"""Credit rules in training: the issue-33 rules two steps through `OARTrainer`, rules registered in the
test (weights, GRAIL, noisy, model-reading), the checks on their scores, a user's probe rule in the recall
and standalone=False rules (loading rules from the user's own file is in test_credit_modules.py)."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import make_args, make_trainer
from oar_rl import credits
from oar_rl.credits import register_credit
from oar_rl.reshape import token_advantages
from oar_rl.tiny import tiny_qwen2
from test_credit_rules import serial_span_oar_p
from test_trainer import capture, params


def _moved(trainer, before) -> None:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    after = params(trainer.model)
    assert all(not torch.equal(v, after[k]) for k, v in before.items()), "a parameter did not change"


KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")


@pytest.mark.parametrize("credit", ["position", "oar-p-span"])
def test_two_steps_reshape_like_the_reference(tmp_path, tokenizer, dataset, credit):
    """position and oar-p-span train two steps; each batch's token advantages are Eq. 14-17 of a slow
    per-row reference of the scores (the reasoning tokens are every token here: no answer format)."""
    from oar_rl.importance.span import reasoning_steps

    trainer = make_trainer(make_args(tmp_path, credit=credit, probe="lt-logits"), tokenizer, dataset)
    before, records = params(trainer.model), capture(trainer)
    trainer.train()
    _moved(trainer, before)
    checked = 0
    for rec in records:
        out, seq_adv = rec["out"], rec["seq_adv"]
        p_ids, p_mask, c_ids, c_mask = (out[k] for k in KEYS)
        rows = (seq_adv != 0) & c_mask.bool().any(1)
        if credit == "position":  # the token's 1-based index
            ref = torch.arange(1, c_ids.shape[1] + 1).float().expand_as(c_ids) * c_mask
        else:
            steps = reasoning_steps(tokenizer, c_ids, c_mask.bool())
            pad = trainer.model.config.pad_token_id
            # a plain model with the old policy's weights (a deep copy's forward can be accelerate's
            # wrapper of the live model)
            policy = tiny_qwen2(len(tokenizer), seed=0)
            policy.load_state_dict(rec["policy"].state_dict())
            ref = serial_span_oar_p(
                policy.eval(), p_ids, p_mask, c_ids, c_mask, "lt-logits", c_mask.bool(), steps, mask_id=pad
            ).float()
        expected = torch.zeros_like(out["advantages"])
        expected[rows], _ = token_advantages(seq_adv[rows], ref[rows], c_mask[rows])
        torch.testing.assert_close(out["advantages"], expected, rtol=1e-4, atol=1e-5)
        active = rows & (c_mask.sum(1) > 1)
        if active.any():  # the credit is really redistributed
            checked += 1
            assert not torch.allclose(out["advantages"][active], (seq_adv[:, None] * c_mask)[active])
    assert checked


def test_entropy_80_20_is_trls_top_entropy_quantile(tmp_path, tokenizer, dataset, monkeypatch):
    """GRPO's (B,) advantages untouched; TRL's own entropy mask at 0.2 does the work."""
    from trl import GRPOTrainer

    calls = []
    real = GRPOTrainer.get_high_entropy_mask

    def spy(self, entropies, mask, threshold):
        calls.append(threshold)
        return real(self, entropies, mask, threshold)

    monkeypatch.setattr(GRPOTrainer, "get_high_entropy_mask", spy)
    args = make_args(tmp_path, credit="entropy-80-20")
    assert args.top_entropy_quantile == 0.2
    trainer = make_trainer(args, tokenizer, dataset)
    before, records = params(trainer.model), capture(trainer)
    trainer.train()
    _moved(trainer, before)
    for rec in records:
        assert torch.equal(rec["out"]["advantages"], rec["seq_adv"])  # exactly TRL's (B,) tensor
    assert calls and all(t == pytest.approx(0.8) for t in calls)
    with pytest.raises(ValueError, match=r"credit=.entropy-80-20. sets top_entropy_quantile=0\.2, but "):
        make_args(tmp_path, credit="entropy-80-20", top_entropy_quantile=0.5)


def test_a_weights_rule_needs_no_trainer_edit(tmp_path, tokenizer, dataset, rule):
    """reshape='weights': the scores are the weights, A_t = A_i · w_t, on a rule registered in the test."""

    def halves(model, batch, **kw):
        assert model is None and {"settings", "batch_size", "temperature", "tokenizer"} <= set(kw)
        t = torch.arange(batch.completion_mask.shape[1], device=batch.completion_mask.device)
        return torch.where(t % 2 == 0, 2.0, 0.5).expand(batch.completion_mask.shape).float()

    rule("t-halves", halves, reshape="weights")
    trainer = make_trainer(make_args(tmp_path, credit="t-halves"), tokenizer, dataset)
    before, records = params(trainer.model), capture(trainer)
    trainer.train()
    _moved(trainer, before)
    for rec in records:
        out, seq_adv = rec["out"], rec["seq_adv"]
        mask = out["completion_mask"].bool()
        w = torch.where(torch.arange(mask.shape[1]) % 2 == 0, 2.0, 0.5) * mask
        torch.testing.assert_close(out["advantages"], seq_adv[:, None] * w)


def test_bad_scores_stop_training_naming_the_rule(tmp_path, tokenizer, dataset, rule):
    rule("t-nan", lambda m, b, **kw: torch.full(b.completion_mask.shape, float("nan")), reshape="bilevel")
    trainer = make_trainer(make_args(tmp_path, credit="t-nan"), tokenizer, dataset)
    with pytest.raises(
        ValueError, match=r"credit rule .t-nan.*must be finite on the scored tokens; found nan"
    ):
        trainer.train()


def test_a_scorer_that_keeps_its_graph_gets_no_gradient_through_the_advantages(
    tmp_path, tokenizer, dataset, rule
):
    """A rule that runs the policy without no_grad: its scores are detached before they become advantages
    (before, the graph reached TRL's loss: a wrong gradient, and with two micro-batches per generation
    batch a second backward through a freed graph)."""
    from oar_rl.model_parts import body_hidden

    def hidden_norm(model, batch, **kw):
        h = body_hidden(model, batch.attention_mask, input_ids=batch.input_ids)[:, batch.prompt_len :]
        out = h.norm(dim=-1).float()
        assert out.requires_grad  # the premise: the scorer hands back a graph
        return out

    rule("t-hnorm", hidden_norm, reshape="weights", needs_model=True)
    args = make_args(tmp_path, credit="t-hnorm", steps_per_generation=2, gradient_accumulation_steps=2)
    trainer = make_trainer(args, tokenizer, dataset)
    records = capture(trainer)
    trainer.train()  # raised "Trying to backward through the graph a second time" before
    assert records and all(not r["out"]["advantages"].requires_grad for r in records)


def _batch(mask):
    from types import SimpleNamespace

    return SimpleNamespace(completion_mask=torch.as_tensor(mask, dtype=torch.bool))


def test_check_scores_rounding_signs_and_unread_tokens(rule):
    valid = [[True, True, True, False]]
    scored = torch.tensor([[True, True, False, False]])
    uniform = rule("t-u", lambda m, b, **kw: None, reshape="uniform")
    # rounding below zero is clamped (it reached rescale_sum/ess_ratio as a negative before)
    out = credits.check_scores(uniform, torch.tensor([[-1e-7, 2.0, 5.0, 9.0]]), _batch(valid), scored)
    assert out.tolist() == [[0.0, 2.0, 5.0, 0.0]]
    # 'bilevel' keeps them (Eq. 14 clamps), so the built-in rules score bit for bit as before
    bilevel = rule("t-b", lambda m, b, **kw: None, reshape="bilevel")
    out = credits.check_scores(bilevel, torch.tensor([[-1e-7, 2.0, 5.0, 9.0]]), _batch(valid), scored)
    assert torch.equal(out, torch.tensor([[-1e-7, 2.0, 5.0, 0.0]]))
    # a value never read may be non-finite (it becomes 0); on a scored token it is an error
    out = credits.check_scores(uniform, torch.tensor([[1.0, 2.0, float("nan"), 0.0]]), _batch(valid), scored)
    assert out.tolist() == [[1.0, 2.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match=r"t-u.*finite on the scored tokens; found nan at row 0, position 1"):
        credits.check_scores(uniform, torch.tensor([[1.0, float("nan"), 0.0, 0.0]]), _batch(valid), scored)
    # 'weights' takes the scores as they are: one large score does not widen the tolerance
    weights = rule("t-w", lambda m, b, **kw: None, reshape="weights")
    with pytest.raises(ValueError, match=r"t-w.*needs non-negative scores.*found -0\.5"):
        credits.check_scores(weights, torch.tensor([[1e6, -0.5, 0.0, 0.0]]), _batch(valid), scored)
    # 'entropy' (Eq. 6): a negative score would turn the bonus into a penalty
    entropy = rule("t-e", lambda m, b, **kw: None, reshape="entropy")
    with pytest.raises(ValueError, match=r"t-e.*reshape='entropy' needs non-negative scores"):
        credits.check_scores(entropy, torch.tensor([[1.0, -1.0, 0.0, 0.0]]), _batch(valid))
    # float32 entropies of peaked distributions with logits near 50 come out at about -3.8e-6: kept
    peaked = torch.tensor([[1.0, -3.8e-6, 0.0, 0.0]])
    assert torch.equal(credits.check_scores(entropy, peaked, _batch(valid)), peaked)
    graph = torch.tensor([[1.0, 2.0, 3.0, 4.0]], requires_grad=True) * 2
    assert not credits.check_scores(uniform, graph, _batch(valid), scored).requires_grad
    with pytest.raises(ValueError, match=r"probe=True does not go with reshape='entropy'"):
        register_credit("t-probe-entropy", lambda m, b, **kw: None, reshape="entropy", probe=True)
    from oar_rl.reshape import entropy_shaped_advantages

    with pytest.raises(ValueError, match=r"entropies must be >= 0 on valid tokens.*found -10\.0"):
        entropy_shaped_advantages(torch.tensor([1.0]), torch.tensor([[0.5, -10.0]]), torch.ones(1, 2))
    entropy_shaped_advantages(torch.tensor([1.0]), torch.tensor([[0.5, -3.8e-6]]), torch.ones(1, 2))


def test_a_noisy_grail_rule_gets_the_generators_of_the_rows_it_scores(tmp_path, tokenizer, dataset, rule):
    """GRAIL scores the selected rollouts only; a noisy rule gets their generators, in row order (before:
    every row's, so rows and generators did not pair)."""
    seen: list[list[torch.Generator]] = []

    def noisy(model, batch, generator, **kw):
        assert len(generator) == batch.completion_mask.shape[0]
        seen.append(list(generator))
        return torch.stack([torch.rand(batch.completion_mask.shape[1], generator=g) for g in generator])

    rule("t-noisy-grail", noisy, reshape="grail", needs_model=True, noisy=True,
         options=lambda c: {"generator": c.generator})  # fmt: skip
    pattern = "([a-z])"  # the random policy writes no answer format: the last lowercase letter is the span
    args = make_args(tmp_path, credit="t-noisy-grail", answer_pattern=pattern)
    trainer = make_trainer(args, tokenizer, dataset)
    drawn: list[list[torch.Generator]] = []
    make_generators = trainer._credit_generators

    def spy(rows, n):
        drawn.append(make_generators(rows, n))
        return drawn[-1]

    trainer._credit_generators = spy
    trainer.train()
    assert seen and len(seen) == len(drawn)
    for got, all_rows in zip(seen, drawn, strict=True):
        ids = [id(g) for g in all_rows]
        where = [ids.index(id(g)) for g in got]
        assert where == sorted(where)  # a subsequence, in order
    assert any(len(got) < len(all_rows) for got, all_rows in zip(seen, drawn, strict=True))


@pytest.mark.parametrize("shape", ["(C,)", "(1, C)"])
def test_a_grail_rule_s_scores_are_checked_before_they_fill_the_batch(
    tmp_path, tokenizer, dataset, rule, shape
):
    """reshape='grail' scores only the rollouts it selects, into a (B, C) buffer: a (C,) or (1, C) output
    was broadcast over the rows there, unchecked (now: the rule's name and the expected shape)."""

    def flat(model, batch, **kw):
        c = batch.completion_mask.shape[1]
        return torch.ones(c) if shape == "(C,)" else torch.ones(1, c)

    rule("t-flat-grail", flat, reshape="grail")
    args = make_args(tmp_path, credit="t-flat-grail", answer_pattern="([a-z])")
    trainer = make_trainer(args, tokenizer, dataset)
    with pytest.raises(
        ValueError, match=r"credit rule 't-flat-grail'.*scores have shape .*expected \(B, C\)"
    ):
        trainer.train()


def test_a_users_probe_rule_is_scored_under_every_probe_in_the_recall(rule, monkeypatch):
    """`scores_per_probe` runs every rule registered with probe=True under each probe (named
    '<rule>/<probe>'), read from the registry when called (before: a fixed (oar-g, oar-p), so a user's
    probe rule was scored under the model-free probe alone, named as if it read none)."""
    from oar_rl.analysis import recall
    from oar_rl.probes import PROBES

    rule("t-probed", lambda m, b, probe, **kw: b.completion_mask.float(), reshape="bilevel", probe=True)
    rule("t-plain", lambda m, b, **kw: b.completion_mask.float(), reshape="bilevel")
    mask = torch.ones(2, 3, dtype=torch.bool)
    asked: list[tuple[str, list[str]]] = []

    def fake_scores(model, tok, trajs, methods, *, probe, **kw):
        asked.append((probe, list(methods)))
        return {m: torch.rand(2, 3) for m in methods}, mask

    monkeypatch.setattr(recall, "method_scores", fake_scores)
    scores, _ = recall.scores_per_probe(None, None, [], ["oar-g", "t-probed", "t-plain"], PROBES,
                                        model_free_probe="as-mean", seed=0)  # fmt: skip
    assert {"t-probed", "oar-g"} <= set(recall.probe_methods()) and "t-plain" not in recall.probe_methods()
    assert {f"t-probed/{p}" for p in PROBES} <= set(scores) and "t-probed" not in scores
    assert "t-plain" in scores and not any(k.startswith("t-plain/") for k in scores)
    assert asked == [(p, ["oar-g", "t-probed"] + (["t-plain"] if p == "as-mean" else [])) for p in PROBES]


def test_standalone_false_rules_are_refused_by_compute_importance_and_run_by_blame(rule):
    """`standalone=False`: compute_importance's callers (attribute, oracle, recall) give no gold answers
    or answer check; blame builds the trainer's context and runs every rule (first-error by default)."""
    from oar_rl.analysis.blame import DEFAULT_SIGNALS, check_signal

    rule("t-trainer-only", lambda m, b, **kw: b.completion_mask.float(), reshape="weights", standalone=False)
    assert "t-trainer-only" not in credits.SCORED_CREDITS and "first-error" in DEFAULT_SIGNALS
    check_signal("t-trainer-only")
    ids = torch.ones(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"kind='t-trainer-only' is not a known importance kind"):
        credits.compute_importance("t-trainer-only", None, ids, ids, ids, ids)
