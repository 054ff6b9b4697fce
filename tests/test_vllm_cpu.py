"""TRL's vLLM path on a CPU: `OARTrainer(use_vllm=True, vllm_mode="colocate")` with vLLM's CPU build.

These tests need vLLM's CPU wheel, which pins another transformers than oar-rl's, so they run in their
own environment (`make test-vllm`, part of `make test`: `.venv-vllm`, built by `make setup-vllm`). In the
main environment vLLM is missing and they are skipped, unless OAR_RL_VLLM_TESTS=1 (set by
`make test-vllm`), where a missing vLLM is a failure.

Each test fails if the weight sync does nothing: the generations must change when perturbed weights are
pushed and come back with the originals, and after training steps vLLM's sampling log-probabilities must
agree with the policy's far more closely than in a run whose sync is a no-op.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics

import pytest
import torch
from datasets import Dataset

from conftest import PROMPTS, digit_reward, make_args
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2

if os.environ.get("OAR_RL_VLLM_TESTS") == "1":
    import vllm  # noqa: F401  -- required here: an ImportError fails the run
else:
    pytest.importorskip("vllm", reason="vLLM's CPU build is in its own environment: make test-vllm")

from test_trainer import GreedyPathCheck

ENGINE = {"use_vllm": True, "vllm_mode": "colocate", "vllm_enforce_eager": True, "vllm_dtype": "float32",
          "vllm_gpu_memory_utilization": 0.15, "vllm_max_model_length": 64}  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random Qwen2 saved for vLLM (head size 32: vLLM's CPU attention has no kernel for 16)."""
    path = tmp_path_factory.mktemp("tiny-vllm")
    tokenizer = build_char_tokenizer()
    tiny_qwen2(len(tokenizer), seed=0, hidden_size=64, num_heads=2, num_kv_heads=1).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@contextlib.contextmanager
def trainer_for(model_dir, tmp_path, credit: str = "none", **kwargs):
    """An OARTrainer generating with a colocated vLLM engine; the engine is freed on exit (vLLM sizes each
    engine's KV cache from the memory left, so a live engine would starve the next one)."""
    from oar_rl.trainer import OARTrainer

    args = make_args(tmp_path, credit=credit, **ENGINE)
    dataset = Dataset.from_dict({"prompt": PROMPTS, "answer": PROMPTS})
    trainer = OARTrainer(model=str(model_dir), reward_funcs=digit_reward, args=args, train_dataset=dataset,
                         processing_class=build_char_tokenizer(), **kwargs)  # fmt: skip
    try:
        yield trainer
    finally:
        del trainer.vllm_generation.llm
        gc.collect()


TEXT = "1+1=2, 3*3=9, 8-5=3"


def engine_logprobs(trainer) -> torch.Tensor:
    """vLLM's log-probability of each token of TEXT given the ones before it (the prompt's logprobs)."""
    from vllm import SamplingParams

    ids = trainer.processing_class(TEXT)["input_ids"]
    out = trainer.vllm_generation.llm.generate([{"prompt_token_ids": ids}],
                                               SamplingParams(max_tokens=1, prompt_logprobs=0),
                                               use_tqdm=False)[0]  # fmt: skip
    return torch.tensor([next(iter(d.values())).logprob for d in out.prompt_logprobs[1:]])


def policy_logprobs(trainer) -> torch.Tensor:
    ids = torch.tensor([trainer.processing_class(TEXT)["input_ids"]])
    with torch.no_grad():
        logits = trainer.model(input_ids=ids).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0]


def gap(trainer) -> float:
    return (engine_logprobs(trainer) - policy_logprobs(trainer)).abs().max().item()


def test_sync_pushes_the_policy_weights(model_dir, tmp_path):
    """Every weight perturbed (the tied embedding and LM head included), pushed, then the originals."""
    with trainer_for(model_dir, tmp_path) as trainer:
        from oar_rl.vllm_sync import weights_packed

        assert trainer.vllm_reload_sync and weights_packed(trainer.vllm_generation.llm)
        assert trainer.model.config.tie_word_embeddings
        base = engine_logprobs(trainer)
        assert gap(trainer) < 1e-4  # float32 on both sides: the two implementations' rounding
        saved = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in trainer.model.parameters():
                param.add_(0.5 * torch.randn(param.shape, generator=generator))
        assert gap(trainer) > 0.1  # the engine still holds the old weights
        trainer.vllm_generation.sync_weights()
        assert gap(trainer) < 1e-4, "the engine does not compute with the pushed weights"
        with torch.no_grad():
            for name, param in trainer.model.named_parameters():
                param.copy_(saved[name])
        trainer.vllm_generation.sync_weights()
        torch.testing.assert_close(engine_logprobs(trainer), base, rtol=0, atol=1e-5)


def logp_difference(trainer) -> float:
    """Mean |log p_vLLM − log p_policy| of the sampled tokens at the last step (TRL's own metric)."""
    rows = [h for h in trainer.state.log_history if "sampling/sampling_logp_difference/mean" in h]
    assert len(rows) == trainer.args.max_steps
    return rows[-1]["sampling/sampling_logp_difference/mean"]


def train(trainer) -> float:
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    moved = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p)]
    assert moved, "no weight moved"
    return logp_difference(trainer)


@pytest.fixture(scope="module")
def unsynced(model_dir, tmp_path_factory) -> float:
    """The control: GRPO for 2 steps with a sync that does nothing (vLLM keeps the initial weights)."""
    with trainer_for(model_dir, tmp_path_factory.mktemp("unsynced")) as trainer:
        trainer.vllm_generation.sync_weights = lambda: None
        return train(trainer)


@pytest.mark.parametrize("credit", ["none", "oar-g", "first-error", "oar-g+lora"])
def test_trains_two_steps_with_vllm_generation(model_dir, tmp_path, credit, unsynced):
    kwargs = {}
    if credit == "first-error":  # golds and a checker under which the search finds flips
        kwargs["answer_check"] = GreedyPathCheck(build_char_tokenizer())
    if credit.endswith("+lora"):  # TRL merges the adapter into the weights it pushes, then unmerges it
        from peft import LoraConfig

        credit = credit.removesuffix("+lora")
        kwargs["peft_config"] = LoraConfig(r=8, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0)
    with trainer_for(model_dir, tmp_path, credit=credit, **kwargs) as trainer:
        if credit == "first-error":
            kwargs["answer_check"].trainer = trainer
        synced = train(trainer)
        history = trainer.state.log_history
    # float32 on both sides: what is left is the two implementations' rounding, far below the unsynced gap
    assert synced < 1e-3, f"vLLM's log-probabilities are {synced:.2e} from the policy's after a step"
    assert unsynced > 20 * max(synced, 1e-6), (synced, unsynced)
    if credit == "first-error":
        searched = [h["oar/search_continuations"] for h in history
                    if "oar/search_continuations" in h]  # fmt: skip
        assert searched and statistics.fmean(searched) > 0, "first-error's search never ran"


def test_engine_start_keeps_the_trainers_torch_threads(model_dir, tmp_path):
    """vLLM's CPU worker sets torch to one thread and stubs out torch.set_num_threads; the trainer keeps
    its own threads and the real setter."""
    threads = torch.get_num_threads()
    setter = torch.set_num_threads
    try:
        setter(2)
        with trainer_for(model_dir, tmp_path):
            assert torch.get_num_threads() == 2
            assert torch.set_num_threads is setter
            torch.set_num_threads(1)
            assert torch.get_num_threads() == 1
    finally:
        setter(threads)
