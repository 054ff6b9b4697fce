"""Rules that read the outcome (issues 46, 48): one ScoringContext for every rule, and the rules built on it.

- `first-error` through the registry's one path (the context's fields) locates what the search itself
  locates (`first_error_scores`, given the same inputs by hand).
- `save-prefix`, `lowest-prob` and `random-departure` against references written apart from them: the
  located tokens of the search, a full unbatched forward's log-probabilities and argmax.
- A rule from a user's file that reads the gold answers and the answer check trains through `OARTrainer`
  (it records what it was given) and, with the example file, through `oar-rl study` and `oar-rl blame`.
- A missing outcome field is refused, naming the field and how to supply it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import make_args, make_trainer
from oar_rl.credits import CREDIT_MODES, register_credit, run_scorer, unregister_credit
from oar_rl.importance import first_error as fe
from oar_rl.scoring import ScoringContext
from oar_rl.tiny import tiny_qwen2
from test_first_error import greedy_reference, rollout_batch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "credit_rules" / "error_step.py"
SIGNS = [-1.0, -1.0, 1.0, -1.0, -1.0, -1.0]  # row 2 is a right rollout: never searched


@pytest.fixture(scope="module")
def rollouts(tokenizer):
    """A tiny Qwen2, prompts of different lengths, and rollouts that leave the policy's greedy path at a
    known token (after 2, 0, 5, 3, 7 and 1 greedy tokens) and go on at random."""
    import random

    model = tiny_qwen2(len(tokenizer), seed=0).eval()
    prompts = ["1+2=", "17+25=", "3*3=", "100-1=", "8/2=", "5+5+5="]
    max_new, eos = 12, {tokenizer.eos_token_id}
    greedy = [greedy_reference(model, tokenizer(p)["input_ids"], max_new, eos) for p in prompts]
    rng = random.Random(1)
    completions, leaves = [], [2, 0, 5, 3, 7, 1]
    for g, d in zip(greedy, leaves, strict=True):
        assert len(g) > d
        other = rng.choice([t for t in range(5, len(tokenizer)) if t != g[d] and t not in eos])
        completions.append((g[:d] + [other] + [rng.randrange(5, len(tokenizer)) for _ in range(3)])[:max_new])
    return model, prompts, greedy, completions, leaves, max_new, eos


def _setup(tokenizer, rollouts):
    model, prompts, greedy, completions, leaves, max_new, _eos = rollouts
    gold = [tokenizer.decode(g, skip_special_tokens=True) for g in greedy]
    batch = rollout_batch(model, tokenizer, prompts, completions)

    def check(text: str, g: str) -> bool:  # right while the text is the policy's own greedy completion
        return text == g

    ctx = ScoringContext(
        tokenizer=tokenizer, gold=gold, check=check, advantages=torch.tensor(SIGNS), max_new_tokens=max_new,
        batch_size=4, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    return model, batch, ctx, leaves


def _logprobs_reference(model, batch, temperature: float):
    """Per row, no padding, one full forward: log π of each completion token and whether it is the argmax."""
    P = batch.prompt_len
    out = []
    with torch.no_grad():
        for b in range(batch.input_ids.shape[0]):
            prompt = batch.input_ids[b, :P][batch.attention_mask[b, :P].bool()]
            comp = batch.input_ids[b, P:][batch.completion_mask[b].bool()]
            logits = model(input_ids=torch.cat([prompt, comp])[None]).logits[0, len(prompt) - 1 : -1]
            logp = torch.log_softmax(logits.double() / temperature, dim=-1)
            out.append((logp.gather(1, comp[:, None])[:, 0], logits.argmax(-1) == comp))
    return out


def test_the_shared_per_token_head_loop_matches_full_forwards(tokenizer, rollouts):
    """`completion_token_stats` (entropy, lowest-prob and random-departure's loop): for the rows asked,
    with rows and head positions cut into blocks, each token's statistic is the one-row full forward's;
    the other rows and padding stay 0 / False; a stat with the wrong number of outputs is an error."""
    from oar_rl.importance.token_head import completion_token_stats

    model, batch, _ctx, _ = _setup(tokenizer, rollouts)

    def stat(z, picked):
        return torch.log_softmax(z.float(), dim=-1).gather(1, picked[:, None])[:, 0], z.argmax(-1) == picked

    rows = [0, 3, 5]
    logp, top = completion_token_stats(
        model, batch, stat, (torch.float32, torch.bool), rows=rows, batch_size=2, chunk_size=3
    )
    ref = _logprobs_reference(model, batch, 1.0)
    mask = batch.completion_mask.bool()
    for b in range(mask.shape[0]):
        if b in rows:
            torch.testing.assert_close(logp[b][mask[b]].double(), ref[b][0], atol=1e-5, rtol=1e-5)
            assert torch.equal(top[b][mask[b]], ref[b][1])
        else:
            assert not logp[b].any() and not top[b].any()
    assert not logp[~mask].any() and not top[~mask].any()
    with pytest.raises(ValueError, match="stat returned 1 outputs, expected 2"):
        completion_token_stats(model, batch, lambda z, p: (z[:, 0],), (torch.float32, torch.bool))


def test_first_error_through_the_registry_is_the_search(tokenizer, rollouts):
    model, batch, ctx, leaves = _setup(tokenizer, rollouts)
    got = run_scorer(CREDIT_MODES["first-error"], model, batch, ctx)
    direct = fe.first_error_scores(
        model, batch, tokenizer=tokenizer, gold=ctx.gold, check=ctx.check,
        direction=torch.sign(ctx.advantages), max_new_tokens=ctx.max_new_tokens, batch_size=4,
    )  # fmt: skip
    assert torch.equal(got, direct)
    expected = torch.zeros_like(got)
    for b, t in enumerate(leaves):
        if SIGNS[b] < 0:
            expected[b, t] = 1.0
    assert torch.equal(got, expected)  # the row leaves its greedy path where the fixture made it leave


def test_save_prefix_lifts_the_penalty_before_the_located_error_only(tokenizer, rollouts):
    model, batch, ctx, leaves = _setup(tokenizer, rollouts)
    w = run_scorer(CREDIT_MODES["save-prefix"], model, batch, ctx)
    for b, t in enumerate(leaves):
        valid = batch.completion_mask[b].bool()
        want = valid.float()
        if SIGNS[b] < 0:
            want[:t] = 0.0  # every completion token here is scored (no answer format): the prefix is saved
        assert torch.equal(w[b], want), b
    assert float(w.sum()) < float(batch.completion_mask.sum())  # it did something


def test_lowest_prob_blames_the_least_likely_token_of_wrong_rows(tokenizer, rollouts):
    model, batch, ctx, _ = _setup(tokenizer, rollouts)
    ctx = ScoringContext(**{**ctx.__dict__, "temperature": 0.7})
    got = run_scorer(CREDIT_MODES["lowest-prob"], model, batch, ctx)
    for b, (logp, _) in enumerate(_logprobs_reference(model, batch, 0.7)):
        want = torch.zeros(batch.completion_mask.shape[1])
        if SIGNS[b] < 0:
            want[int(logp.argmin())] = 1.0
        assert torch.equal(got[b], want), b


def test_random_departure_blames_an_off_greedy_token_of_the_located_rows(tokenizer, rollouts):
    model, batch, ctx, leaves = _setup(tokenizer, rollouts)
    ref = _logprobs_reference(model, batch, 1.0)
    picks = set()
    for seed in range(6):
        ctx_s = ScoringContext(**{**ctx.__dict__, "generator": torch.Generator().manual_seed(seed)})
        got = run_scorer(CREDIT_MODES["random-departure"], model, batch, ctx_s)
        again = run_scorer(
            CREDIT_MODES["random-departure"], model, batch,
            ScoringContext(**{**ctx.__dict__, "generator": torch.Generator().manual_seed(seed)}),
        )  # fmt: skip
        assert torch.equal(got, again)  # the draw is the generator's
        for b in range(got.shape[0]):
            hot = got[b].nonzero().flatten().tolist()
            if SIGNS[b] > 0:
                assert hot == []
                continue
            off = (~ref[b][1]).nonzero().flatten().tolist()
            assert len(hot) == 1 and hot[0] in off, (b, hot, off)  # one off-greedy token of the row
            assert leaves[b] in off  # the located error is one of them
            picks.add((b, hot[0]))
    assert any(t != leaves[b] for b, t in picks)  # it is not the located token


def test_a_missing_outcome_field_is_named(tokenizer, rollouts):
    model, batch, ctx, _ = _setup(tokenizer, rollouts)
    for field, hint in (("gold", "gold_column='answer'"), ("check", "answer_check"), ("advantages", "(B,)")):
        bad = ScoringContext(**{**ctx.__dict__, field: None})
        with pytest.raises(ValueError, match=rf"'save-prefix' needs ScoringContext\.{field}.*{hint}"):
            run_scorer(CREDIT_MODES["save-prefix"], model, batch, bad)
    rows = ctx.rows([True, False, False, True, False, False])
    assert rows.gold == [ctx.gold[0], ctx.gold[3]] and rows.advantages.tolist() == [-1.0, -1.0]
    with pytest.raises(ValueError, match="3 flags for a context of 6 rows"):
        ctx.rows([True, False, True])
    short = ScoringContext(**{**ctx.__dict__, "advantages": torch.tensor([-1.0, 1.0])})  # not one per row
    for rule in ("lowest-prob", "first-error"):
        with pytest.raises(ValueError, match=r"advantages has shape \(2,\), expected \(6,\)"):
            run_scorer(CREDIT_MODES[rule], model, batch, short)


def test_a_users_rule_reads_the_gold_and_the_check_in_training(tmp_path, tokenizer, dataset):
    """Before issue 46 only the rule named first-error got the outcome: any other rule had no gold."""
    seen: list[tuple] = []

    def reads_outcome(model, batch, *, ctx):
        gold = ctx.need("gold", "t-outcome")
        check = ctx.need("check", "t-outcome")
        adv = ctx.need("advantages", "t-outcome")
        seen.append((list(gold), bool(check("12", "12")), adv.shape[0], batch.completion_mask.shape[0]))
        return batch.completion_mask.float()

    register_credit("t-outcome", reads_outcome, reshape="bilevel", options=lambda c: {"ctx": c})
    try:
        args = make_args(tmp_path, credit="t-outcome", max_steps=1)
        make_trainer(args, tokenizer, dataset, answer_check=lambda text, g: text.strip() == g).train()
    finally:
        unregister_credit("t-outcome")
    assert seen, "the rule was never called"
    answers = set(dataset["answer"])
    for gold, ok, n_adv, n_rows in seen:
        assert gold and set(gold) <= answers and ok and n_adv == n_rows == len(gold)


def test_outcome_example_runs_in_study_and_blame(tmp_path):
    """The guide's outcome-aware example through `oar-rl study` (tiny: 1 seed, 2 steps) and `oar-rl blame`."""
    from oar_rl.analysis import blame
    from oar_rl.study import cli as study_cli

    out = tmp_path / "study"
    args = ["--tiny", "--credits", "grpo,error-step", "--seeds", "1", "--recall", "0", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--credit-module", str(EXAMPLE)]  # fmt: skip
    assert study_cli.main(args) == 0
    run = json.loads((out / "runs" / "error-step.seed0.json").read_text())
    assert run["credit"] == "error-step" and run["final"]["sampled"] is not None

    out = tmp_path / "blame"
    argv = ["--problems", "4", "--samples", "4", "--credits", "first-error,error-step", "--out", str(out),
            "--credit-module", str(EXAMPLE)]  # fmt: skip
    assert blame.main(argv) == 0
    result = json.loads((out / "blame.json").read_text())
    assert set(result["signals"]) == {"first-error", "error-step"} and result["rows"] >= 1


RULE_FILE = """
import json, os
import oar_rl

def reads_gold(model, batch, *, ctx):
    gold = ctx.need("gold", "t-reads-gold")
    check = ctx.need("check", "t-reads-gold")
    with open(os.environ["OAR_TEST_SEEN"], "a") as f:
        f.write(json.dumps({"gold": list(gold), "adv": ctx.need("advantages", "t-reads-gold").tolist(),
                            "self_check": bool(check(str(gold[0]), str(gold[0])))}) + "\\n")
    return batch.completion_mask.float()

oar_rl.register_credit("t-reads-gold", reads_gold, reshape="bilevel", options=lambda c: {"ctx": c})
"""


def test_oar_rl_train_gives_a_users_rule_the_gold_and_the_check(tiny_model_dir, tmp_path, monkeypatch):
    """`oar-rl train --credit-module FILE --credit RULE`: the rule reads the dataset's gold answers and the
    answer check (math-verify's by default); before issue 46 it would have failed with KeyError 'gold'."""
    from oar_rl import train
    from oar_rl.credits import CREDIT_MODES, unregister_credit
    from test_train_cli import TINY

    rule = tmp_path / "my_rule.py"
    rule.write_text(RULE_FILE)
    seen = tmp_path / "seen.jsonl"
    monkeypatch.setenv("OAR_TEST_SEEN", str(seen))
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}+{i}=", "gold": str(2 * i)}) + "\n" for i in range(8)))
    argv = ["--config", TINY, "--model_name_or_path", str(tiny_model_dir),
            "--output_dir", str(tmp_path / "o"), "--dataset", str(data), "--question_column", "q",
            "--answer_column", "gold", "--max_steps", "1",
            "--credit-module", str(rule), "--credit", "t-reads-gold",
            "--reward_funcs", "test_train_cli.digit_reward"]  # fmt: skip
    try:
        assert train.main(argv) == 0
    finally:
        if "t-reads-gold" in CREDIT_MODES:
            unregister_credit("t-reads-gold")
    records = [json.loads(line) for line in seen.read_text().splitlines()]
    assert records, "the rule never scored a batch"
    answers = {str(2 * i) for i in range(8)}
    for r in records:
        assert r["gold"] and set(r["gold"]) <= answers and r["self_check"]
        assert len(r["adv"]) == len(r["gold"]) and all(a != 0 for a in r["adv"])


def test_issue_48s_rules_run_in_study_and_blame(tmp_path):
    """save-prefix, lowest-prob and random-departure through `oar-rl study` (tiny: 1 seed, 2 steps) and
    `oar-rl blame`: each trains, and in blame each moves weight off GRPO's uniform credit."""
    from oar_rl.analysis import blame
    from oar_rl.study import cli as study_cli

    rules = ("save-prefix", "lowest-prob", "random-departure")
    out = tmp_path / "study"
    args = ["--tiny", "--credits", ",".join(("grpo", *rules)), "--seeds", "1", "--recall", "0",
            "--out", str(out), "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert study_cli.main(args) == 0
    for rule in rules:
        run = json.loads((out / "runs" / f"{rule}.seed0.json").read_text())
        assert run["credit"] == rule and run["final"]["sampled"] is not None

    out = tmp_path / "blame"
    argv = ["--problems", "4", "--samples", "4", "--credits", ",".join(("first-error", *rules)),
            "--out", str(out)]  # fmt: skip
    assert blame.main(argv) == 0
    result = json.loads((out / "blame.json").read_text())
    assert set(result["signals"]) == {"first-error", *rules} and result["rows"] >= 1
    for rule in rules:  # a rule that scored nothing would leave every weight at 1 (uniform, GRPO's)
        sig = result["signals"][rule]
        assert any(abs(w - 1.0) > 1e-3 for w in [*sig["w_error"], *sig["w_last"]]), rule
