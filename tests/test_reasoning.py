"""Reasoning-only scoring (issue 26): where the reasoning ends in every answer format, on the testbed's
real tokenizer, and what the trainer does with the format tokens (weight 1, never scored)."""

from __future__ import annotations

import pytest
import torch

from conftest import make_args, make_trainer, pad_texts
from oar_rl.answer_span import ANSWER_TAG_PATTERN, answer_masks, reasoning_mask
from oar_rl.rewards.extract import reasoning_end

CASES = [
    # (completion, the reasoning it starts with)
    ("Only the pears. 15-7=8. That is all. <answer>8</answer>", "Only the pears. 15-7=8. That is all."),
    ("So 3+4=7. The final answer is $\\boxed{7}$.", "So 3+4=7."),
    ("We get 12. Therefore, the final answer is 12.", "We get 12."),
    ("3+4=7. So the answer is \\boxed{7}", "3+4=7."),
    ("x=5 so \\boxed{5}", "x=5 so"),  # a bare connective is reasoning
    ("x=5 also \\boxed{5}", "x=5 also"),  # "so" inside a word is no lead-in
    ("Answer: \\boxed{5}", ""),
    ("<answer>4</answer>", ""),
    ("a \\boxed{3} then <answer>\\boxed{4}</answer>", "a \\boxed{3} then"),  # the rewarded (last) marker
    ("$x=\\boxed{5}$", "$x="),
    # issue 36: a $ / $$ that closes the reasoning's own math stays reasoning
    ("we have $x=2$ \\boxed{2}", "we have $x=2$"),
    ("so $$x=2$$ <answer>2</answer>", "so $$x=2$$"),
    ("cost \\$5 and $y$ is $\\boxed{3}$", "cost \\$5 and $y$ is"),  # \$ is no delimiter; this $ opens
    ("we get $x = 2$. The final answer is $\\boxed{2}$", "we get $x = 2$."),
    # markdown headings and labels are format; "answer" as the reasoning's own word is not
    ("x=4.\n\n**Final Answer**\n\\boxed{4}", "x=4."),
    ("x=4.\n### Final Answer:\n\\[\n\\boxed{4}\n\\]", "x=4."),
    ("x is 4.\nAnswer <answer>4</answer>", "x is 4."),
    ("I answer <answer>4</answer>", "I answer"),
]


@pytest.mark.parametrize(("text", "reasoning"), CASES)
def test_reasoning_end_stops_at_the_answer_format(text, reasoning):
    end = reasoning_end(text)
    assert end is not None and text[:end] == reasoning


@pytest.mark.parametrize("text", ["no marker here", "foo <answer>5", "\\boxed{5"])
def test_no_closed_marker_is_all_reasoning(text):
    assert reasoning_end(text) is None


@pytest.mark.parametrize("pattern", [None, "boxed", ANSWER_TAG_PATTERN])
def test_reasoning_mask_on_the_char_tokenizer(tokenizer, pattern):
    texts = ["so 4 <answer>42</answer>", "3*4=12 \\boxed{12}!", "no answer", ""]
    ids, mask = pad_texts(tokenizer, texts, "right")
    answer, reasoning = answer_masks(ids, mask, tokenizer, pattern=pattern)
    assert torch.equal(reasoning, reasoning_mask(ids, mask, tokenizer, pattern=pattern))
    assert not (reasoning & ~mask.bool()).any() and not (reasoning & answer).any()
    found = {None: (0, 1), "boxed": (1,), ANSWER_TAG_PATTERN: (0,)}[pattern]
    for b, text in enumerate(texts):
        n = int(reasoning[b].sum())
        if b in found:  # char tokenizer: one token per character
            assert text[:n] == (text[: text.index("<answer>") - 1] if b == 0 else "3*4=12")
            assert reasoning[b, :n].all()
        else:
            assert n == len(text)  # no marker of the pattern: all reasoning


def test_reasoning_mask_on_the_testbed_tokenizer():
    """The testbed's BPE: every worked solution's reasoning is exactly the text before ' <answer>'."""
    from oar_rl.data.wordproblems import build_tokenizer, split_problems

    tok = build_tokenizer()
    problems = split_problems("validation", 24)
    texts = [p.solution for p in problems]
    ids, mask = pad_texts(tok, texts, "right")
    reasoning = reasoning_mask(ids, mask, tok)
    for b, text in enumerate(texts):
        got = tok.decode(ids[b][reasoning[b]])
        assert got == text[: text.rindex("<answer>")].rstrip(), text
        assert "<" not in tok.decode(ids[b][reasoning[b]][-2:])  # no piece of the tag


@pytest.mark.parametrize("answer", ["The final answer is 12", "\\boxed 12"])
def test_the_eos_after_a_trailing_answer_is_not_in_the_span(answer):
    """Issue 36, item 3, on the testbed's tokenizer: the reward reads the text without special tokens, so
    the span of a trailing answer (no closing format) holds "12", not the EOS after it, and the EOS is no
    reasoning either."""
    from oar_rl.data.wordproblems import build_tokenizer
    from oar_rl.rewards.extract import extract_prediction

    tok = build_tokenizer()
    text = f"So 5+7=12. {answer}"
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
    span, reasoning = answer_masks(ids, torch.ones_like(ids), tok)
    assert extract_prediction(tok.decode(ids[0], skip_special_tokens=True))[0] == "12"
    assert tok.decode(ids[0][span[0]]).strip() == "12" and not span[0, -1]
    assert tok.decode(ids[0][reasoning[0]]) == "So 5+7=12." and not reasoning[0, -1]


def test_trainer_scores_only_the_reasoning_and_format_keeps_weight_one(tmp_path, tokenizer, dataset):
    """One credit assignment on a hand-made batch: scores are 0 off the reasoning, format and answer
    tokens get weight exactly 1, each row's weights still sum to its token count; `before-answer` scores
    the tag too; `reshape_rows` leaves the other rows at GRPO's uniform advantage."""
    texts = ["12+7=19 so <answer>19</answer>", "3*4=11 ok <answer>11</answer>", "7-2=5 <answer>5</answer>"]
    prompts = ["a", "b", "c"]
    p_ids, p_mask = pad_texts(tokenizer, prompts, "left")
    c_ids, c_mask = pad_texts(tokenizer, texts, "right")
    adv = torch.tensor([1.0, -1.0, 0.5])
    output = {
        "prompt_ids": p_ids,
        "prompt_mask": p_mask,
        "completion_ids": c_ids,
        "completion_mask": c_mask,
        "advantages": adv,
    }
    mask = c_mask.bool()
    ends = torch.tensor([t.index(" <answer>") for t in texts])  # char tokenizer: token = character
    reasoning = torch.arange(c_ids.shape[1])[None] < ends[:, None]
    for credit in ("oar-p", "random"):
        args = make_args(tmp_path, credit=credit, probe="as-mean", answer_pattern=ANSWER_TAG_PATTERN)
        trainer = make_trainer(args, tokenizer, dataset)
        credit_out = trainer._assign_credit(output, mask)
        w, signal = credit_out.weights, credit_out.importance
        assert (signal[~reasoning] == 0).all() and (signal[reasoning] != 0).any()
        assert (w[mask & ~reasoning] == 1).all()  # format and answer tokens: weight 1
        torch.testing.assert_close(w.sum(1), mask.sum(1).float())
        assert not torch.allclose(w[reasoning], torch.ones(()))  # the reasoning was reshaped
        args.scored_tokens = "before-answer"
        before = trainer._assign_credit(output, mask).importance
        tag = mask & ~reasoning & ~answer_masks(c_ids, c_mask, tokenizer, pattern=ANSWER_TAG_PATTERN)[0]
        opening = tag & (torch.arange(c_ids.shape[1]) < ends[:, None] + 9)  # " <answer>" of each row
        scored = adv != 0
        assert opening[scored].any() and (before[opening & scored[:, None]] != 0).all()
        args.scored_tokens = "reasoning"
        for rows, keep in (("positive", adv <= 0), ("negative", adv >= 0)):
            args.reshape_rows = rows
            out = trainer._assign_credit(output, mask)
            assert (out.weights[keep][mask[keep]] == 1).all()  # not reshaped: GRPO's uniform advantage
            assert not torch.allclose(out.weights[~keep][mask[~keep]], torch.ones(()))
            torch.testing.assert_close(out.advantages, adv[:, None] * out.weights)
        args.reshape_rows = "all"


def test_bad_scored_tokens_and_rows_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"scored_tokens='everything'.*reasoning, before-answer"):
        make_args(tmp_path, scored_tokens="everything")
    with pytest.raises(ValueError, match=r"reshape_rows='pos'.*all, positive, negative"):
        make_args(tmp_path, reshape_rows="pos")


def test_first_error_credit_blames_the_first_flip(tmp_path, tokenizer, dataset, monkeypatch):
    """credit="first-error" on a hand-made batch: with continuations stubbed out (the prefix alone is
    checked), the binary search finds the first token after which the check fails, in wrong rows only;
    the trainer then gives it the top weight and leaves the correct row uniform."""
    from oar_rl.importance import first_error

    monkeypatch.setattr(
        first_error, "_continue_greedy", lambda model, tok, prefixes, budgets, **kw: [[] for _ in prefixes]
    )
    texts = ["ab X cd Y e <answer>1</answer>", "abcd X efg <answer>1</answer>", "abc <answer>1</answer>"]
    p_ids, p_mask = pad_texts(tokenizer, ["a", "b", "c"], "left")
    c_ids, c_mask = pad_texts(tokenizer, texts, "right")
    adv = torch.tensor([-1.0, -0.5, 1.0])
    output = {"prompt_ids": p_ids, "prompt_mask": p_mask, "completion_ids": c_ids, "completion_mask": c_mask,
              "advantages": adv}  # fmt: skip
    args = make_args(tmp_path, credit="first-error", answer_pattern=ANSWER_TAG_PATTERN)
    trainer = make_trainer(args, tokenizer, dataset, answer_check=lambda text, gold: "X" not in text)
    trainer._oar_inputs = [{"answer": "1"}] * 3
    out = trainer._assign_credit(output, c_mask.bool())
    for b, text in enumerate(texts[:2]):
        assert out.importance[b].nonzero().flatten().tolist() == [text.index("X")]
        assert int(out.weights[b].argmax()) == text.index("X")
    assert (out.importance[2] == 0).all() and (out.weights[2][c_mask[2].bool()] == 1).all()
    trainer._oar_inputs = [{"question": "?"}] * 3
    with pytest.raises(ValueError, match="gold_column='answer'"):
        trainer._assign_credit(output, c_mask.bool())


def test_first_error_search_edges(tokenizer, monkeypatch):
    """The binary search's edge rows: one reasoning token that flips (found), one whose prefix is already
    wrong before its first token (no flip, however few tokens it has), one whose whole reasoning is still
    right (the slip is in the answer: no flip)."""
    from oar_rl.importance import first_error
    from oar_rl.probes import prepare_batch
    from oar_rl.tiny import tiny_qwen2

    monkeypatch.setattr(
        first_error, "_continue_greedy", lambda model, tok, prefixes, budgets, **kw: [[] for _ in prefixes]
    )
    texts = ["X <answer>1</answer>", "X <answer>1</answer>", "ab <answer>1</answer>"]
    gold = ["1", "bad", "1"]  # row 1: the check fails from the empty prefix on
    p_ids, p_mask = pad_texts(tokenizer, ["a", "b", "c"], "left")
    c_ids, c_mask = pad_texts(tokenizer, texts, "right")
    model = tiny_qwen2(len(tokenizer), seed=0)
    reasoning = reasoning_mask(c_ids, c_mask, tokenizer, pattern=ANSWER_TAG_PATTERN)
    batch = prepare_batch(model, p_ids, p_mask, c_ids, c_mask, None, reasoning)
    found = first_error.first_error_positions(
        model,
        batch,
        tokenizer=tokenizer,
        gold=gold,
        check=lambda text, g: g != "bad" and "X" not in text,
        rows=[0, 1, 2],
        max_new_tokens=8,
    )
    assert found == {0: 0, 1: None, 2: None}
