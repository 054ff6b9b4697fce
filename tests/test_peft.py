"""LoRA (PEFT) with OAR-G and OAR-P, with and without gradient checkpointing: two CPU steps each.

Checked: only the adapter weights change; the importance the trainer computes is that of the adapted
policy (recomputed after the step, it equals the adapted model's scores and differs from the base
model's, i.e. with the adapter disabled); no `.grad` is left by the scoring passes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from datasets import Dataset

from conftest import PROMPTS, digit_reward, make_args
from oar_rl import credits
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2
from oar_rl.trainer import OARTrainer

peft = pytest.importorskip("peft")


@pytest.mark.parametrize("gradient_checkpointing", [False, True], ids=["plain", "ckpt"])
@pytest.mark.parametrize("credit", ["oar-g", "oar-p"])
def test_lora_two_steps_train_only_the_adapter_on_adapted_importance(
    tmp_path, monkeypatch, credit, gradient_checkpointing
):
    tokenizer = build_char_tokenizer()
    args = make_args(
        tmp_path, credit=credit, learning_rate=0.05, gradient_checkpointing=gradient_checkpointing
    )
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = OARTrainer(
        model=tiny_qwen2(len(tokenizer), seed=0),
        reward_funcs=digit_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        processing_class=tokenizer,
        peft_config=lora,
    )
    assert isinstance(trainer.model, peft.PeftModel)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}

    scorer = credits.CREDIT_MODES[credit].scorer
    calls: list[dict[str, Any]] = []

    def spy(model, *batch, **kwargs):
        gens = kwargs.get("generator")
        states = [g.get_state() for g in gens] if gens else None
        out = scorer(model, *batch, **kwargs)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        calls.append(
            {"model": model, "batch": batch, "kwargs": kwargs, "states": states, "out": out, "grads": grads}
        )
        return out

    def rescore(rec, **extra):
        kw = dict(rec["kwargs"], **extra)
        if rec["states"] is not None:
            kw["generator"] = [torch.Generator().set_state(s) for s in rec["states"]]
        return scorer(rec["model"], *rec["batch"], **kw)

    assign = trainer._assign_credit

    def assign_then_rescore(output, mask):
        # after the trainer's scoring (its pass count is checked) and before the optimizer step
        credit_out = assign(output, mask)
        rec = calls[-1]
        rec["adapted"] = rescore(rec)
        with rec["model"].disable_adapter():
            rec["base"] = rescore(rec)
        return credit_out

    monkeypatch.setitem(
        credits.CREDIT_MODES, credit, dataclasses.replace(credits.CREDIT_MODES[credit], scorer=spy)
    )
    monkeypatch.setattr(trainer, "_assign_credit", assign_then_rescore)
    trainer.train()

    assert len(calls) == 2  # one scoring per generation batch
    for rec in calls:
        assert isinstance(rec["model"], peft.PeftModel)
        torch.testing.assert_close(rec["out"], rec["adapted"])  # deterministic given the generators
        assert rec["grads"] == []  # the input-gradient pass leaves no parameter gradient
    # after step 1 the adapter is no longer zero: the scores used are the adapted policy's, not the base's
    assert not torch.allclose(calls[1]["out"], calls[1]["base"])

    changed = {n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed, "no parameter changed"
    assert all("lora_" in n for n in changed), sorted(changed)
    assert any("lora_B" in n for n in changed)
    assert trainer.model.training  # scoring restored the training mode


def test_a_prompt_learning_adapter_is_refused_by_model_based_credit(tmp_path):
    """Prompt tuning adds virtual tokens in PeftModel.forward; the scorers run the base decoder without
    them, so they would score another policy: refused (rules without a model pass are unaffected)."""
    tokenizer = build_char_tokenizer()
    config = peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)

    def build(credit):
        return OARTrainer(
            model=tiny_qwen2(len(tokenizer), seed=0),
            reward_funcs=digit_reward,
            args=make_args(tmp_path, credit=credit),
            train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
            processing_class=tokenizer,
            peft_config=config,
        )

    with pytest.raises(ValueError, match=r"credit='oar-g' cannot score a PEFT prompt-learning adapter"):
        build("oar-g")
    assert isinstance(build("position").model, peft.PeftModel)
