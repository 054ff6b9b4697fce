"""`oar-rl blame`: the first-error locator on hand-built completions, and the table's arithmetic."""

from __future__ import annotations

import pytest
import torch

from oar_rl.analysis.blame import bilevel, check_signal, locate, main
from oar_rl.analysis.blame_report import paired, row_metrics, summarize, token_masks
from oar_rl.data.wordproblem_errors import first_error

# Zoe has 15 pears, loses 8, then loses 2: the true steps and answer.
STEPS = ((15, "-", 8, 7), (7, "-", 2, 5))
HEAD = "Only the pears of Zoe matter here. To start, the pears go down: "
MID = " She has fewer pears now, so "
TAIL = " That is all. "


def text(first: str, second: str | None, answer: str) -> str:
    body = HEAD + first + "." + (MID + second + "." if second else "")
    return body + TAIL + f"<answer>{answer}</answer>"


def span_text(completion: str, span: tuple[int, int]) -> str:
    return completion[span[0] : span[1]]


def test_correct_completion():
    c = text("15-8=7", "7-2=5", "5")
    e = first_error(c, STEPS, 5)
    assert (e.status, e.kind, e.steps_written, e.steps_true) == ("correct", None, 2, 2)
    assert span_text(c, e.last_result) == "5" and c.index("7-2=5") + 4 == e.last_result[0]


def test_slip_carried_forward():
    c = text("15-8=6", "6-2=4", "4")
    e = first_error(c, STEPS, 5)
    assert (e.status, e.kind, e.step) == ("error", "slip", 0)
    assert e.spans == ((c.index("=6") + 1, c.index("=6") + 2),)  # the written result "6" of step 1
    assert span_text(c, e.last_result) == "4" and e.before_last_step


def test_wrong_operand_and_wrong_operator():
    c = text("15-9=6", "6-2=4", "4")  # gives away 9, the story says 8
    e = first_error(c, STEPS, 5)
    assert (e.kind, e.step, [span_text(c, s) for s in e.spans]) == ("operand", 0, ["9"])
    c = text("15+8=23", "23-2=21", "21")  # adds instead of taking away
    e = first_error(c, STEPS, 5)
    assert (e.kind, e.step, [span_text(c, s) for s in e.spans]) == ("operator", 0, ["+"])
    c = text("15-8=7", "8-2=6", "6")  # the second step reads the wrong quantity: an operand, in the last step
    e = first_error(c, STEPS, 5)
    assert (e.kind, e.step, e.before_last_step) == ("operand", 1, False)
    assert [span_text(c, s) for s in e.spans] == ["8"] and e.spans[0][0] == c.index("8-2")


def test_commuted_sum_is_not_an_error_but_a_commuted_difference_is():
    steps = ((14, "+", 12, 26), (26, "-", 5, 21))
    assert first_error(text("12+14=26", "26-5=21", "21"), steps, 21).status == "correct"
    e = first_error(text("14+12=26", "5-26=21", "21"), steps, 21)
    assert (e.kind, e.step) == ("operand", 1)


def test_last_step_slip_extra_and_missing_steps_and_answer_copy():
    e = first_error(text("15-8=7", "7-2=4", "4"), STEPS, 5)
    assert (e.kind, e.step, e.before_last_step) == ("slip", 1, False)
    c = text("15-8=7", "7-2=5", "3").replace(" That is all.", " Then 5-2=3.")
    e = first_error(c, STEPS, 5)
    assert (e.kind, e.step) == ("extra_step", 2)
    assert [span_text(c, s) for s in e.spans] == ["5", "-", "2"]
    assert first_error(text("15-8=7", None, "7"), STEPS, 5).status == "missing_step"
    assert first_error(text("15-8=7", "7-2=5", "6"), STEPS, 5).status == "answer_copy"


@pytest.mark.parametrize(
    "completion",
    [
        text("15-8=7", "7-2=5", "5").replace("<answer>5</answer>", "5"),  # no answer span
        text("15-8=7", "7-2=5", "5") + " more",  # text after the answer span
        text("15-=7", "7-2=5", "5"),  # an equation without its operand
        text("15-8=7", "7-2=5", "5").replace("That is all.", "I have 3 ideas."),  # a stray number
        HEAD + "nothing. <answer>5</answer>",  # no equation at all
    ],
)
def test_unparseable_completions_are_excluded_not_guessed(completion):
    assert first_error(completion, STEPS, 5).status == "unparseable"


class _Traj:
    def __init__(self, tok, completion: str, answer: str):
        self.completion, self.answer = completion, answer
        self.completion_ids = torch.tensor(tok(completion, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def tok():
    from oar_rl.data.wordproblems import build_tokenizer

    return build_tokenizer()


def test_locate_maps_the_error_to_its_tokens_and_counts_every_rollout(tok):
    from types import SimpleNamespace

    from oar_rl.tasks.base import exact_check

    problem = SimpleNamespace(steps=STEPS, answer=5)
    texts = [
        text("15-8=7", "7-2=5", "5"),  # correct
        text("15-8=6", "6-2=4", "4"),  # slip before the last step: measured
        text("15-8=7", "7-2=4", "4"),  # slip in the last step: counted, not measured
        "no answer at all",  # unparseable
    ]
    rows, counts, kinds = locate([_Traj(tok, t, "5") for t in texts], [problem], 4, tok, exact_check)
    assert dict(counts) == {
        "correct": 1,
        "wrong, first error before the last step": 1,
        "wrong, first error in the last step": 1,
        "wrong, unparseable": 1,
    }
    assert dict(kinds) == {"slip": 2}  # every located first error, in the last step too
    (row,) = rows
    ids = tok(texts[1], add_special_tokens=False)["input_ids"]
    assert [tok.decode([ids[k]]) for k in row["error"]] == ["6"]  # digits are one token each
    assert [tok.decode([ids[k]]) for k in row["last"]] == ["4"]
    assert row["error"][0] == ids.index(tok.convert_tokens_to_ids("6"))  # the first "6": the slip


DEFAULTS = {"tau": 0.4, "oar_beta": 2.0, "threshold": "quantile", "floor": 0.0}


def test_a_signal_on_the_first_error_gets_the_top_weight_and_full_recall():
    T, C = 20, 22  # 20 reasoning tokens, 2 answer tokens
    valid = torch.ones(3, C, dtype=torch.bool)
    scored = torch.zeros(3, C, dtype=torch.bool)
    scored[:, :T] = True
    rows = [{"error": [4], "last": [15]}, {"error": [2, 3], "last": [18]}, {"error": [7], "last": [12, 13]}]
    err, last = token_masks(rows, (3, C))
    raw = err.float()  # all importance on the first error
    w = bilevel(raw, valid, scored, DEFAULTS)
    # Î = 1 on the k error tokens, 0 elsewhere; the 0.4-quantile is 0, so every scored token takes the
    # boosting branch: 1 + 2(Î − 0)/(1 − 0) = 3 on the error, 1 on the rest; Eq. 17 rescales the T scored
    # weights to sum to T: error weight 3T/(T + 2k); the 2 answer tokens keep 1.
    for i, k in enumerate((1, 2, 1)):
        assert w[i, err[i]].tolist() == pytest.approx([3 * T / (T + 2 * k)] * k, rel=1e-6)
        assert float(w[i, :T].max()) == pytest.approx(3 * T / (T + 2 * k), rel=1e-6)
        assert w[i, T:].tolist() == [1.0, 1.0]
    m = row_metrics(w, raw, err, last, scored)
    assert m["recall@10"].tolist() == [1.0, 1.0, 1.0] and m["outweighs"].tolist() == [1.0, 1.0, 1.0]
    assert m["w_last"].tolist() == pytest.approx([T / (T + 2), T / (T + 4), T / (T + 2)], rel=1e-6)
    assert m["error_minus_last"].tolist() == pytest.approx((m["w_error"] - m["w_last"]).tolist())
    # the mirror signal: all importance on the last result; the error never outweighs it. The top 10%
    # (2 tokens) holds the last result, plus, where it is one token, one of the 19 tokens tied at 0: in
    # expectation (ties broken at random) 1/19 of an error token's recall, none in row 2
    m2 = row_metrics(bilevel(last.float(), valid, scored, DEFAULTS), last.float(), err, last, scored)
    assert m2["outweighs"].tolist() == [0.0, 0.0, 0.0]
    assert m2["recall@10"].tolist() == pytest.approx([1 / 19, 1 / 19, 0.0])
    s, d = summarize(m, seed=0), paired(m, m2, seed=0)
    assert s["w_error"][0] == pytest.approx(float(m["w_error"].mean()))
    assert s["w_error"][1] <= s["w_error"][0] <= s["w_error"][2]
    assert d["outweighs"][0] == pytest.approx(1.0) and d["recall@10"][0] == pytest.approx(1 - 2 / 57)
    assert d["w_error"][0] == pytest.approx(float((m["w_error"] - m2["w_error"]).mean()))


def test_row_metrics_reject_a_row_without_tokens():
    err = torch.zeros(1, 4, dtype=torch.bool)
    last = torch.tensor([[False, False, True, False]])
    with pytest.raises(ValueError, match="first-error token"):
        row_metrics(torch.ones(1, 4), None, err, last, torch.ones(1, 4, dtype=torch.bool))


def test_signal_names_are_checked():
    for good in ("random", "position", "entropy", "grail", "oar-g/as-mean", "oar-p/lt-logits", "first-error"):
        check_signal(good)
    for bad, msg in (("oar-g", "needs a probe"), ("random/as-mean", "does not take"),
                     ("nope", "signal=.nope. is not valid"), ("first-error/x", "does not take")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            check_signal(bad)
    assert main(["--credits", "oar-g/bogus", "--out", "unused"]) == 2


@pytest.fixture
def registered():
    """Register credit rules for one test; unregistered after it."""
    from oar_rl import credits

    names: list[str] = []

    def make(name, scorer, **kw):
        names.append(name)
        return credits.register_credit(name, scorer, **kw)

    yield make
    for n in names:
        if n in credits.CREDIT_MODES:
            credits.unregister_credit(n)


def test_own_reshaping_follows_the_registered_reshape_and_config(registered):
    """The own-reshaping table dispatches on the rule's `reshape`, not its name (a user rule with
    reshape='uniform' got None before, and the leaderboard showed its bi-level weights as its own), and
    a rule's `config` is applied over OARConfig's defaults, in its scorer's settings and its weights."""
    from oar_rl.analysis.blame import own_weights, rule_defaults, signal_scores, trainer_defaults
    from oar_rl.reshape import rescale_sum

    raw = torch.tensor([[1.0, 3.0, 0.5, 2.0, 9.0], [0.2, 0.1, 4.0, 1.0, 9.0]])
    valid = torch.ones(2, 5, dtype=torch.bool)
    scored = valid.clone()
    scored[:, 4] = False
    registered("t-blame-unif", lambda m, b, **kw: b.completion_mask.float(), reshape="uniform")
    w = own_weights("t-blame-unif", raw, valid, scored, DEFAULTS)
    assert w is not None
    expected = torch.where(scored, rescale_sum(raw * scored, scored), 1.0)
    torch.testing.assert_close(w, expected)
    assert own_weights("random", raw, valid, scored, DEFAULTS) is not None  # still by its reshape
    assert own_weights("position", raw, valid, scored, DEFAULTS) is None  # bilevel: the shared table
    torch.testing.assert_close(
        own_weights(registered("t-blame-none", lambda m, b, **kw: b.completion_mask.float(),
                               reshape="none").name, raw, valid, scored, DEFAULTS), valid.float()
    )  # fmt: skip

    defaults = {**trainer_defaults(), **DEFAULTS}
    seen = []

    def tau_reader(model, batch, **kw):
        seen.append(kw["settings"]["tau"])
        return batch.completion_mask.float()

    registered("t-blame-tau", tau_reader, reshape="bilevel", config={"tau": 0.7})
    own = rule_defaults("t-blame-tau", defaults)
    assert own["tau"] == 0.7 and defaults["tau"] == 0.4 and rule_defaults("position", defaults) == defaults
    w_own = own_weights("t-blame-tau", raw, valid, scored, own)
    torch.testing.assert_close(w_own, bilevel(raw, valid, scored, {**DEFAULTS, "tau": 0.7}))
    assert not torch.allclose(w_own, bilevel(raw, valid, scored, DEFAULTS))
    ids = torch.ones(2, 3, dtype=torch.long)
    batch = (ids, torch.ones(2, 3, dtype=torch.long), torch.ones(2, 5, dtype=torch.long), valid.long())
    context = {"tokenizer": None, "gold": ["1", "1"], "check": None, "max_new_tokens": 5}
    signal_scores("t-blame-tau", None, batch, None, None, seed=0, defaults=own, context=context)
    assert seen == [0.7]


def test_the_pretrained_regime_is_blamed_on_its_generators_problems_in_its_chat_template(monkeypatch):
    """`--task wordproblems-smollm2`: the problems come from the `wordproblems` generator (first errors
    located against their steps) and the model is asked them rendered in its chat template."""
    from oar_rl.analysis import attribute, blame
    from oar_rl.data.wordproblems import split_problems
    from oar_rl.tasks import get_task

    task = get_task("wordproblems-smollm2")
    assert "wordproblems-smollm2" in blame.blame_tasks() and task.data_task == "wordproblems"
    seen = {}
    monkeypatch.setattr(
        attribute, "sample_trajectories", lambda m, t, prompts, answers, **k: seen.update(p=prompts)
    )
    problems = split_problems("train", 2, task.data_task)
    blame.sample_rollouts(None, None, problems, 2, seed=0, max_new_tokens=8, render=task.render)
    assert seen["p"] == [task.render(p.prompt) for p in problems for _ in range(2)]
    assert seen["p"][0].startswith("<|im_start|>system\n") and problems[0].prompt in seen["p"][0]
    # the task's own prompts are the same rendering of the same generator's stream
    assert task.prompts("train", 1)[0]["prompt"] == seen["p"][0]
