"""The embedded default model: SFT data layout, the on-disk cache (build, reuse, corruption), sampling."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from oar_rl import sampling, tiny
from oar_rl.data.arithmetic import ArithmeticConfig


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One cold build of the test recipe, shared by the cache tests."""
    cache = tmp_path_factory.mktemp("cache")
    model, tok, path = tiny.load_default_model(tiny.TEST_RECIPE, cache_dir=cache, progress=False)
    return cache, model, tok, path


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_recipe_hash_tracks_every_part():
    base = tiny.TEST_RECIPE
    variants = [
        replace(base, task=ArithmeticConfig(max_value=31)),
        replace(base, model=replace(base.model, hidden_size=48)),
        replace(base, sft=replace(base.sft, learning_rate=1e-3)),
        replace(base, format_version=base.format_version + 1),
    ]
    hashes = {base.hash(), *(v.hash() for v in variants)}
    assert len(hashes) == 1 + len(variants)
    assert base.hash() == replace(base).hash()
    assert tiny.DEFAULT_RECIPE.hash() != base.hash()


def test_bad_sft_spec():
    with pytest.raises(ValueError, match="steps"):
        tiny.SFTSpec(steps=0)
    with pytest.raises(ValueError, match="learning_rate"):
        tiny.SFTSpec(learning_rate=0.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        tiny.SFTSpec(steps=5, warmup_steps=6)


def test_sft_examples_mask_prompt_and_pad():
    tok = tiny.build_char_tokenizer()
    ids, mask, labels = tiny.sft_examples(tok, ["Hi 1+2.", "Q."], ["=3<answer>3</answer>", "ab"])
    assert ids.shape == mask.shape == labels.shape == (2, 7 + 20 + 1)
    # Row 0: 7 prompt chars (label -100), 20 solution chars + EOS (labels = ids), no padding.
    assert labels[0, :7].tolist() == [-100] * 7
    assert labels[0, 7:].tolist() == ids[0, 7:].tolist()
    assert ids[0, -1].item() == tok.eos_token_id and mask[0].all()
    assert tok.decode(ids[0, 7:27].tolist()) == "=3<answer>3</answer>"
    # Row 1: "Q." + "ab" + EOS, then right padding with label -100 and mask 0.
    assert labels[1, :2].tolist() == [-100, -100]
    assert labels[1, 2:5].tolist() == [*tok("ab", add_special_tokens=False)["input_ids"], tok.eos_token_id]
    assert mask[1].tolist() == [1] * 5 + [0] * 23
    assert labels[1, 5:].eq(-100).all() and ids[1, 5:].eq(tok.pad_token_id).all()


def test_cache_build_reuse_and_env(built, monkeypatch, tmp_path):
    cache, model, tok, path = built
    assert path == cache / tiny.TEST_RECIPE.hash()
    assert (path / "OAR_RL_COMPLETE").is_file()
    assert json.loads((path / "oar_rl_recipe.json").read_text()) == tiny.TEST_RECIPE.to_dict()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no leftover temp dirs
    assert not model.training
    assert tok.pad_token_id == 0 and tok.eos_token_id == 3

    def no_build(*a, **k):
        raise AssertionError("a valid cache entry must not be rebuilt")

    monkeypatch.setattr(tiny, "build_model", no_build)
    again, _, path2 = tiny.load_default_model(tiny.TEST_RECIPE, cache_dir=cache, progress=False)
    assert path2 == path
    for k, v in _state(model).items():
        torch.testing.assert_close(again.state_dict()[k], v, rtol=0, atol=0)
    # $OAR_RL_CACHE picks the root when no cache_dir is given.
    monkeypatch.setenv("OAR_RL_CACHE", str(tmp_path / "env"))
    assert tiny.default_cache_dir() == tmp_path / "env" / "models"


@pytest.mark.parametrize("damage", ["marker", "weights", "recipe"])
def test_corrupted_cache_is_rebuilt(built, damage, monkeypatch):
    cache, model, _, path = built
    if damage == "marker":
        (path / "OAR_RL_COMPLETE").unlink()
    elif damage == "weights":
        weights = path / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])  # truncated, as after a crash mid-copy
    else:
        (path / "oar_rl_recipe.json").write_text("{not json")
    calls = []
    real = tiny.build_model

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(tiny, "build_model", counting)
    rebuilt, _, path2 = tiny.load_default_model(tiny.TEST_RECIPE, cache_dir=cache, progress=False)
    assert calls == [1] and path2 == path and (path / "OAR_RL_COMPLETE").is_file()
    # The build is seeded: the rebuilt model equals the first one exactly.
    for k, v in _state(model).items():
        torch.testing.assert_close(rebuilt.state_dict()[k], v, rtol=0, atol=0)


def test_interrupted_build_leaves_no_entry(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tiny, "build_model", boom)
    with pytest.raises(KeyboardInterrupt):
        tiny.load_default_model(tiny.TEST_RECIPE, cache_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_generation_is_seeded_and_restores_mode(built):
    _, model, tok, _ = built
    prompts = ["Compute 1+2+3.", "What is 4*5-6?"]
    model.train()
    a = sampling.generate_completions(model, tok, prompts, temperature=1.0, max_new_tokens=10, seed=3)
    b = sampling.generate_completions(model, tok, prompts, temperature=1.0, max_new_tokens=10, seed=3)
    assert model.training
    model.eval()
    assert a == b and all(len(x) <= 10 for x in a)
    g1 = sampling.generate_completions(model, tok, prompts, temperature=0.0, max_new_tokens=10)
    g2 = sampling.generate_completions(
        model, tok, prompts[::-1], temperature=0.0, max_new_tokens=10, batch_size=1
    )
    assert g1 == g2[::-1]  # greedy does not depend on batching or left padding
    with pytest.raises(ValueError, match="temperature"):
        sampling.generate_completions(model, tok, prompts, temperature=-1.0)


def test_accuracy_counts_checked_completions(built, monkeypatch):
    _, model, tok, _ = built
    fake = ["<answer>6</answer>", "<answer>7</answer>", "<answer>14</answer>", "nope"]
    monkeypatch.setattr(sampling, "generate_completions", lambda *a, **k: list(fake))
    # Two problems x two samples: answers 6, 6, 14, 14 -> matches at 0 and 2.
    assert sampling.accuracy(model, tok, ["p1", "p2"], ["6", "14"], samples=2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="samples"):
        sampling.accuracy(model, tok, ["p1"], ["6"], samples=0)


def test_unwritable_cache_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OSError, match="OAR_RL_CACHE"):
        tiny.load_default_model(tiny.TEST_RECIPE, cache_dir=blocker / "models", progress=False)


def test_auto_tokenizer_on_a_saved_qwen2_dir_gives_the_same_ids(tmp_path):
    # transformers forces Qwen2Tokenizer (byte-level BPE) on every qwen2 checkpoint loaded with AutoTokenizer,
    # as TRL and `oar-rl eval` do; the char tokenizer must survive that rebuild (a plain ' ' entry did not:
    # spaces vanished, "Find 1+24-8." reached the model as "Find1+24-8.").
    from transformers import AutoTokenizer

    from oar_rl.data.arithmetic import load

    tok = tiny.build_char_tokenizer()
    tiny.tiny_qwen2(len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    auto = AutoTokenizer.from_pretrained(tmp_path)
    ds = load("eval", 20)
    texts = [
        tiny.ALPHABET,
        "Find 1+24-8.\n\tok",
        *(p + s for p, s in zip(ds["prompt"], ds["solution"], strict=True)),
    ]
    for text in texts:
        ids = [4 + tiny.ALPHABET.index(c) for c in text]  # specials 0-3, then the alphabet in order
        assert tok(text)["input_ids"] == ids
        assert auto(text)["input_ids"] == ids
        assert auto.decode(ids) == text == tok.decode(ids)
    assert (auto.pad_token_id, auto.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)
    with pytest.raises(ValueError, match="ASCII"):
        tiny.build_char_tokenizer("abé")
