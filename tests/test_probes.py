"""Answer-span masks, scored positions and probe plumbing (oar_rl.probes)."""

from __future__ import annotations

import re

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from conftest import pad_texts
from oar_rl.answer_span import (
    ANSWER_TAG_PATTERN,
    REWARDED,
    answer_span_mask,
    compile_answer_pattern,
    has_answer_span,
    last_boxed_span,
    scored_positions,
)
from oar_rl.probes import ProbeOutcome, build_probe_spec, outcome_divergence


@pytest.fixture(scope="module")
def bpe_tok():
    """A byte-level BPE trained in memory on a few strings (merges like GPT-2/Qwen tokenizers)."""
    texts = [
        "Let me think. 3 + 4 = 7 so <answer>7</answer>",
        "The answer is \\boxed{\\frac{1}{2}} and that is final.",
        "We compute 12 * 12 = 144 <answer>144</answer> done",
        "<think>reasoning about numbers</think><answer>42</answer>",
    ] * 4
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>")


def _reference_mask(tok, texts: list[str], span_of) -> torch.Tensor:
    """Slow reference: tokens whose ORIGINAL-text offsets overlap the span found on the original text."""
    ids, _ = pad_texts(tok, texts, "right")
    out = torch.zeros(ids.shape, dtype=torch.bool)
    for b, text in enumerate(texts):
        span = span_of(text)
        if span is None or span[0] == span[1]:
            continue
        s, e = span
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        for k, (lo, hi) in enumerate(enc["offset_mapping"]):
            out[b, k] = hi > lo and lo < e and hi > s
    return out


def _last_regex_span(pattern: str):
    def f(text):
        ms = list(re.finditer(pattern, text, re.DOTALL))
        return ms[-1].span(1) if ms else None

    return f


COMPLETIONS = [
    "so 3 + 4 = 7 <answer>7</answer>",
    "first <answer>1</answer> then <answer>144</answer> end",  # last match wins
    "no span here at all",
    "<answer></answer> empty content",  # empty content: no span
    "half is <answer>½ x</answer>!",  # non-ASCII: byte-level BPE splits it into 2 tokens
]


def test_answer_span_char_tokenizer_hand_checked(tokenizer):
    ids, mask = pad_texts(tokenizer, ["ab<answer>42</answer>", "x"], "right")
    got = answer_span_mask(ids, mask, tokenizer)
    # row 0: 'a','b' (0-1), '<answer>' (2-9), '4' (10), '2' (11), '</answer>' (12-20)
    expected = torch.zeros_like(got)
    expected[0, 10:12] = True
    assert torch.equal(got, expected)


@pytest.mark.parametrize("which", ["char", "bpe"])
def test_answer_span_matches_offset_reference(which, tokenizer, bpe_tok):
    tok = tokenizer if which == "char" else bpe_tok
    ids, mask = pad_texts(tok, COMPLETIONS, "right")
    got = answer_span_mask(ids, mask, tok, pattern=ANSWER_TAG_PATTERN)
    ref = _reference_mask(tok, COMPLETIONS, _last_regex_span(ANSWER_TAG_PATTERN))
    # a special token holds none of the reward's text (TRL decodes with skip_special_tokens=True): the
    # char tokenizer writes ½ as <unk>, which is no part of the span
    special = torch.isin(ids, torch.tensor(tok.all_special_ids)) & mask.bool()
    assert bool(special[4].any()) == (which == "char") and bool(ref[special].any()) == (which == "char")
    assert torch.equal(got, ref & ~special)
    assert got[0].any() and got[1].any() and got[4].any()
    assert not got[2].any() and not got[3].any()
    if which == "bpe":  # the ½ really is split over several tokens, and they all count
        enc = tok(COMPLETIONS[4], add_special_tokens=False, return_offsets_mapping=True)
        half = COMPLETIONS[4].index("½")
        pieces = [k for k, (lo, hi) in enumerate(enc["offset_mapping"]) if lo <= half < hi]
        assert len(pieces) >= 2 and all(got[4, k] for k in pieces)


@pytest.mark.parametrize("which", ["char", "bpe"])
def test_boxed_nested_braces(which, tokenizer, bpe_tok):
    tok = tokenizer if which == "char" else bpe_tok
    texts = [
        "The answer is \\boxed{\\frac{1}{2}} and that is final.",
        "\\boxed{3} wait, \\boxed{4}",  # last one
        "\\boxed{\\{1,2\\}}",  # escaped braces do not count
        "cut off \\boxed{\\frac{1}{2}",  # unbalanced: no span
        "\\boxed{7} then unbalanced \\boxed{8",  # the complete one is used
    ]
    ids, mask = pad_texts(tok, texts, "right")
    got = answer_span_mask(ids, mask, tok, pattern="boxed")

    def span_of(text):
        return last_boxed_span(text)

    assert torch.equal(got, _reference_mask(tok, texts, span_of))
    t0 = texts[0]
    assert last_boxed_span(t0) == (t0.index("\\frac"), t0.index("}} and") + 1)
    assert t0[slice(*last_boxed_span(t0))] == "\\frac{1}{2}"
    assert texts[1][slice(*last_boxed_span(texts[1]))] == "4"
    assert texts[2][slice(*last_boxed_span(texts[2]))] == "\\{1,2\\}"
    assert last_boxed_span(texts[3]) is None and not got[3].any()
    assert texts[4][slice(*last_boxed_span(texts[4]))] == "7"


def test_custom_regex_and_padding_ignored(tokenizer):
    ids, mask = pad_texts(tokenizer, ["work #### 12", "#### 3 and #### 45"], "right")
    got = answer_span_mask(ids, mask, tokenizer, pattern=r"#### (\d+)")
    assert got[0].nonzero().flatten().tolist() == [10, 11]
    assert got[1].nonzero().flatten().tolist() == [16, 17]
    # padding positions are never in the span even if their ids would decode into the pattern
    assert not (got & ~mask.bool()).any()


@pytest.mark.parametrize("pattern", ["", "<answer>.*</answer>", "(a)(b)", "(unclosed"])
def test_bad_patterns(pattern, tokenizer):
    ids, mask = pad_texts(tokenizer, ["x"], "right")
    with pytest.raises(ValueError, match="pattern"):
        answer_span_mask(ids, mask, tokenizer, pattern=pattern)
    with pytest.raises(ValueError, match="pattern"):
        compile_answer_pattern(pattern)
    assert (
        compile_answer_pattern(None) == REWARDED  # the default: the span the accuracy reward scores
        and compile_answer_pattern(ANSWER_TAG_PATTERN).pattern == ANSWER_TAG_PATTERN
        and compile_answer_pattern("boxed") is None
    )


def test_answer_span_bad_masks(tokenizer):
    ids, mask = pad_texts(tokenizer, ["ab"], "right")
    with pytest.raises(ValueError, match="0/1"):
        answer_span_mask(ids, mask * 2, tokenizer)
    with pytest.raises(ValueError, match="shape"):
        answer_span_mask(ids, mask[:, :1], tokenizer)
    with pytest.raises(ValueError, match="integer"):
        answer_span_mask(ids.float(), mask, tokenizer)


def test_scored_positions_hand_worked():
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]])
    ans = torch.tensor(
        [[0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool
    )
    got = scored_positions(mask, ans)
    expected = torch.tensor(
        [
            [1, 1, 0, 0, 0, 0],  # span starts at 2: tokens 0, 1
            [1, 1, 1, 0, 0, 0],  # no span: every valid token (LT fallback)
            [0, 0, 0, 0, 0, 0],  # span at 0: nothing before it
            [0, 0, 0, 0, 0, 0],  # empty row
        ],
        dtype=torch.bool,
    )
    assert torch.equal(got, expected)
    assert has_answer_span(ans).tolist() == [True, False, True, False]
    with pytest.raises(ValueError, match="padding"):
        scored_positions(mask, torch.ones_like(ans))
    with pytest.raises(ValueError, match="shape"):
        scored_positions(mask, ans[:, :3])


def test_probe_spec_positions():
    # P = 3; row 0: prompt [0,1,1], completion 4 valid, span at completion 2..3
    attn = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
    comp = torch.tensor([[5, 6, 7, 8, 0], [9, 9, 0, 0, 0]])
    ans = torch.tensor([[0, 0, 1, 1, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    lt = build_probe_spec(3, attn, comp, None, "lt-logits")
    assert lt.index.tolist() == [6, 4] and lt.row_ptr.tolist() == [0, 1, 2]
    joint = build_probe_spec(3, attn, comp, ans, "as-joint")
    # span tokens at full positions 5, 6 are predicted from positions 4, 5; row 1 falls back to LT
    assert joint.index.tolist() == [4, 5, 4] and joint.target.tolist() == [7, 8, -1]
    assert joint.kind.tolist() == [1, 0] and joint.row_ptr.tolist() == [0, 2, 3]
    sub = joint.take(torch.tensor([1, 0, 0]))
    assert sub.index.tolist() == [4, 4, 5, 4, 5] and sub.row_ptr.tolist() == [0, 1, 3, 5]
    with pytest.raises(ValueError, match="answer_mask"):
        build_probe_spec(3, attn, comp, None, "as-mean")
    with pytest.raises(ValueError, match="probe"):
        build_probe_spec(3, attn, comp, ans, "lt_logits")


def test_outcome_divergence_hand_worked():
    # row 0 (dist): P = [1/2, 1/2], Q = [3/4, 1/4]
    #   KL = 1/2 ln((1/2)/(3/4)) + 1/2 ln((1/2)/(1/4)) = 1/2 (-0.405465) + 1/2 (0.693147) = 0.143841
    # row 1 (joint): phi = -1.0, phi~ = -1.5 -> drop 0.5; gradient objective (0.5)^2 / 2 = 0.125
    # row 2 (joint): phi = -1.0, phi~ = -0.5 -> drop -0.5 clamped to 0; objective 0.125
    # row 3 (dist): identical distributions -> 0
    half = torch.tensor([0.5, 0.5]).log()
    clean = ProbeOutcome(
        torch.stack([half, torch.zeros(2), torch.zeros(2), half]), torch.tensor([0.0, -1.0, -1.0, 0.0])
    )
    pert = ProbeOutcome(
        torch.stack([torch.tensor([0.75, 0.25]).log(), torch.zeros(2), torch.zeros(2), half]),
        torch.tensor([0.0, -1.5, -0.5, 0.0]),
    )
    kind = torch.tensor([0, 1, 1, 0])
    got = outcome_divergence(clean, pert, kind, mode="perturbation")
    torch.testing.assert_close(got, torch.tensor([0.143841, 0.5, 0.0, 0.0]), rtol=0, atol=1e-6)
    got = outcome_divergence(clean, pert, kind, mode="gradient")
    torch.testing.assert_close(got, torch.tensor([0.143841, 0.125, 0.125, 0.0]), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="mode"):
        outcome_divergence(clean, pert, kind, mode="kl")


MULTIBYTE = ["<answer>😀</answer>", "so <answer>x = 😀½é</answer> 🎉", "<answer>日本</answer>"]


@pytest.mark.parametrize("text", MULTIBYTE)
def test_answer_span_multibyte_chars_have_no_holes(text, bpe_tok):
    """A byte-level token holding a middle byte of a multi-byte character inside the answer decodes to
    no text of its own; it must still be marked (it was not: `<answer>😀</answer>` gave [T, F, F, T])."""
    ids, mask = pad_texts(bpe_tok, [text], "right")
    got = answer_span_mask(ids, mask, bpe_tok, pattern=ANSWER_TAG_PATTERN)
    ref = _reference_mask(bpe_tok, [text], _last_regex_span(ANSWER_TAG_PATTERN))
    assert torch.equal(got, ref)
    assert int(got.sum()) >= 4  # every byte token of the answer's characters


def test_answer_span_truncated_multibyte_char_and_module_split(bpe_tok):
    """A completion cut in the middle of a character (length limit) keeps its text; the answer-span
    functions have one home, `oar_rl.answer_span` (`oar_rl.probes` no longer re-exports them, issue 20)."""
    from oar_rl import answer_span, probes

    full = bpe_tok("<answer>ab😀", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([full[:-1]])  # the last byte of 😀 is missing: the text ends in U+FFFD
    got = answer_span_mask(ids, torch.ones_like(ids), bpe_tok, pattern=r"<answer>(.*)")
    assert got[0].tolist()[-3:] == [True, True, True] and not got[0, 0]
    for name in ("answer_span_mask", "scored_positions", "last_boxed_span", "compile_answer_pattern"):
        assert callable(getattr(answer_span, name)) and not hasattr(probes, name)


def test_answer_span_space_merged_with_partial_char(bpe_tok):
    """Hand-built ids: a token ' ' + first byte of 'é' ("Ġ" + "Ã" merged), then the second byte. The
    space stays in the text, and both tokens overlap the 'é'."""
    vocab = bpe_tok.get_vocab()
    if "ĠÃ" not in vocab:
        bpe_tok = bpe_tok.__class__(tokenizer_object=bpe_tok.backend_tokenizer, pad_token="<pad>")
        bpe_tok.add_tokens(["ĠÃ"])
    pre = bpe_tok("<answer>a", add_special_tokens=False)["input_ids"]
    post = bpe_tok("</answer>", add_special_tokens=False)["input_ids"]
    ids = pre + bpe_tok.convert_tokens_to_ids(["ĠÃ", "©"]) + post
    assert bpe_tok.decode(ids) == "<answer>a é</answer>"
    got = answer_span_mask(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), bpe_tok)
    n = len(pre)
    assert got[0, n - 1] and got[0, n] and got[0, n + 1] and not got[0, n + 2]


def test_rewarded_pattern_marks_what_the_reward_scores(tokenizer):
    """pattern="rewarded": the span of the rewards' one rule (last-ending marker, then inside it)."""
    texts = [
        "\\boxed{3} so the final answer is $5$.",  # the later marker wins: 5
        "x <answer>\\boxed{42}</answer>",  # the rule again inside the tag: 42
        "no marker 7",  # no marker: no span
    ]
    ids, mask = pad_texts(tokenizer, texts, "right")
    got = answer_span_mask(ids, mask, tokenizer, pattern="rewarded")
    for b, (text, want) in enumerate(zip(texts, ["5", "42", ""], strict=True)):
        marked = "".join(text[k] for k in got[b].nonzero().flatten().tolist())
        assert marked == want
    assert compile_answer_pattern("rewarded") == "rewarded"
