"""OAR-P with key/value prefix reuse equals full recomputation (and a serial reference) on several
architectures, with left-padded prompts of different lengths and right-padded completions."""

from __future__ import annotations

import warnings

import pytest
import torch

from float64 import float64_copy
from oar_rl.answer_span import scored_positions
from oar_rl.importance import perturbation_importance
from oar_rl.importance.prefix import clean_pass
from oar_rl.model_parts import position_ids_from_mask
from oar_rl.probes import build_probe_spec, outcome_divergence, prepare_batch, probe_outcome
from oar_rl.tiny import tiny_qwen2

V = 50


def _model(arch: str):
    import transformers as tf

    common = dict(vocab_size=V, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    if arch == "qwen2":
        return float64_copy(tiny_qwen2(V, seed=0, hidden_size=32, num_heads=4, num_kv_heads=2)).eval()
    torch.manual_seed(0)
    if arch == "llama":
        cfg = tf.LlamaConfig(**common, **small, num_key_value_heads=2, max_position_embeddings=128)
        model = tf.LlamaForCausalLM(cfg)
    elif arch == "qwen3":
        cfg = tf.Qwen3Config(
            **common, **small, num_key_value_heads=2, head_dim=8, max_position_embeddings=128
        )
        model = tf.Qwen3ForCausalLM(cfg)
    elif arch == "gpt2":  # absolute positions: the cached suffix must count them exactly as a full pass
        cfg = tf.GPT2Config(**common, n_embd=32, n_layer=2, n_head=4, n_positions=128)
        model = tf.GPT2LMHeadModel(cfg)
    elif arch == "gemma2":  # sliding-window layers: no reuse, must fall back (same result)
        cfg = tf.Gemma2Config(
            **common,
            **small,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=4,
            max_position_embeddings=128,
        )
        return tf.Gemma2ForCausalLM(cfg).eval()  # float32: eager Gemma2 in float64 gives NaN rows
    else:  # pragma: no cover
        raise AssertionError(arch)
    return float64_copy(model).eval()  # every step in float64: chunkings differ only by ~1e-16


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    B, P, C = 4, 6, 7
    prompt_ids = torch.randint(4, V, (B, P), generator=g)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    completion_ids = torch.randint(4, V, (B, C), generator=g)
    completion_mask = torch.ones(B, C, dtype=torch.long)
    for b, (pad_p, keep) in enumerate([(0, 7), (3, 5), (1, 2), (5, 6)]):  # left pads, completion lengths
        prompt_mask[b, :pad_p] = 0
        prompt_ids[b, :pad_p] = 0
        completion_mask[b, keep:] = 0
        completion_ids[b, keep:] = 0
    answer = torch.zeros(B, C, dtype=torch.bool)
    answer[0, 4:6] = True  # span after some reasoning tokens
    answer[3, 3] = True
    # rows 1 and 2 have no span: LT-Logits fallback
    return (prompt_ids, prompt_mask, completion_ids, completion_mask), answer


def _serial(model, batch, probe, answer, mask_token_id=1):
    """One forward per perturbed copy, full sequence, logits from the whole model (no chunking)."""
    sb = prepare_batch(model, *batch)
    P = sb.prompt_len
    scored = sb.completion_mask if probe == "lt-logits" else scored_positions(sb.completion_mask, answer)
    spec = build_probe_spec(
        P, sb.attention_mask, sb.input_ids[:, P:], answer if probe != "lt-logits" else None, probe
    )
    out = torch.zeros(scored.shape, dtype=torch.float64)
    with torch.no_grad():
        for b in range(scored.shape[0]):
            sub = spec.take(torch.tensor([b]))
            am = sb.attention_mask[b : b + 1]
            pos = position_ids_from_mask(am)  # the positions generate used (GPT-2 depends on them)
            h = model.get_decoder()(
                input_ids=sb.input_ids[b : b + 1], attention_mask=am, position_ids=pos
            ).last_hidden_state
            clean = probe_outcome(model, h, sub)
            for t in scored[b].nonzero().flatten().tolist():
                ids = sb.input_ids[b : b + 1].clone()
                ids[0, P + t] = mask_token_id
                h = model.get_decoder()(input_ids=ids, attention_mask=am, position_ids=pos).last_hidden_state
                out[b, t] = outcome_divergence(
                    clean, probe_outcome(model, h, sub), sub.kind, mode="perturbation"
                )[0]
    return out


@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3", "gpt2"])
@pytest.mark.parametrize("probe", ["lt-logits", "as-mean", "as-joint"])
def test_prefix_reuse_equals_full_recompute(arch, probe):
    model = _model(arch)
    batch, answer = _batch()
    kw = dict(probe=probe, answer_mask=answer if probe != "lt-logits" else None, mask_token_id=1)
    full = perturbation_importance(model, *batch, prefix_reuse=False, batch_size=64, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # these architectures must really take the cached path
        for bs in (1, 3, 64):  # chunks within one position, spanning positions, everything at once
            reuse = perturbation_importance(model, *batch, prefix_reuse=True, batch_size=bs, **kw)
            torch.testing.assert_close(reuse, full, rtol=1e-9, atol=1e-12)
    assert float(full.abs().sum()) > 0
    torch.testing.assert_close(full, _serial(model, batch, probe, answer).float(), rtol=1e-5, atol=1e-7)


def test_prefix_reuse_float32_close():
    model = tiny_qwen2(V, seed=1, hidden_size=32, num_heads=4, num_kv_heads=2)
    batch, _ = _batch(1)
    full = perturbation_importance(model, *batch, prefix_reuse=False, mask_token_id=1)
    reuse = perturbation_importance(model, *batch, prefix_reuse=True, batch_size=5, mask_token_id=1)
    # float32: the two paths round differently; KLs of near-equal distributions carry ~1e-7 absolute
    # rounding, so the tolerance is set at the scores' own scale (max 0.024 here)
    torch.testing.assert_close(reuse, full, rtol=1e-3, atol=1e-4 * float(full.max()))


def test_sliding_window_model_falls_back_with_a_warning():
    model = _model("gemma2")
    batch, _ = _batch()
    full = perturbation_importance(model, *batch, prefix_reuse=False, mask_token_id=1)
    with pytest.warns(RuntimeWarning, match="prefix reuse is not available"):
        from oar_rl.importance import prefix

        prefix._WARNED.discard(type(model).__name__)
        reuse = perturbation_importance(model, *batch, prefix_reuse=True, mask_token_id=1)
    torch.testing.assert_close(reuse, full, rtol=1e-6, atol=1e-9)


def test_clean_pass_cache_matches_input_length():
    model = _model("qwen2")
    batch, _ = _batch()
    sb = prepare_batch(model, *batch)
    with torch.no_grad():
        hidden, cache = clean_pass(model, sb.attention_mask, input_ids=sb.input_ids)
    assert cache is not None and cache.length == sb.input_ids.shape[1]
    assert cache.keys[0].shape[0] == sb.input_ids.shape[0] and hidden.shape[:2] == sb.input_ids.shape


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gpt2"])
@pytest.mark.parametrize("probe", ["lt-logits", "as-mean", "as-joint"])
def test_oar_g_prompt_cache_equals_full_noisy_pass(arch, probe):
    from oar_rl.importance import gradient_importance

    model = _model(arch)
    batch, answer = _batch()
    kw = dict(probe=probe, answer_mask=answer if probe != "lt-logits" else None, noise_std=1e-2)
    full = gradient_importance(
        model, *batch, prefix_reuse=False, generator=torch.Generator().manual_seed(0), **kw
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for bs in (None, 3):  # chunks sorted by last probe position must not change the result
            got = gradient_importance(
                model,
                *batch,
                prefix_reuse=True,
                batch_size=bs,
                generator=torch.Generator().manual_seed(0),
                **kw,
            )
            torch.testing.assert_close(got, full, rtol=1e-6, atol=1e-12)
    assert float(full.abs().sum()) > 0
