"""first-error's search (issues 26, 35, 36) against references written apart from it.

- Through real greedy generation on a tiny Qwen2 (rows of different lengths, left padding, an EOS
  inside a rollout, a second EOS from the generation config), every branching k locates the token of an
  independent one-row, unpadded, uncached greedy linear scan (monotone check) and of a textbook binary
  search over the scan's values (any check).
- The k-ary search is the binary search on arbitrary (non-monotone) outcomes, in the rounds it claims.
- A prefix that ends in EOS is a finished rollout: it is not continued (the issue-36 reproduction, on
  the testbed's tokenizer, with a scripted model that would generate on past its EOS).
- A batch whose wrong rows have no reasoning token scores nothing, in the scorer and in the trainer.
"""

from __future__ import annotations

import math
import random
import zlib

import pytest
import torch
from torch import nn

from conftest import make_args, make_trainer, pad_texts
from oar_rl.answer_span import ANSWER_TAG_PATTERN, reasoning_mask
from oar_rl.importance import first_error as fe
from oar_rl.probes import prepare_batch
from oar_rl.tiny import tiny_qwen2

BRANCHINGS = (2, 4, 8, 16)


def binary_reference(values: list[bool]) -> int | None:
    """The textbook binary search over the values of the cuts 0..T (cut n keeps n completion tokens):
    None unless cut 0 is right and cut T wrong; else the token t = hi with cut t right, cut t + 1 wrong."""
    T = len(values) - 1
    if not (values[0] and not values[T]):
        return None
    lo, hi = -1, T - 1  # token indices: lo's cut (lo + 1) right, hi's cut (hi + 1) wrong
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if values[mid + 1] else (lo, mid)
    return hi


def halvings(values: list[bool]) -> int:
    """How many halvings the binary search takes on `values` (0 when it stops at the ends)."""
    T = len(values) - 1
    if not (values[0] and not values[T]):
        return 0
    lo, hi, n = -1, T - 1, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if values[mid + 1] else (lo, mid)
        n += 1
    return n


# ----------------------------------------------------------------------------------------------------
# the search's logic, on arbitrary outcomes


def test_kary_search_is_the_binary_search_on_any_outcomes(tokenizer, monkeypatch):
    """Continuations stubbed out (the check reads the kept prefix): random, mostly non-monotone outcomes
    per cut, rows of 1-40 tokens; every k finds the binary search's token, in ⌈halvings / log₂ k⌉ rounds
    (at least the one that checks the ends)."""
    monkeypatch.setattr(
        fe, "_continue_greedy", lambda model, tok, prefixes, budgets, **kw: [[] for _ in prefixes]
    )
    model = tiny_qwen2(len(tokenizer), seed=0)
    rng = random.Random(0)
    letters = "abcdefghij"
    compared = 0
    for _trial in range(40):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 6))]
        texts = ["".join(rng.choice(letters) for _ in range(n)) for n in lengths]
        values = [[rng.random() < 0.6 for _ in range(n + 1)] for n in lengths]
        for v in values:  # most rows searchable: right before the first token, wrong after the last
            v[0], v[-1] = rng.random() < 0.9, rng.random() < 0.1
        p_ids, p_mask = pad_texts(tokenizer, ["1+2="] * len(texts), "left")
        c_ids, c_mask = pad_texts(tokenizer, texts, "right")
        batch = prepare_batch(model, p_ids, p_mask, c_ids, c_mask)

        def check(text: str, gold: str, values=values) -> bool:
            return values[int(gold)][len(text)]  # char tokenizer: one character per kept token

        expected = {b: binary_reference(v) for b, v in enumerate(values)}
        for k in BRANCHINGS:
            stats = fe.SearchStats()
            found = fe.first_error_positions(
                model, batch, tokenizer=tokenizer, gold=[str(b) for b in range(len(texts))], check=check,
                rows=list(range(len(texts))), max_new_tokens=64, branching=k, stats=stats,
                reuse_greedy=False,  # the stub's outcomes are arbitrary: runs of greedy tokens do not hold
            )  # fmt: skip
            assert found == expected, (k, texts, values)
            d = int(math.log2(k))
            assert stats.rounds == max(max(1, math.ceil(halvings(v) / d)) for v in values), k
            assert stats.continuations <= len(texts) * (2 + (k - 1) * stats.rounds)
            compared += len(texts)
    assert compared > 100


def test_rounds_drop_as_claimed_on_a_long_row(tokenizer, monkeypatch):
    """One row of 100 candidates whose first error is the last: ⌈log₂ 100⌉ = 7 halvings, so 7 rounds at
    k = 2 (the ends share the first), 4 at k = 4, 3 at k = 8, 2 at k = 16; the token is the same."""
    monkeypatch.setattr(
        fe, "_continue_greedy", lambda model, tok, prefixes, budgets, **kw: [[] for _ in prefixes]
    )
    model = tiny_qwen2(len(tokenizer), seed=0)
    p_ids, p_mask = pad_texts(tokenizer, ["1+2="], "left")
    c_ids, c_mask = pad_texts(tokenizer, ["a" * 100], "right")
    batch = prepare_batch(model, p_ids, p_mask, c_ids, c_mask)
    rounds = {}
    for k in BRANCHINGS:
        stats = fe.SearchStats()
        found = fe.first_error_positions(
            model, batch, tokenizer=tokenizer, gold=["x"], check=lambda text, gold: len(text) < 100,
            rows=[0], max_new_tokens=128, branching=k, stats=stats, reuse_greedy=False,
        )  # fmt: skip
        assert found == {0: 99}
        rounds[k] = stats.rounds
    assert rounds == {2: 7, 4: 4, 8: 3, 16: 2}


def test_branching_default_is_the_binary_search(tmp_path):
    assert fe.DEFAULT_BRANCHING == 2
    assert make_args(tmp_path, credit="first-error").first_error_branching == 2


@pytest.mark.parametrize("bad", [0, 1, 3, 6, 2.0, True, "4"])
def test_branching_must_be_a_power_of_two(bad, tmp_path):
    with pytest.raises(ValueError, match=r"power of two >= 2 \(2, 4, 8, 16, \.\.\.\), got"):
        fe.check_branching(bad)
    with pytest.raises(ValueError, match="first_error_branching must be a power of two"):
        make_args(tmp_path, credit="first-error", first_error_branching=bad)


# ----------------------------------------------------------------------------------------------------
# real greedy generation against an independent linear scan


def greedy_reference(model, ids: list[int], budget: int, eos: set[int]) -> list[int]:
    """One row, no padding, no cache: the argmax of a full forward pass per new token, up to an EOS."""
    out: list[int] = []
    with torch.no_grad():
        for _ in range(budget):
            logits = model(input_ids=torch.tensor([ids + out])).logits[0, -1]
            out.append(int(logits.argmax()))
            if out[-1] in eos:
                break
    return out


def scan_values(
    model, tok, prompt: list[int], completion: list[int], check, gold, max_new, eos
) -> list[bool]:
    """The check's value at every cut 0..T of one rollout, each continuation from the greedy reference; a
    prefix that ends in EOS is finished (no continuation)."""
    values = []
    for n in range(len(completion) + 1):
        head = completion[:n]
        done = bool(head) and head[-1] in eos
        cont = [] if done else greedy_reference(model, prompt + head, max_new - n, eos)
        values.append(bool(check(tok.decode(head + cont, skip_special_tokens=True), gold)))
    return values


@pytest.fixture(scope="module")
def rollouts(tokenizer):
    """A tiny Qwen2 with a second EOS in its generation config, prompts of different lengths, and wrong
    rollouts that leave the greedy path at a known token (one by stopping: an EOS inside the rollout)."""
    model = tiny_qwen2(len(tokenizer), seed=0).eval()
    with torch.no_grad():  # sharper logits: a random tiny model's greedy path repeats one token otherwise,
        for p in model.parameters():  # and then every row would stop at its first token (all leaves 0)
            if p.dim() > 1:
                p.mul_(10.0)
    prompts = ["1+2=", "17+25=", "3*3=", "100-1=", "8/2=", "5+5+5="]
    max_new = 12
    tok_eos = tokenizer.eos_token_id
    greedy = [greedy_reference(model, tokenizer(p)["input_ids"], max_new, {tok_eos}) for p in prompts]
    extra = greedy[0][6]  # the generation config's own EOS: row 0's greedy path stops at its 7th token
    assert extra not in greedy[0][:6]
    model.generation_config.eos_token_id = [extra]
    eos = {tok_eos, extra}
    greedy = [greedy_reference(model, tokenizer(p)["input_ids"], max_new, eos) for p in prompts]
    rng = random.Random(1)
    completions, leaves = [], []
    for b, g in enumerate(greedy):
        d = [2, 0, 5, 3, 7, 1][b] % len(g)  # where the rollout leaves the greedy path
        if b == 3:
            row = [*g[:d], tok_eos]  # stops early: the EOS is its first error
        else:
            other = rng.choice([t for t in range(5, len(tokenizer)) if t != g[d] and t not in eos])
            row = g[:d] + [other] + [rng.randrange(5, len(tokenizer)) for _ in range(rng.randint(0, 4))]
        completions.append(row[:max_new])
        leaves.append(d)
    assert tok_eos not in greedy[3][: leaves[3] + 1]
    assert len(greedy[0]) == 7 and sum(d > 0 for d in leaves) >= 4  # the search has real work to do
    return model, prompts, greedy, completions, leaves, max_new, eos


def rollout_batch(model, tok, prompts, completions):
    """Left-padded prompts, right-padded completions of different lengths (token id lists)."""
    p_ids, p_mask = pad_texts(tok, prompts, "left")
    width = max(len(c) for c in completions)
    c_ids = torch.full((len(completions), width), tok.pad_token_id, dtype=torch.long)
    c_mask = torch.zeros_like(c_ids)
    for b, c in enumerate(completions):
        c_ids[b, : len(c)] = torch.tensor(c)
        c_mask[b, : len(c)] = 1
    return prepare_batch(model, p_ids, p_mask, c_ids, c_mask)


def test_real_generation_locates_the_linear_scans_first_error(tokenizer, rollouts):
    """Check: the text equals the policy's own greedy completion (monotone: right until the rollout leaves
    the greedy path). Every k finds, in every row, the token where the rollout leaves it, as the linear
    scan through the reference continuations does."""
    model, prompts, greedy, completions, leaves, max_new, eos = rollouts
    gold = [tokenizer.decode(g, skip_special_tokens=True) for g in greedy]

    def check(text: str, g: str) -> bool:
        return text == g

    scan = []
    for b, p in enumerate(prompts):
        v = scan_values(
            model, tokenizer, tokenizer(p)["input_ids"], completions[b], check, gold[b], max_new, eos
        )
        scan.append(next(t for t in range(len(v) - 1) if v[t] and not v[t + 1]))  # the linear scan
    assert scan == leaves  # the reference itself sees each rollout leave the greedy path where it does
    batch = rollout_batch(model, tokenizer, prompts, completions)
    rows = list(range(len(prompts)))
    for k in BRANCHINGS:
        found = fe.first_error_positions(
            model, batch, tokenizer=tokenizer, gold=gold, check=check, rows=rows, max_new_tokens=max_new,
            branching=k, batch_size=4,
        )  # fmt: skip
        assert found == dict(enumerate(scan)), k


def test_real_generation_equals_the_binary_search_over_the_scans_values(tokenizer, rollouts):
    """An arbitrary check (a hash of the text): the outcome is not monotone, and every k returns the
    textbook binary search's token over the reference continuations' values, a real flip."""
    model, prompts, _greedy, completions, _leaves, max_new, eos = rollouts

    def check(text: str, g: str) -> bool:  # the gold is the hash's salt ("0": three rows flip, at 3, 7, 1)
        return zlib.crc32(f"{g}:{text}".encode()) % 3 != 0

    values = [
        scan_values(model, tokenizer, tokenizer(p)["input_ids"], completions[b], check, "0", max_new, eos)
        for b, p in enumerate(prompts)
    ]
    expected = {b: binary_reference(v) for b, v in enumerate(values)}
    assert sum(t not in (None, 0) for t in expected.values()) >= 3  # the search has work to do
    batch = rollout_batch(model, tokenizer, prompts, completions)
    for k in BRANCHINGS:
        found = fe.first_error_positions(
            model, batch, tokenizer=tokenizer, gold=["0"] * len(prompts), check=check,
            rows=list(range(len(prompts))), max_new_tokens=max_new, branching=k, batch_size=3,
        )  # fmt: skip
        assert found == expected, k
    for b, t in expected.items():
        if t is not None:
            assert values[b][t] and not values[b][t + 1]


def test_continuations_stop_at_every_eos_as_trl_does(tokenizer, rollouts):
    model, *_ = rollouts
    assert fe.eos_token_ids(model, tokenizer) == [
        tokenizer.eos_token_id,
        *model.generation_config.eos_token_id,
    ]


# ----------------------------------------------------------------------------------------------------
# the issue-36 reproductions


class ScriptedLM(nn.Module):
    """Writes the same continuation after any prefix and ignores EOS (a model that generates on past the
    end of its rollout); records what `generate` was asked."""

    def __init__(self, script: list[int], generation_eos: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.script = script
        self.generation_config = type("Config", (), {"eos_token_id": generation_eos})()
        self.calls: list[dict] = []

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, eos_token_id, **kw):
        self.calls.append({"input_ids": input_ids.clone(), "eos_token_id": eos_token_id})
        cont = (self.script * max_new_tokens)[:max_new_tokens]
        tail = torch.tensor([cont] * input_ids.shape[0], dtype=input_ids.dtype)
        return torch.cat([input_ids, tail], dim=1)


def test_a_prefix_ending_in_eos_is_finished_on_the_testbed_tokenizer(tokenizer):
    """Issue 36, item 2: a wrong rollout `... <answer>28</answer></s>` scored before the answer (every
    token a candidate, the EOS too). Continued past its EOS it would read `<answer>26</answer>` and be
    judged right; finished, it reads as the reward read it: wrong, and the search blames its last token."""
    from oar_rl.data.wordproblems import build_tokenizer
    from oar_rl.tasks import get_task

    tok = build_tokenizer()
    check = get_task("wordproblems").check
    text = "Tom has 30 pears. He eats 2, so 30-2=28. That is all. <answer>28</answer>"
    completion = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    script = tok(" so 28-2=26. That is all. <answer>26</answer>", add_special_tokens=False)["input_ids"]
    assert check(tok.decode(completion + script, skip_special_tokens=True), "26")  # the trap is real
    assert not check(tok.decode(completion, skip_special_tokens=True), "26")
    lm = ScriptedLM(script, generation_eos=7)
    p_ids, p_mask = pad_texts(tok, ["Tom has 30 pears and eats 2. How many are left?"], "left")
    c_ids = torch.tensor([completion])
    batch = prepare_batch(tiny_qwen2(len(tok), seed=0), p_ids, p_mask, c_ids, torch.ones_like(c_ids))
    max_new = len(completion) + 40
    found = fe.first_error_positions(
        lm, batch, tokenizer=tok, gold=["26"], check=check, rows=[0], max_new_tokens=max_new
    )
    values = []  # the check at every cut, the finished rollout not continued
    for n in range(len(completion) + 1):
        cont = [] if n == len(completion) else (script * max_new)[: max_new - n]
        values.append(check(tok.decode(completion[:n] + cont, skip_special_tokens=True), "26"))
    assert values[0] and not values[-1]
    assert found == {0: binary_reference(values)} and found[0] is not None  # searched, not dropped
    asked = [row[row != tok.pad_token_id].tolist() for call in lm.calls for row in call["input_ids"]]
    assert not any(row[-1] == tok.eos_token_id for row in asked)  # no finished prefix was continued
    assert all(call["eos_token_id"] == [tok.eos_token_id, 7] for call in lm.calls)


def test_wrong_rows_without_reasoning_score_nothing(tmp_path, tokenizer, dataset):
    """Issue 36, item 1: the wrong row answers at once (`<answer>4</answer>`, no reasoning token), so no
    row is searched: all-zero scores, in the scorer and through the trainer."""
    texts = ["<answer>4</answer>", "1+2=3 <answer>3</answer>"]
    p_ids, p_mask = pad_texts(tokenizer, ["1+2=", "2+2="], "left")
    c_ids, c_mask = pad_texts(tokenizer, texts, "right")
    model = tiny_qwen2(len(tokenizer), seed=0)
    reasoning = reasoning_mask(c_ids, c_mask, tokenizer, pattern=ANSWER_TAG_PATTERN)
    assert not reasoning[0].any() and reasoning[1].any()
    batch = prepare_batch(model, p_ids, p_mask, c_ids, c_mask, None, reasoning)
    scores = fe.first_error_scores(
        model, batch, tokenizer=tokenizer, gold=["3", "4"], check=lambda text, gold: gold in text,
        direction=torch.tensor([-1.0, 1.0]), max_new_tokens=8,
    )  # fmt: skip
    assert torch.equal(scores, torch.zeros_like(scores))
    args = make_args(tmp_path, credit="first-error", answer_pattern=ANSWER_TAG_PATTERN)
    trainer = make_trainer(args, tokenizer, dataset, answer_check=lambda text, gold: gold in text)
    trainer._oar_inputs = [{"answer": "3"}, {"answer": "4"}]
    output = {"prompt_ids": p_ids, "prompt_mask": p_mask, "completion_ids": c_ids, "completion_mask": c_mask,
              "advantages": torch.tensor([-1.0, 1.0])}  # fmt: skip
    out = trainer._assign_credit(output, c_mask.bool())
    assert not out.importance.any()
    assert torch.equal(out.weights[c_mask.bool()], torch.ones(int(c_mask.sum())))


def test_nested_recorders_each_count_every_search_and_leave_by_identity():
    """Issue 57, item 18: the bench's recorder around the trainer's per-step one. `SearchStats` is a
    dataclass, so `list.remove` took out the first *equal* recorder (the outer one, once their counts
    matched): the outer one stopped counting and the next exit raised 'x not in list'."""
    step = fe.SearchStats(calls=1, rounds=3, continuations=4)
    with fe.recording() as outer:
        for _ in range(2):  # two training steps, each in its own recorder
            with fe.recording() as inner:
                for sink in fe._RECORDERS:
                    sink.add(step)
            assert inner.rounds == 3
    assert (outer.calls, outer.rounds, outer.continuations) == (2, 6, 8)
    assert fe._RECORDERS == []
