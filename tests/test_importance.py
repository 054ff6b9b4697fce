"""Importance scorers against slow, obviously-correct references (oar_rl.importance)."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import gc
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import pad_texts
from float64 import float64_copy
from oar_rl.answer_span import answer_span_mask, reasoning_mask, scored_positions
from oar_rl.credits import compute_importance
from oar_rl.importance import (
    entropy_importance,
    gradient_importance,
    perturbation_importance,
    random_importance,
)
from oar_rl.importance.gradient import row_noise, row_seeds
from oar_rl.model_parts import body_hidden
from oar_rl.probes import PROBES, build_probe_spec, probe_outcome
from oar_rl.tiny import tiny_qwen2


@pytest.fixture(scope="module")
def batch(tokenizer):
    """Left-padded prompts, right-padded completions of different lengths; spans, a no-span row, a
    single-token row and an empty row."""
    prompts = ["12+7=", "a?", "what is 3*4?", "hi", "q"]
    completions = [
        "so \\boxed{19}",  # span
        "x",  # single token, no span (LT fallback under AS probes)
        "3*4=12 \\boxed{12}!",  # span, a token after it
        "",  # no valid token
        "no tags",  # no span
    ]
    p_ids, p_mask = pad_texts(tokenizer, prompts, "left")
    c_ids, c_mask = pad_texts(tokenizer, completions, "right")
    ans = answer_span_mask(c_ids, c_mask, tokenizer, pattern="boxed")
    return p_ids, p_mask, c_ids, c_mask, ans


@pytest.fixture(scope="module")
def model64(tokenizer):
    """float64 end to end, for tight tolerances and finite differences (see tests/float64.py for the
    transformers quirks worked around; float32 eager, the real use, is tested too)."""
    return float64_copy(tiny_qwen2(len(tokenizer), seed=1, hidden_size=32))


# ---------------------------------------------------------------------------------------------------
# slow references: one full model(...) forward per sequence, probe from the full logits


def _ref_probe(logits, attn_row, P, comp_row, ans_row, probe):
    """('dist', log P) or ('joint', phi) from full logits (L, V) of one sequence."""
    if probe == "lt-logits" or not ans_row.any():
        q = int(attn_row.nonzero().max())
        return "dist", torch.log_softmax(logits[q], -1)
    ks = ans_row.nonzero().flatten()
    pos = P + ks - 1
    if probe == "as-mean":
        return "dist", torch.log_softmax(logits[pos].mean(0), -1)
    lp = torch.log_softmax(logits[pos], -1)
    return "joint", lp[torch.arange(len(ks)), comp_row[ks]].mean()


def _ref_div(a, b):
    kind, x = a
    y = b[1]
    if kind == "dist":
        return float((x.exp() * (x - y)).sum())
    return max(float(x - y), 0.0)


def _full_logits(model, ids, attn, softcap=None):
    with torch.no_grad():
        logits = model(input_ids=ids[None], attention_mask=attn[None]).logits[0]
    return torch.tanh(logits / softcap) * softcap if softcap else logits


def serial_oar_p(model, p_ids, p_mask, c_ids, c_mask, probe, ans, mask_id, softcap=None):
    """One plain model(...) forward per (row, token), each row alone and unpadded (as generated)."""
    scored = c_mask.bool() if probe == "lt-logits" else scored_positions(c_mask, ans)
    out = torch.zeros(c_ids.shape, dtype=torch.float64)
    for b in range(p_ids.shape[0]):
        pb, cb = p_ids[b][p_mask[b].bool()], c_ids[b][c_mask[b].bool()]
        ids = torch.cat([pb, cb])
        attn = torch.ones_like(ids)
        P, ans_b = pb.shape[0], ans[b][c_mask[b].bool()]
        clean = _ref_probe(_full_logits(model, ids, attn, softcap), attn, P, cb, ans_b, probe)
        for t in scored[b].nonzero().flatten().tolist():
            pert_ids = ids.clone()
            pert_ids[P + t] = mask_id
            logits = _full_logits(model, pert_ids, attn, softcap)
            out[b, t] = _ref_div(clean, _ref_probe(logits, attn, P, cb, ans_b, probe))
    return out


# ---------------------------------------------------------------------------------------------------
# OAR-P


@pytest.mark.parametrize("probe", PROBES)
def test_oar_p_matches_serial_reference(probe, model64, batch):
    p_ids, p_mask, c_ids, c_mask, ans = batch
    ref = serial_oar_p(model64, p_ids, p_mask, c_ids, c_mask, probe, ans, mask_id=0)
    assert ref.abs().sum() > 0 and (ref[1] != 0).any()  # the single-token row has a score
    for bs in (1, 3, 10_000):
        got = perturbation_importance(
            model64, p_ids, p_mask, c_ids, c_mask, probe=probe, answer_mask=ans, batch_size=bs
        )
        assert got.dtype == torch.float32 and got.shape == c_ids.shape
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-9)
    assert (got[~c_mask.bool()] == 0).all() and (got[3] == 0).all()
    if probe != "lt-logits":  # span and later tokens are not scored
        assert (got[ans] == 0).all() and (got[2, -1] == 0)


def test_oar_p_float32_and_mask_token(tokenizer, batch):
    p_ids, p_mask, c_ids, c_mask, ans = batch
    model = tiny_qwen2(len(tokenizer), seed=2, hidden_size=32)
    ref = serial_oar_p(model, p_ids, p_mask, c_ids, c_mask, "lt-logits", ans, mask_id=7)
    got = perturbation_importance(model, p_ids, p_mask, c_ids, c_mask, mask_token_id=7, batch_size=4)
    # atol: a float32 KL of ~1e-6 is a sum of terms p·(log p − log q) with log-prob rounding ~1e-7 each
    torch.testing.assert_close(got.double(), ref, rtol=2e-3, atol=3e-7)
    default = perturbation_importance(model, p_ids, p_mask, c_ids, c_mask)  # pad id 0
    assert not torch.allclose(default, got)


def test_unverifiable_head_is_refused_and_peft_like_wrapper(model64, batch):
    """A config that claims a logit transform the model's forward does not apply (here soft-capping on a
    Qwen2, whose forward ignores it) cannot be verified: every scorer refuses, naming the architecture.
    Real soft-capped, scaled and absolute-position models are in tests/test_architectures.py."""
    p_ids, p_mask, c_ids, c_mask, _ = batch
    sub = (p_ids[:2], p_mask[:2], c_ids[:2], c_mask[:2])
    capped = copy.deepcopy(model64)
    capped.config.final_logit_softcapping = 0.5
    for fn in (perturbation_importance, gradient_importance, entropy_importance):
        msg = r"cannot verify the LM head of Qwen2ForCausalLM \(model_type='qwen2'\)"
        with pytest.raises(ValueError, match=msg):
            fn(capped, *sub)

    class Wrapper(nn.Module):  # what peft.PeftModel looks like to us
        def __init__(self, inner):
            super().__init__()
            self.base = inner
            self.config = inner.config

        def get_base_model(self):
            return self.base

        def get_input_embeddings(self):
            return self.base.get_input_embeddings()

    wrapped = perturbation_importance(Wrapper(model64), p_ids, p_mask, c_ids, c_mask)
    torch.testing.assert_close(wrapped, perturbation_importance(model64, p_ids, p_mask, c_ids, c_mask))


def test_oar_p_leaves_model_as_found(tokenizer, batch):
    p_ids, p_mask, c_ids, c_mask, _ = batch
    model = tiny_qwen2(len(tokenizer), seed=3)
    model.train()
    model.model.layers[0].eval()  # mixed modes must be restored per module
    modes = {n: m.training for n, m in model.named_modules()}
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    perturbation_importance(model, p_ids, p_mask, c_ids, c_mask)
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in model.parameters())


def _tracked_peak_mb(fn) -> float:
    """Peak resident-memory growth (MiB) while running fn, via the kernel's VmHWM reset (Linux)."""
    status = Path("/proc/self/status")

    def read(key):
        return int(re.search(rf"{key}:\s+(\d+)", status.read_text()).group(1)) / 1024

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # hand freed heap back, so growth is fn's own
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = read("VmRSS")
    fn()
    return read("VmHWM") - before


def test_oar_p_memory_is_bounded():
    """V = 32k, 200 completion tokens: full logits per copy would be R·L·V·4 bytes = 5.4 GB."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc/self/clear_refs to measure peak RSS")
    V, P, C = 32_000, 8, 200
    model = tiny_qwen2(V, seed=0, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1)
    g = torch.Generator().manual_seed(0)
    p_ids = torch.randint(4, V, (1, P), generator=g)
    c_ids = torch.randint(4, V, (1, C), generator=g)
    p_mask, c_mask = torch.ones_like(p_ids), torch.ones_like(c_ids)
    full_logits_mb = C * (P + C) * V * 4 / 2**20  # 5078 MiB
    result = {}

    def run():
        result["I"] = perturbation_importance(model, p_ids, p_mask, c_ids, c_mask, batch_size=64)

    peak = _tracked_peak_mb(run)
    assert (result["I"] >= 0).all() and (result["I"] > 0).any()
    bound = 256.0  # MiB: 5% of the full-logits footprint (measured ~135 MiB; 64 naive copies: ~1.7 GiB)
    assert peak < bound, (
        f"peak RSS growth {peak:.0f} MiB >= {bound} MiB (full logits: {full_logits_mb:.0f} MiB)"
    )


# ---------------------------------------------------------------------------------------------------
# OAR-G


def _positions(attn):
    """Positions counted from the first real token (what `generate` uses)."""
    return (attn.long().cumsum(-1) - 1).clamp(min=0)


def _row_objective(model, attn_row, P, comp_row, ans_row, probe, clean, noisy_row):
    """Row b's term of J, D(P_0 ‖ P_ε), from the full logits of model(inputs_embeds=...).

    J = Σ_rows and rows do not interact, so ∂J/∂e_{b,t} only needs row b's term.
    """
    logits = model(
        inputs_embeds=noisy_row[None], attention_mask=attn_row[None], position_ids=_positions(attn_row[None])
    ).logits[0]
    kind, x = clean
    _, y = _ref_probe(logits, attn_row, P, comp_row, ans_row, probe)
    return (x.exp() * (x - y)).sum() if kind == "dist" else 0.5 * (x - y) ** 2


@pytest.mark.parametrize("reasoning_only", [False, True])
@pytest.mark.parametrize("probe", PROBES)
def test_oar_g_matches_finite_differences(probe, reasoning_only, model64, batch, tokenizer):
    """OAR-G against central differences of J; with a reasoning mask the noise sits on the reasoning
    tokens alone (none on the answer's format or content) and only they are scored."""
    p_ids, p_mask, c_ids, c_mask, ans = batch
    sigma, seed = 1e-2, 123
    reasoning = reasoning_mask(c_ids, c_mask, tokenizer, pattern="boxed") if reasoning_only else None
    got = gradient_importance(
        model64,
        p_ids,
        p_mask,
        c_ids,
        c_mask,
        probe=probe,
        answer_mask=ans,
        reasoning_mask=reasoning,
        noise_std=sigma,
        generator=torch.Generator().manual_seed(seed),
    )
    P = p_ids.shape[1]
    ids, attn = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1)
    scored = c_mask.bool() if probe == "lt-logits" else scored_positions(c_mask, ans)
    noised = c_mask.bool()
    if reasoning_only:
        assert (scored & ~reasoning).any()  # the format tokens ("\\boxed{") were scored before
        scored, noised = scored & reasoning, reasoning
    assert (got[~scored] == 0).all() and (got[scored] > 0).all()
    with torch.no_grad():
        emb = model64.get_input_embeddings()(ids)  # (B, L, H)
        logits = model64(input_ids=ids, attention_mask=attn, position_ids=_positions(attn)).logits
        seeds = row_seeds(torch.Generator().manual_seed(seed), ids.shape[0])
        noise = torch.stack([row_noise(s, 1, c_ids.shape[1], emb.shape[-1])[0] for s in seeds]) * sigma
        noisy = emb.clone()
        noisy[:, P:] += (noise * noised[..., None]).double()
        # a few tokens of every scored row: first, last, and one in the middle
        pairs = []
        for b in scored.any(1).nonzero().flatten().tolist():
            ts = scored[b].nonzero().flatten().tolist()
            pairs += [(b, t) for t in sorted({ts[0], ts[len(ts) // 2], ts[-1]})]
        h = 1e-4
        for b, t in pairs:
            clean = _ref_probe(logits[b], attn[b], P, c_ids[b], ans[b], probe)
            d = torch.zeros_like(noisy[b])
            d[P + t] = emb[b, P + t] * h
            jp = _row_objective(model64, attn[b], P, c_ids[b], ans[b], probe, clean, noisy[b] + d)
            jm = _row_objective(model64, attn[b], P, c_ids[b], ans[b], probe, clean, noisy[b] - d)
            ref = abs(float(jp - jm) / (2 * h))  # |<dJ/de_t, e_t>| by central differences
            assert ref > 0
            assert abs(float(got[b, t]) - ref) <= 1e-5 * ref, (b, t, float(got[b, t]), ref)


def test_oar_g_state_determinism_and_chunking(tokenizer, batch):
    p_ids, p_mask, c_ids, c_mask, _ = batch
    model = tiny_qwen2(len(tokenizer), seed=4)
    model.train()
    model.model.norm.eval()
    modes = {n: m.training for n, m in model.named_modules()}
    model.lm_head.weight.requires_grad_(False)  # mixed requires_grad must survive
    flags = {n: p.requires_grad for n, p in model.named_parameters()}

    def run(seed, **kw):
        g = torch.Generator().manual_seed(seed)
        return gradient_importance(model, p_ids, p_mask, c_ids, c_mask, generator=g, **kw)

    a = run(0)
    assert all(p.grad is None for p in model.parameters())
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert torch.equal(a, run(0))
    assert not torch.allclose(a, run(1))
    # chunking changes only the rounding: compared in float64, where that is ~1e-16 relative (float32
    # results of two batch sizes differ by their own rounding, which depends on the CPU's kernels)
    m64 = float64_copy(model)
    a64 = gradient_importance(m64, p_ids, p_mask, c_ids, c_mask, generator=torch.Generator().manual_seed(0))
    for bs in (1, 2):
        got = gradient_importance(
            m64, p_ids, p_mask, c_ids, c_mask, generator=torch.Generator().manual_seed(0), batch_size=bs
        )
        torch.testing.assert_close(got, a64, rtol=1e-6, atol=0.0)
    with torch.no_grad():  # the trainer may call it from a no_grad region
        torch.testing.assert_close(run(0), a)
    assert (a[~c_mask.bool()] == 0).all() and (a[c_mask.bool()] > 0).all()
    zero = gradient_importance(model, p_ids, p_mask, c_ids, c_mask, noise_std=0.0)
    assert (zero == 0).all()


# ---------------------------------------------------------------------------------------------------
# baselines


def test_entropy_matches_full_logits(model64, batch):
    p_ids, p_mask, c_ids, c_mask, _ = batch
    P = p_ids.shape[1]
    ids, attn = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1)
    with torch.no_grad():
        logits = model64(input_ids=ids, attention_mask=attn).logits[:, P - 1 : -1] / 0.7  # predicts c_ids
    logp = torch.log_softmax(logits, -1)
    ref = -(logp.exp() * logp).sum(-1) * c_mask
    for chunk, bs in ((1, 1), (7, 2), (4096, None)):
        got = entropy_importance(
            model64, p_ids, p_mask, c_ids, c_mask, chunk_size=chunk, batch_size=bs, temperature=0.7
        )
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), ref, rtol=1e-6, atol=1e-6)
    assert (got[~c_mask.bool()] == 0).all()


def test_random_importance():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    a = random_importance(mask, generator=torch.Generator().manual_seed(0))
    assert a.dtype == torch.float32
    assert ((a[mask.bool()] >= 0) & (a[mask.bool()] < 1)).all() and (a[mask.bool()] > 0).all()
    assert (a[~mask.bool()] == 0).all()
    assert torch.equal(a, random_importance(mask.bool(), generator=torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="0/1"):
        random_importance(mask * 3)


# ---------------------------------------------------------------------------------------------------
# dispatcher and bad input


def test_compute_importance_dispatch_and_rows(model64, batch):
    p_ids, p_mask, c_ids, c_mask, ans = batch
    full = compute_importance(
        "oar-p", model64, p_ids, p_mask, c_ids, c_mask, probe="as-mean", answer_mask=ans
    )
    torch.testing.assert_close(
        full, perturbation_importance(model64, p_ids, p_mask, c_ids, c_mask, probe="as-mean", answer_mask=ans)
    )
    rows = torch.tensor([True, False, True, False, False])
    part = compute_importance(
        "oar-p", model64, p_ids, p_mask, c_ids, c_mask, rows=rows, probe="as-mean", answer_mask=ans
    )
    torch.testing.assert_close(part[rows], full[rows], rtol=1e-5, atol=1e-9)
    assert (part[~rows] == 0).all()
    ent = compute_importance("entropy", model64, p_ids, p_mask, c_ids, c_mask)
    torch.testing.assert_close(ent, entropy_importance(model64, p_ids, p_mask, c_ids, c_mask))
    rnd = compute_importance("random", model64, p_ids, p_mask, c_ids, c_mask, generator=torch.Generator())
    assert rnd.shape == c_ids.shape
    g = compute_importance("oar-g", model64, p_ids, p_mask, c_ids, c_mask, generator=torch.Generator())
    assert g.shape == c_ids.shape
    with pytest.raises(ValueError, match="kind"):
        compute_importance("oar_p", model64, p_ids, p_mask, c_ids, c_mask)
    with pytest.raises(ValueError, match="rows"):
        compute_importance("oar-p", model64, p_ids, p_mask, c_ids, c_mask, rows=torch.ones(5))


SCORERS = {
    "oar-p": perturbation_importance,
    "oar-g": gradient_importance,
    "entropy": entropy_importance,
}


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_bad_batches(name, model64, batch):
    fn = SCORERS[name]
    p_ids, p_mask, c_ids, c_mask, _ = batch
    cases = [
        ((p_ids, p_mask[:, 1:], c_ids, c_mask), "prompt_mask shape"),
        ((p_ids, p_mask, c_ids, c_mask[:, 1:]), "completion_mask shape"),
        ((p_ids[:2], p_mask[:2], c_ids, c_mask), "batch size"),
        ((p_ids.float(), p_mask, c_ids, c_mask), "integer"),
        ((p_ids, p_mask, c_ids[0], c_mask[0]), "2-D"),
        ((p_ids, p_mask, c_ids, c_mask * 2), "0/1"),
        ((p_ids, p_mask * 0.5, c_ids, c_mask), "0/1"),
        ((p_ids, p_mask, c_ids + 1000, c_mask), r"\[0, 101\)"),
    ]
    for args, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn(model64, *args)


def test_bad_options(tokenizer, model64, batch):
    p_ids, p_mask, c_ids, c_mask, ans = batch
    args = (p_ids, p_mask, c_ids, c_mask)
    for fn in (perturbation_importance, gradient_importance):
        with pytest.raises(ValueError, match="answer_mask"):
            fn(model64, *args, probe="as-mean")
        with pytest.raises(ValueError, match="probe"):
            fn(model64, *args, probe="last-token")
        with pytest.raises(ValueError, match="padding"):
            fn(model64, *args, probe="as-joint", answer_mask=torch.ones_like(ans))
        with pytest.raises(ValueError, match="shape"):
            fn(model64, *args, probe="as-joint", answer_mask=ans[:, :2])
    for bad in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="noise_std"):
            gradient_importance(model64, *args, noise_std=bad)
    with pytest.raises(ValueError, match="batch_size"):
        perturbation_importance(model64, *args, batch_size=0)
    with pytest.raises(ValueError, match="mask_token_id"):
        perturbation_importance(model64, *args, mask_token_id=10_000)
    nopad = tiny_qwen2(len(tokenizer), pad_token_id=None)
    with pytest.raises(ValueError, match="pad_token_id"):
        perturbation_importance(nopad, *args)
    assert perturbation_importance(nopad, *args, mask_token_id=0).shape == c_ids.shape
    with pytest.raises(ValueError, match="temperature"):
        entropy_importance(model64, *args, temperature=0.0)
    with pytest.raises(ValueError, match="chunk_size"):
        entropy_importance(model64, *args, chunk_size=0)
    with pytest.raises(RuntimeError, match="inference_mode"), torch.inference_mode():
        gradient_importance(model64, *args)


def test_degenerate_batches(model64, batch):
    """No valid token anywhere, span at the first token: documented all-zero results."""
    p_ids, p_mask, c_ids, c_mask, ans = batch
    empty = torch.zeros_like(c_mask)
    for fn in (perturbation_importance, gradient_importance, entropy_importance):
        assert (fn(model64, p_ids, p_mask, c_ids, empty) == 0).all()
    first = torch.zeros_like(ans)
    first[:, 0] = c_mask[:, 0].bool()  # every span starts at token 0: nothing before it is scored
    for fn in (perturbation_importance, gradient_importance):
        out = fn(model64, p_ids, p_mask, c_ids, c_mask, probe="as-mean", answer_mask=first)
        assert (out[first.any(1)] == 0).all() and (out[~first.any(1)][c_mask[~first.any(1)].bool()] > 0).all()


@pytest.mark.parametrize("probe", PROBES)
def test_clean_probe_equals_plain_forward(probe, tokenizer, batch):
    """float32 eager, the real configuration: the body+gathered-head probe equals the probe taken from
    a plain model(input_ids, attention_mask) forward (same positions, same left-padding handling)."""
    p_ids, p_mask, c_ids, c_mask, ans = batch
    model = tiny_qwen2(len(tokenizer), seed=5, hidden_size=32)
    P = p_ids.shape[1]
    ids, attn = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1)
    spec = build_probe_spec(P, attn, c_ids, None if probe == "lt-logits" else ans.bool(), probe)
    with torch.no_grad():
        got = probe_outcome(model, body_hidden(model, attn, input_ids=ids), spec)
        logits = model(input_ids=ids, attention_mask=attn).logits
    for b in range(ids.shape[0]):
        kind, ref = _ref_probe(logits[b], attn[b], P, c_ids[b], ans[b], probe)
        if kind == "dist":
            torch.testing.assert_close(got.logp[b], ref, rtol=1e-5, atol=1e-5)
        else:
            torch.testing.assert_close(got.phi[b], ref, rtol=1e-5, atol=1e-6)


def test_oar_g_with_checkpointing_and_frozen_params(tokenizer, batch):
    """Gradient checkpointing on and every parameter frozen (PEFT-like): same scores, no grads."""
    p_ids, p_mask, c_ids, c_mask, _ = batch
    model = tiny_qwen2(len(tokenizer), seed=6)

    def run():
        g = torch.Generator().manual_seed(0)
        return gradient_importance(model, p_ids, p_mask, c_ids, c_mask, generator=g)

    ref = run()
    model.gradient_checkpointing_enable()
    model.train()
    for p in model.parameters():
        p.requires_grad_(False)
    torch.testing.assert_close(run(), ref)
    assert model.training and all(not p.requires_grad and p.grad is None for p in model.parameters())


def test_zero_width_prompt_rejected(model64, batch):
    _, _, c_ids, c_mask, _ = batch
    empty = torch.zeros(c_ids.shape[0], 0, dtype=torch.long)
    for fn in SCORERS.values():
        with pytest.raises(ValueError, match="width 0"):
            fn(model64, empty, empty, c_ids, c_mask)


# ---------------------------------------------------------------------------------------------------
# defects found on real architectures (issue 9)


def _random_batch(B, prompt_lens, comp_len, V=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    P = max(prompt_lens)
    p_ids = torch.zeros(B, P, dtype=torch.long)
    p_mask = torch.zeros(B, P, dtype=torch.long)
    for b, n in enumerate(prompt_lens):
        p_ids[b, P - n :] = torch.randint(4, V, (n,), generator=g)
        p_mask[b, P - n :] = 1
    c_ids = torch.randint(4, V, (B, comp_len), generator=g)
    return p_ids, p_mask, c_ids, torch.ones_like(c_ids)


def test_oar_g_unit_scale_embeddings_no_zero_rows_and_batch_size_free():
    """Gemma2 (embeddings scaled by sqrt(H): unit RMS) at the default σ = 1e-3: the KL is ~1e-8 and
    rounds negative for many rows. Clamping it at 0 zeroed those rows (16 of 32 in the issue)."""
    from arch_models import tiny_model

    # Hub-like 0.02 weights (near-uniform probes, tiny KL); embeddings N(0, 1/H), times sqrt(H): unit RMS
    model = tiny_model("gemma2", seed=0, scale=0.02, embed_std=32**-0.5)
    batch = _random_batch(32, [3 + b % 5 for b in range(32)], 6)
    a = gradient_importance(model, *batch, generator=torch.Generator().manual_seed(0))
    zero_rows = int((a.sum(dim=1) == 0).sum())
    assert zero_rows == 0, f"{zero_rows} of 32 rows came back all-zero"  # main: 14 of 32
    assert (a > 0).all()
    # batch size changes only the rounding. In float32 these scores are mostly rounding (the KL is
    # ~1e-8), so two batch sizes are compared on a float64 copy, where rounding is ~1e-16 relative.
    m64 = float64_copy(model)
    a64 = gradient_importance(m64, *batch, generator=torch.Generator().manual_seed(0))
    assert (a64 > 0).all()
    for bs in (1, 5):
        b = gradient_importance(m64, *batch, generator=torch.Generator().manual_seed(0), batch_size=bs)
        torch.testing.assert_close(b, a64, rtol=1e-6, atol=0.0)


def test_absolute_position_model_ignores_batch_neighbours():
    """GPT-2 adds learned absolute position embeddings: a row must be scored at the positions it was
    generated with (from its first real token), whatever left padding its neighbours force on it."""
    from arch_models import tiny_model

    model = float64_copy(tiny_model("gpt2", seed=0))  # float64: the two batches differ only in rounding
    alone = _random_batch(1, [3], 5, seed=1)  # (1, 3) prompt, (1, 5) completion
    other = _random_batch(1, [9], 5, seed=2)  # a neighbour with a 9-token prompt
    p_ids = torch.zeros(2, 9, dtype=torch.long)
    p_mask = torch.zeros(2, 9, dtype=torch.long)
    p_ids[0, 6:], p_mask[0, 6:] = alone[0][0], 1  # row 0 now sits behind 6 pads
    p_ids[1], p_mask[1] = other[0][0], 1
    together = (p_ids, p_mask, torch.cat([alone[2], other[2]]), torch.cat([alone[3], other[3]]))
    p1 = perturbation_importance(model, *alone, mask_token_id=3)
    p2 = perturbation_importance(model, *together, mask_token_id=3)
    torch.testing.assert_close(p2[0], p1[0], rtol=1e-6, atol=0.0)
    g1 = gradient_importance(model, *alone, noise_std=1e-2, generator=torch.Generator().manual_seed(0))
    g2 = gradient_importance(model, *together, noise_std=1e-2, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(g2[0], g1[0], rtol=1e-6, atol=0.0)


def test_oar_g_warns_when_noise_rounds_away_in_bf16():
    """Unit-scale bf16 embeddings keep 8 significant bits: σ = 1e-3 is below their resolution."""
    from arch_models import tiny_model

    model = tiny_model("gemma2", seed=0).to(torch.bfloat16)
    batch = _random_batch(2, [3, 4], 5)
    with pytest.warns(RuntimeWarning, match="rounds away"):
        gradient_importance(model, *batch, generator=torch.Generator().manual_seed(0))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradient_importance(
            model, *batch, noise_std=0.05, noise_scale="rms", generator=torch.Generator().manual_seed(0)
        )


def test_body_without_position_ids_is_refused(tokenizer, batch):
    """A body that cannot take positions cannot be run as the completion was generated: clear error."""
    p_ids, p_mask, c_ids, c_mask, _ = batch
    model = tiny_qwen2(len(tokenizer), seed=7)
    body = model.model
    original = body.forward

    def no_positions(input_ids=None, attention_mask=None, inputs_embeds=None, use_cache=None):
        return original(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds)

    body.forward = no_positions
    ids, attn = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1)
    with pytest.raises(ValueError, match=r"Qwen2ForCausalLM .* takes no position_ids"):
        body_hidden(model, attn, input_ids=ids)
