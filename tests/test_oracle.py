"""Counterfactual oracle (paper §5.1, Eq. 19) and causal-token recall."""

from __future__ import annotations

import pytest
import torch

from oar_rl.analysis.oracle import alternative_tokens, counterfactual_oracle
from oar_rl.analysis.recall_stats import causal_recall
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2


@pytest.fixture(scope="module")
def setup():
    tok = build_char_tokenizer()
    model = tiny_qwen2(len(tok), seed=3).double()
    return model, tok


def test_alternative_is_argmax_other_than_actual(setup):
    model, tok = setup
    prompt = torch.tensor(tok("12+3=")["input_ids"])
    completion = torch.tensor(tok("15 ok")["input_ids"])
    alt = alternative_tokens(model, prompt, completion)
    ids = torch.cat([prompt, completion])[None]
    logits = model(ids).logits[0, prompt.numel() - 1 : -1]  # full logits: fine for a 10-token reference
    for t in range(completion.numel()):
        ranked = logits[t].argsort(descending=True).tolist()
        want = ranked[1] if ranked[0] == int(completion[t]) else ranked[0]
        assert int(alt[t]) == want


def test_oracle_matches_serial_reference(setup):
    model, tok = setup
    prompt = torch.tensor(tok("Q:7*6?")["input_ids"])
    completion = torch.tensor(tok("ab1c2d")["input_ids"])

    def checker(text: str) -> bool:  # a deterministic "verifier" sensitive to the decoded suffix
        return sum(ch.isdigit() for ch in text) % 2 == 0

    got = counterfactual_oracle(model, tok, prompt, completion, checker, max_new_tokens=5, batch_size=4)
    alt = alternative_tokens(model, prompt, completion)
    original = checker(tok.decode(completion))
    for t in range(completion.numel()):  # one unbatched greedy decode per position
        seq = torch.cat([prompt, completion[:t], alt[t : t + 1]])[None]
        if int(alt[t]) in (tok.eos_token_id, tok.pad_token_id):
            text = tok.decode(completion[:t], skip_special_tokens=True)
        else:
            out = model.generate(
                input_ids=seq,
                attention_mask=torch.ones_like(seq),
                do_sample=False,
                max_new_tokens=5,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
            text = tok.decode(out[0, prompt.numel() :], skip_special_tokens=True)
        assert bool(got[t]) == (checker(text) != original), t


def test_oracle_positions_and_bad_input(setup):
    model, tok = setup
    prompt = torch.tensor(tok("1+1=")["input_ids"])
    completion = torch.tensor(tok("2")["input_ids"])
    labels = counterfactual_oracle(
        model, tok, prompt, completion, lambda s: s.strip() == "2", max_new_tokens=2
    )
    assert labels.tolist() == [True]  # any other first token breaks the exact answer "2"
    assert counterfactual_oracle(model, tok, prompt, completion[:0], lambda s: True).numel() == 0
    with pytest.raises(ValueError, match="1-D"):
        counterfactual_oracle(model, tok, prompt[None], completion, lambda s: True)
    with pytest.raises(ValueError, match="positions"):
        counterfactual_oracle(model, tok, prompt, completion, lambda s: True, positions=[3])
    with pytest.raises(ValueError, match="batch_size"):
        counterfactual_oracle(model, tok, prompt, completion, lambda s: True, batch_size=0)


def test_causal_recall_hand_case():
    # row 0: 10 tokens, pivots at 2 and 7; scores rank token 7 first, token 2 sixth
    scores = torch.tensor([[0.1, 0.2, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.0, 0.05]])
    labels = torch.zeros(1, 10, dtype=torch.bool)
    labels[0, [2, 7]] = True
    mask = torch.ones(1, 10, dtype=torch.bool)
    rec = causal_recall(scores, labels, mask, ks=(0.1, 0.5, 0.6, 1.0))
    # top-1: {7} -> 1/2 ; top-5: {7,6,5,4,3} -> 1/2 ; top-6 adds 2 -> 1 ; all -> 1
    assert rec == {0.1: 0.5, 0.5: 0.5, 0.6: 1.0, 1.0: 1.0}


def test_causal_recall_breaks_ties_at_random_in_expectation():
    """Tied scores: the exact mean over every order of the tokens (slow reference: all permutations used
    as the tie-breaker), not the earliest tokens first; a one-hot signal such as first-error's gets the
    labelled token plus chance for the rest."""
    import itertools

    gen = torch.Generator().manual_seed(3)
    ks = (0.2, 0.4, 0.5, 0.8, 1.0)
    for _ in range(20):
        C = 6
        scores = torch.randint(0, 3, (1, C), generator=gen).float()  # many ties
        labels = torch.rand(1, C, generator=gen) < 0.4
        labels[0, int(torch.randint(0, C, (1,), generator=gen))] = True
        mask = torch.ones(1, C, dtype=torch.bool)
        mask[0, C - 1] = bool(torch.rand(1, generator=gen) < 0.5)
        valid = [t for t in range(C) if mask[0, t]]
        want = dict.fromkeys(ks, 0.0)
        perms = list(itertools.permutations(valid))
        for perm in perms:  # ties broken by this order of the valid tokens
            order = sorted(valid, key=lambda t: (-float(scores[0, t]), perm.index(t)))
            pivots = [t for t in valid if labels[0, t]]
            for k in ks:
                keep = max(1, round(k * len(valid)))
                want[k] += sum(t in order[:keep] for t in pivots) / len(pivots) / len(perms)
        got = causal_recall(scores, labels, mask, ks)
        for k in ks:
            assert got[k] == pytest.approx(want[k], abs=1e-9)
    one_hot = torch.zeros(1, 10)
    one_hot[0, 9] = 1.0  # the signal's one token, the last; the row's label: the first token and the last
    labels = torch.zeros(1, 10, dtype=torch.bool)
    labels[0, [0, 9]] = True
    # top-2: token 9, then one of the 9 tied tokens: token 0 with probability 1/9
    assert causal_recall(one_hot, labels, torch.ones(1, 10, dtype=torch.bool), (0.2,))[0.2] == pytest.approx(
        (1 + 1 / 9) / 2
    )


def test_causal_recall_skips_rows_without_pivots_and_ignores_padding():
    scores = torch.tensor([[3.0, 2.0, 1.0, 9.0], [1.0, 2.0, 3.0, 4.0]])
    labels = torch.tensor([[False, False, True, True], [False, False, False, False]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    rec = causal_recall(scores, labels, mask, ks=(0.34, 1.0))
    # row 0: valid tokens 0..2 (the padded pivot at 3 does not count); round(.34*3)=1 keeps token 0
    assert rec == {0.34: 0.0, 1.0: 1.0}
    assert causal_recall(scores, labels & False, mask, ks=(0.5,)) == {0.5: 0.0}
    with pytest.raises(ValueError, match="ks"):
        causal_recall(scores, labels, mask, ks=(0.0,))
    with pytest.raises(ValueError, match="shape"):
        causal_recall(scores, labels[:, :2], mask)


def test_recall_difference_is_paired_and_its_interval_covers_it():
    """A − B equals the difference of the two recalls; a score against itself differs by exactly 0 with a
    zero-width interval (pairing cancels what the two share); the unpaired bands would not be zero-width."""
    from oar_rl.analysis.recall_stats import recall_difference, recall_interval

    gen = torch.Generator().manual_seed(0)
    labels = torch.rand(40, 12, generator=gen) < 0.2
    mask = torch.ones(40, 12, dtype=torch.bool)
    good = labels.float() + 0.8 * torch.rand(40, 12, generator=gen)  # pivots mostly on top
    noise = torch.rand(40, 12, generator=gen)
    ks = (0.1, 0.3, 0.5)
    diff = recall_difference(good, noise, labels, mask, ks, seed=1)
    ra, rb = causal_recall(good, labels, mask, ks), causal_recall(noise, labels, mask, ks)
    for k in ks:
        d, lo, hi = diff[k]
        assert d == pytest.approx(ra[k] - rb[k], abs=1e-6)  # causal_recall averages in float32
        assert lo <= d <= hi and lo > 0
    assert all(v == (0.0, 0.0, 0.0) for v in recall_difference(noise, noise, labels, mask, ks).values())
    band = recall_interval(noise, labels, mask, ks)
    assert all(lo < rb[k] < hi for k, (lo, hi) in band.items())  # a real band around the estimate
    assert recall_difference(good, noise, labels & False, mask, ks) == {k: (0.0, 0.0, 0.0) for k in ks}
    with pytest.raises(ValueError, match="level"):
        recall_difference(good, noise, labels, mask, ks, level=1.0)


def _torch_percentile_reference(per_row: torch.Tensor, level: float, n_boot: int, seed: int):
    """The resampler every committed recall and blame table was made with (before SciPy): torch draws,
    torch.quantile (linear interpolation) of the resampled column means."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, per_row.shape[0], (n_boot, per_row.shape[0]), generator=gen)
    means = per_row[idx].mean(dim=1)
    return (
        torch.quantile(means, (1 - level) / 2, dim=0).tolist(),
        torch.quantile(means, 1 - (1 - level) / 2, dim=0).tolist(),
    )


@pytest.mark.parametrize(("rows", "level", "seed"), [(40, 0.95, 0), (7, 0.9, 3), (179, 0.95, 1234)])
def test_bootstrap_interval_is_scipys_percentile_over_the_committed_draws(rows, level, seed):
    """SciPy's percentile interval over the same torch draws equals the old resampler's to float rounding,
    so every committed recall/blame band reproduces; one row gives the row itself."""
    from oar_rl.analysis.recall_stats import bootstrap_interval

    per_row = torch.rand(rows, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    lo, hi = bootstrap_interval(per_row, level, 1000, seed)
    ref_lo, ref_hi = _torch_percentile_reference(per_row, level, 1000, seed)
    assert lo == pytest.approx(ref_lo, abs=1e-14) and hi == pytest.approx(ref_hi, abs=1e-14)
    assert all(a < b for a, b in zip(lo, hi, strict=True))
    one = per_row[:1]
    assert bootstrap_interval(one, level, 1000, seed) == (one[0].tolist(), one[0].tolist())
    with pytest.raises(ValueError, match="shape"):
        bootstrap_interval(per_row[0], level, 1000, seed)
