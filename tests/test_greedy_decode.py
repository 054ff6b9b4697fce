"""first-error's cached greedy decode (`oar_rl.importance.greedy_decode`, issue 46) against `generate`.

- Token for token, every continuation from the rollouts' cache equals ``model.generate``'s greedy
  continuation of the same prefix run alone (one row, no padding), on the tiny models of the
  architectures oar-rl supports: prompts of different lengths (left padding), cuts anywhere from the
  empty completion to the whole, budgets that end rows early, an EOS inside the budget.
- It does not prefill: after the one teacher-forced pass every forward feeds one token per row, and rows
  leave the batch when they finish (fewer rows x steps than ``generate``).
- A model whose cache is not plain keys and values (sliding-window layers) gets no cache: ``generate``.
- On the long regime's shipped warm start, first-error locates the same tokens with the cached decode
  as with ``generate`` (the search before issue 46), on its own sampled wrong rollouts.
"""

from __future__ import annotations

import random

import pytest
import torch

from arch_models import tiny_model
from oar_rl.importance import first_error as fe
from oar_rl.importance import greedy_decode as gd

ARCHS = ("qwen2", "llama", "qwen3", "mistral", "phi3", "olmo2", "granite", "cohere", "gpt2")
EOS = 2


def _rollouts(seed: int, vocab: int = 96):
    """Six rows: prompts of 1-9 tokens, completions of 3-14 tokens (no EOS inside), as token lists."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(1, 9))] for _ in range(6)]
    comps = [[rng.randrange(3, vocab) for _ in range(rng.randint(3, 14))] for _ in range(6)]
    return prompts, comps


def _layout(prompts, comps, pad: int = 0):
    """(ids, attention mask, P): left-padded prompts of width P, right-padded completions."""
    P, C = max(map(len, prompts)), max(map(len, comps))
    ids = torch.full((len(prompts), P + C), pad, dtype=torch.long)
    att = torch.zeros_like(ids)
    for r, (p, c) in enumerate(zip(prompts, comps, strict=True)):
        ids[r, P - len(p) : P], att[r, P - len(p) : P] = torch.tensor(p), 1
        ids[r, P : P + len(c)], att[r, P : P + len(c)] = torch.tensor(c), 1
    return ids, att, P


def _generate(model, prefix: list[int], budget: int, eos: list[int]) -> list[int]:
    """``generate``'s greedy continuation of one unpadded prefix, cut after its first EOS."""
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([prefix]), attention_mask=torch.ones(1, len(prefix), dtype=torch.long),
            max_new_tokens=budget, do_sample=False, pad_token_id=0, eos_token_id=eos,
        )[0, len(prefix) :].tolist()  # fmt: skip
    cut = next((j + 1 for j, t in enumerate(out) if t in eos), len(out))
    return out[:cut]


@pytest.mark.parametrize("lean", [True, False], ids=["lean-step", "model-forward"])
@pytest.mark.parametrize("arch", ARCHS)
def test_cached_continuations_equal_generate_token_for_token(arch, lean, monkeypatch):
    """Each continuation, decoded with the lean step (Llama-shaped models) or the model's own forward."""
    monkeypatch.setattr(gd, "LEAN", lean)
    model = tiny_model(arch, seed=1)
    model.generation_config.eos_token_id = EOS
    prompts, comps = _rollouts(seed=len(arch))
    ids, att, P = _layout(prompts, comps)
    cache, _hidden = gd.rollout_cache(model, ids, att, P, batch_size=4)
    assert cache is not None, arch
    rng = random.Random(0)
    cuts = [sorted({0, len(c), rng.randint(1, len(c))}) for c in comps]  # none, all, one between
    items = [(r, n) for r in range(len(prompts)) for n in cuts[r]]
    budgets = [rng.choice([1, 3, 9, 16]) for _ in items]
    eos = [EOS]
    for second in (False, True):
        got = gd.continue_from_cache(model, cache, items, budgets, eos=eos, batch_size=5)
        stopped = 0
        for (r, n), budget, cont in zip(items, budgets, got, strict=True):
            want = _generate(model, prompts[r] + comps[r][:n], budget, eos)
            assert cont == want, (arch, r, n, budget, eos)
            stopped += len(cont) < budget
        if second:  # some row stopped at an EOS before its budget: the stop is exercised
            assert stopped >= 1
        else:  # a second EOS, as a generation config may add: a token some continuation writes later on
            eos = [EOS, next(c[2] for c in got if len(c) >= 3 and c[2] != EOS)]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_verified_drafts_give_generates_tokens_in_fewer_forwards(arch):
    """Continuing the same prefixes twice: the second time the first continuations are in the drafts'
    texts, so most tokens come several per forward (accepted drafts); every token is still generate's."""
    model = tiny_model(arch, seed=2)
    prompts, comps = _rollouts(seed=11)
    ids, att, P = _layout(prompts, comps)
    cache, _ = gd.rollout_cache(model, ids, att, P, batch_size=8)
    items = [(r, len(comps[r]) - 1) for r in range(len(prompts))]
    budgets = [24] * len(items)
    want = [_generate(model, prompts[r] + comps[r][:n], 24, [EOS]) for r, n in items]
    cost = [gd.DecodeCost(), gd.DecodeCost()]
    for c in cost:
        assert gd.continue_from_cache(model, cache, items, budgets, eos=[EOS], batch_size=16, cost=c) == want
    assert cost[0].forwards == max(map(len, want))  # the first time, no draft was accepted
    assert cost[1].forwards * 2 <= cost[0].forwards  # then several tokens per forward


def test_drafts_follow_the_latest_text_of_the_same_prompt():
    d = gd.Drafts(ngrams=(2,), length=3)
    d.add((1,), [5, 6, 7, 8, 9])
    d.add((2,), [5, 6, 0, 0])
    assert d.propose((1,), [4, 5, 6], most=10) == [7, 8, 9]
    assert d.propose((1,), [4, 5, 6], most=2) == [7, 8]
    assert d.propose((2,), [5, 6], most=10) == [0, 0]
    d.add((1,), [5, 6, 1, 5, 6, 2])
    assert d.propose((1,), [5, 6], most=10) == [1, 5, 6]  # the latest text, the n-gram's first place
    assert d.propose((3,), [5, 6], most=10) == [] and d.propose((1,), [6, 5], most=10) == []


def test_the_lean_step_serves_llama_shaped_models_only():
    from oar_rl.importance.decode_step import lean_step
    from oar_rl.tasks import get_task

    for arch in ("qwen2", "llama", "mistral"):
        assert lean_step(tiny_model(arch, seed=1)) is not None, arch
    for arch in ("qwen3", "gpt2", "gemma2", "olmo2"):
        assert lean_step(tiny_model(arch, seed=1)) is None, arch
    assert lean_step(get_task("wordproblems-long").load_warm_start("default", None).model) is not None


def test_the_cached_decode_feeds_one_token_per_row_and_drops_finished_rows(monkeypatch):
    monkeypatch.setattr(gd, "LEAN", False)  # the model's own forward, hooked
    model = tiny_model("qwen2", seed=1)
    prompts, comps = _rollouts(seed=3)
    ids, att, P = _layout(prompts, comps)
    cache, _ = gd.rollout_cache(model, ids, att, P, batch_size=8)
    widths: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kwargs: widths.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        items = [(r, len(comps[r]) // 2) for r in range(len(prompts))]
        budgets = [2, 4, 6, 8, 10, 12]
        cost = gd.DecodeCost()
        out = gd.continue_from_cache(model, cache, items, budgets, eos=[], batch_size=8, cost=cost)
    finally:
        hook.remove()
    assert [len(c) for c in out] == budgets  # no EOS: every row spends its budget
    assert all(w == 1 for _, w in widths)  # no prefill: one new token per row and forward
    assert [a for a, _ in widths] == [6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1]  # finished rows leave
    assert cost.tokens == sum(budgets)


def test_a_sliding_window_model_gets_no_cache_and_the_search_uses_generate():
    model = tiny_model("gemma2", seed=1)  # sliding_window=4: its cache keeps only the window
    prompts, comps = _rollouts(seed=5)
    ids, att, P = _layout(prompts, comps)
    cache, hidden = gd.rollout_cache(model, ids, att, P, batch_size=4)
    assert cache is None and hidden.shape[:2] == ids.shape


# ----------------------------------------------------------------------------------------------------
# the long regime's own rollouts: the located tokens do not change


@pytest.fixture(scope="module")
def long_rollouts():
    """16 rollouts (2 train problems x 8) of the long regime's shipped warm start at T = 1, as a training
    step samples them, and its wrong rows."""
    from oar_rl.analysis.blame import batch_of, sample_rollouts
    from oar_rl.data.wordproblems import split_problems
    from oar_rl.probes import prepare_batch
    from oar_rl.tasks import get_task

    task = get_task("wordproblems-long")
    ws = task.load_warm_start("default", None)
    problems = split_problems("train", 2, task.name)
    trajs = sample_rollouts(
        ws.model, ws.tokenizer, problems, 8, seed=46, max_new_tokens=task.max_completion_length
    )
    (p_ids, p_mask, c_ids, c_mask), answer, reasoning, _ = batch_of(
        trajs, ws.tokenizer, task.answer_pattern, "reasoning"
    )
    batch = prepare_batch(ws.model, p_ids, p_mask, c_ids, c_mask, answer, reasoning)
    rows = [i for i, t in enumerate(trajs) if not task.check(t.completion, t.answer)]
    return task, ws, trajs, batch, rows


def test_long_regime_first_errors_are_the_generate_searchs(long_rollouts):
    """The shipped long-regime warm start's own wrong rollouts: the cached decode locates exactly the
    tokens the `generate` search (before issue 46) locates, for every row, in fewer forwards."""
    task, ws, trajs, batch, rows = long_rollouts
    assert len(rows) >= 6
    found, stats = {}, {}
    for decode in fe.DECODES:
        stats[decode] = fe.SearchStats()
        with torch.no_grad():
            found[decode] = fe.first_error_positions(
                ws.model.eval(), batch, tokenizer=ws.tokenizer, gold=[t.answer for t in trajs],
                check=task.check, rows=rows, max_new_tokens=task.max_completion_length,
                stats=stats[decode], decode=decode,
            )  # fmt: skip
    assert found["cached"] == found["generate"] == found["generate-static"] == found["generate-lookup"]
    assert sum(t is not None for t in found["cached"].values()) >= 3  # real searches, not dropped rows
    g, c = stats["generate"], stats["cached"]
    assert (c.rounds, c.continuations, c.reused) == (g.rounds, g.continuations, g.reused)  # same questions
    assert c.forwards * 2 < g.forwards  # no prefill, and drafts verified several tokens per forward


def test_decode_is_checked():
    with pytest.raises(
        ValueError,
        match="decode must be one of cached, generate, generate-lookup, generate-static, got 'fast'",
    ):
        fe.check_decode("fast")
    with pytest.raises(ValueError, match="mode must be one of generate, generate-static, generate-lookup"):
        gd.generate_continuations(None, None, [], [], eos=[2], batch_size=1, mode="cached")


@pytest.mark.parametrize("mode", ["generate", "generate-static", "generate-lookup"])
def test_generate_modes_continue_as_generate_alone(mode):
    """Static cache and prompt lookup change how `generate` computes, not what greedy writes; the forwards
    are counted as the model runs them (one per new token without drafts, at most that with them)."""
    model = tiny_model("qwen2", seed=0).eval()
    prompts, comps = _rollouts(3)
    prefixes = [torch.tensor(p + c[:k]) for p, c in zip(prompts, comps, strict=True) for k in (0, 2)]
    budgets = [5, 9, 0, 7, 12, 3, 6, 1, 8, 4, 10, 2]
    tok = type("Tok", (), {"pad_token_id": 0, "eos_token_id": EOS})()
    cost = gd.DecodeCost()
    calls = []  # the options and batch size each generate call got: the mode must reach generate
    real = model.generate
    model.generate = lambda **k: calls.append(k) or real(**k)
    with torch.no_grad():
        got = gd.generate_continuations(
            model, tok, prefixes, budgets, eos=[EOS], batch_size=4, mode=mode, cost=cost
        )
    model.generate = real
    want = [
        _generate(model, x.tolist(), b, [EOS]) if b else [] for x, b in zip(prefixes, budgets, strict=True)
    ]
    assert got == want
    sizes = [c["input_ids"].shape[0] for c in calls]
    assert sizes == ([1] * 11 if mode == "generate-lookup" else [4, 4, 3])
    assert all(c.get("prompt_lookup_num_tokens") == (gd.LOOKUP_TOKENS if mode == "generate-lookup" else None)
               and c.get("cache_implementation") == ("static" if mode == "generate-static" else None)
               for c in calls)  # fmt: skip
    if mode == "generate-lookup":  # one row a call: a forward per token written, or fewer with drafts
        assert 0 < cost.forwards <= sum(len(c) for c in got)
    else:  # batches of 4, 4 and 3 rows (11 with a budget) each decoded to its longest row: a forward per
        # new position of a batch, `tokens` counting rows x positions
        assert 3 * cost.forwards <= cost.tokens <= 4 * cost.forwards and cost.forwards > 0
