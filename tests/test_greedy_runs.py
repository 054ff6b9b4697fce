"""first-error's reuse of greedy runs (`oar_rl.importance.greedy_runs`) against references written apart.

- The runs of a rollout equal a slow reference: one unpadded, uncached forward pass per cut, a token
  linked to the next cut when it is the argmax by the margin and its prefix is not finished; a tie in
  the head (two identical rows) is never sure.
- On rollouts that leave the greedy path several times, the search with reuse locates the same tokens
  as without it and as the textbook binary search over an independent scan's values, for a monotone
  and a non-monotone check, while generating fewer continuations.
- A forward pass that disagrees with generate() is caught: a warning, and the plain search's result.
"""

from __future__ import annotations

import random
import zlib

import pytest
import torch

from conftest import pad_texts
from oar_rl.importance import first_error as fe
from oar_rl.importance import greedy_runs as gr
from oar_rl.probes import prepare_batch
from oar_rl.tiny import tiny_qwen2
from test_first_error import binary_reference, greedy_reference, rollout_batch, scan_values

PROMPTS = ["1+2=", "17+25=", "3*3=", "100-1=", "8/2="]
MAX_NEW = 24


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


@pytest.fixture(scope="module")
def leaving(tokenizer):
    """A tiny Qwen2 and, per prompt, a rollout that follows the greedy path but leaves it at 1-3 random
    tokens (each time picking the second-best token) and ends with EOS where the path does."""
    model = tiny_qwen2(len(tokenizer), seed=3).eval()
    eos = {tokenizer.eos_token_id}
    rng = random.Random(7)
    rollouts = []
    for p in PROMPTS:
        prompt = tokenizer(p)["input_ids"]
        leave_at = set(rng.sample(range(MAX_NEW - 2), rng.randint(1, 3)))
        row: list[int] = []
        while len(row) < MAX_NEW:
            logits = _logits(model, prompt + row)
            order = logits.argsort(descending=True).tolist()
            t = order[1] if len(row) in leave_at and order[1] not in eos else order[0]
            row.append(int(t))
            if t in eos:
                break
        rollouts.append(row)
    return model, rollouts, eos


def _batch(model, tok, completions):
    return rollout_batch(model, tok, PROMPTS, completions)


def reference_runs(model, prompt: list[int], completion: list[int], eos: set[int]) -> gr.GreedyRuns:
    """Per cut n, an unpadded uncached forward pass; token n links cut n to n + 1 when it is the sure
    argmax after a prefix that does not end in EOS."""
    L = len(completion)
    top, linked = [], []
    dtype = next(model.parameters()).dtype
    for n in range(L + 1):
        logits = _logits(model, prompt + completion[:n])
        best = logits.topk(2)
        sure = bool(best.values[0] - best.values[1] > gr.margin(best.values[0], dtype))
        top.append(int(best.indices[0]) if sure else -1)
        if n < L:
            linked.append(sure and top[n] == completion[n] and not (n > 0 and completion[n - 1] in eos))
    start = [0] * (L + 1)
    end = [L] * (L + 1)
    for n in range(1, L + 1):
        start[n] = start[n - 1] if linked[n - 1] else n
    for n in range(L - 1, -1, -1):
        end[n] = end[n + 1] if linked[n] else n
    return gr.GreedyRuns(start, end, top)


def test_runs_equal_one_forward_pass_per_cut(tokenizer, leaving):
    model, rollouts, eos = leaving
    batch = _batch(model, tokenizer, rollouts)
    lengths = [len(r) for r in rollouts]
    found = gr.greedy_runs(
        model, batch.input_ids, batch.attention_mask, batch.prompt_len, lengths, eos, batch_size=2
    )
    for b, p in enumerate(PROMPTS):
        ref = reference_runs(model, tokenizer(p)["input_ids"], rollouts[b], eos)
        assert found[b] == ref, b
        assert len(set(ref.start)) >= 2  # every rollout leaves the path at least once
        assert len(set(ref.start)) < len(ref.start)  # and follows it for a while: some cuts are linked


def test_a_tie_in_the_head_is_never_sure(tokenizer, leaving):
    """Two identical rows of the LM head tie wherever one of them is the argmax: those cuts have no sure
    argmax and link nothing, in the runs and in the reference."""
    _model, rollouts, eos = leaving
    tied = tiny_qwen2(len(tokenizer), seed=3).eval()
    first = rollouts[0][0]
    twin = next(t for t in range(5, len(tokenizer)) if t != first and t not in eos)
    with torch.no_grad():
        head = tied.get_output_embeddings().weight
        head[twin] = head[first]
    batch = _batch(tied, tokenizer, rollouts)
    lengths = [len(r) for r in rollouts]
    found = gr.greedy_runs(
        tied, batch.input_ids, batch.attention_mask, batch.prompt_len, lengths, eos, batch_size=8
    )
    assert found[0].top[0] == -1 and found[0].end[0] == 0  # the tie at the first token
    for b, p in enumerate(PROMPTS):
        assert found[b] == reference_runs(tied, tokenizer(p)["input_ids"], rollouts[b], eos), b


@pytest.mark.parametrize("kind", ["monotone", "hash"])
def test_reuse_locates_the_plain_searchs_tokens_with_fewer_continuations(tokenizer, leaving, kind):
    model, rollouts, eos = leaving
    paths = [greedy_reference(model, tokenizer(p)["input_ids"], MAX_NEW, eos) for p in PROMPTS]
    greedy = [tokenizer.decode(g, skip_special_tokens=True) for g in paths]

    def check(text: str, gold: str) -> bool:
        if kind == "monotone":
            return text == gold
        return zlib.crc32(text.encode()) % 3 != 0

    gold = greedy if kind == "monotone" else [""] * len(PROMPTS)
    values = [
        scan_values(model, tokenizer, tokenizer(p)["input_ids"], rollouts[b], check, gold[b], MAX_NEW, eos)
        for b, p in enumerate(PROMPTS)
    ]
    expected = {b: binary_reference(v) for b, v in enumerate(values)}
    assert sum(t is not None for t in expected.values()) >= 2
    batch = _batch(model, tokenizer, rollouts)
    found, stats = {}, {}
    for reuse in (False, True):
        stats[reuse] = fe.SearchStats()
        found[reuse] = fe.first_error_positions(
            model, batch, tokenizer=tokenizer, gold=gold, check=check, rows=list(range(len(PROMPTS))),
            max_new_tokens=MAX_NEW, batch_size=3, stats=stats[reuse], reuse_greedy=reuse,
        )  # fmt: skip
    assert found[True] == found[False] == expected
    assert stats[False].reused == 0 and stats[True].reused > 0
    assert stats[True].continuations < stats[False].continuations
    assert stats[True].generated_tokens < stats[False].generated_tokens


def test_a_disagreeing_forward_pass_warns_and_falls_back(tokenizer, leaving, monkeypatch):
    model, rollouts, _eos = leaving
    real = gr.greedy_runs

    def wrong(*args, **kwargs):  # every sure argmax off by one token: generate() will contradict it
        out = real(*args, **kwargs)
        shift = [[(t + 1) % len(tokenizer) if t >= 0 else t for t in r.top] for r in out]
        return [gr.GreedyRuns(r.start, r.end, top) for r, top in zip(out, shift, strict=True)]

    def check(text: str, gold: str) -> bool:
        return zlib.crc32(text.encode()) % 3 != 0

    batch = _batch(model, tokenizer, rollouts)
    kwargs = dict(tokenizer=tokenizer, gold=[""] * len(PROMPTS), check=check, rows=list(range(len(PROMPTS))),
                  max_new_tokens=MAX_NEW, batch_size=3)  # fmt: skip
    plain = fe.first_error_positions(model, batch, reuse_greedy=False, **kwargs)
    monkeypatch.setattr(fe, "greedy_runs", wrong)
    with pytest.warns(RuntimeWarning, match=r"generate\(\) continued with .* sure argmax is token"):
        found = fe.first_error_positions(model, batch, **kwargs)
    assert found == plain


def test_rows_that_share_a_prefix_share_answers_only_under_one_gold(tokenizer, leaving):
    """Two copies of one rollout of one prompt, checked against different golds: the copy whose gold no
    continuation reaches is not searched (None), though its prefixes are the other copy's."""
    model, rollouts, eos = leaving
    prompt = tokenizer(PROMPTS[0])["input_ids"]
    path = tokenizer.decode(greedy_reference(model, prompt, MAX_NEW, eos), skip_special_tokens=True)
    p_ids, p_mask = pad_texts(tokenizer, [PROMPTS[0]] * 2, "left")
    c_ids = torch.tensor([rollouts[0]] * 2)
    batch = prepare_batch(model, p_ids, p_mask, c_ids, torch.ones_like(c_ids))
    kwargs = dict(tokenizer=tokenizer, gold=[path, "never"], check=lambda text, gold: text == gold,
                  rows=[0, 1], max_new_tokens=MAX_NEW)  # fmt: skip
    plain = fe.first_error_positions(model, batch, reuse_greedy=False, **kwargs)
    assert plain[0] is not None and plain[1] is None
    assert fe.first_error_positions(model, batch, **kwargs) == plain


@pytest.mark.parametrize(
    "setting", [("repetition_penalty", 1.3), ("no_repeat_ngram_size", 2), ("suppress_tokens", [7])]
)
def test_a_generation_config_that_departs_from_the_argmax_gets_the_plain_search(tokenizer, leaving, setting):
    """A repetition penalty (or banned tokens, ...) makes greedy generate() leave the argmax: no run is
    reused (a warning names the setting) and the tokens are the plain search's."""
    model, rollouts, _eos = leaving
    name, value = setting
    assert gr.greedy_departures(model) == []
    batch = _batch(model, tokenizer, rollouts)

    def check(text: str, gold: str) -> bool:
        return zlib.crc32(text.encode()) % 3 != 0

    kwargs = dict(tokenizer=tokenizer, gold=[""] * len(PROMPTS), rows=list(range(len(PROMPTS))),
                  check=check, max_new_tokens=MAX_NEW)  # fmt: skip
    setattr(model.generation_config, name, value)
    try:
        assert gr.greedy_departures(model) == [f"{name}={value!r}"]
        plain = fe.first_error_positions(model, batch, reuse_greedy=False, **kwargs)
        stats = fe.SearchStats()
        with pytest.warns(RuntimeWarning, match=f"sets {name}="):
            found = fe.first_error_positions(model, batch, stats=stats, **kwargs)
    finally:
        setattr(model.generation_config, name, None)
    assert found == plain and stats.reused == 0


@pytest.mark.parametrize("reuse", [True, False])
def test_the_trainer_passes_its_reuse_setting_to_the_search(tmp_path, tokenizer, dataset, monkeypatch, reuse):
    """`OARConfig.first_error_reuse_greedy` reaches the search through the trainer's first-error path."""
    from conftest import make_args, make_trainer

    seen = []

    def spy(model, batch, **kwargs):
        seen.append(kwargs["reuse_greedy"])
        return {}

    monkeypatch.setattr(fe, "first_error_positions", spy)
    p_ids, p_mask = pad_texts(tokenizer, ["1+2=", "2+2="], "left")
    c_ids, c_mask = pad_texts(tokenizer, ["1+2=4 <answer>4</answer>", "2+2=4 <answer>4</answer>"], "right")
    args = make_args(tmp_path, credit="first-error", first_error_reuse_greedy=reuse)
    trainer = make_trainer(args, tokenizer, dataset, answer_check=lambda text, gold: gold in text)
    trainer._oar_inputs = [{"answer": "3"}, {"answer": "4"}]
    output = {"prompt_ids": p_ids, "prompt_mask": p_mask, "completion_ids": c_ids, "completion_mask": c_mask,
              "advantages": torch.tensor([-1.0, 1.0])}  # fmt: skip
    trainer._assign_credit(output, c_mask.bool())
    assert seen == [reuse]
