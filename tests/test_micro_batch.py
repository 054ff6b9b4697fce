"""The study's micro-batched update (`train_policy(micro_batch=...)`, `StudySettings.micro_batch`): the same
optimizer step as one pass over the batch, up to float rounding, in passes of fewer rows."""

from __future__ import annotations

import pytest
import torch

from oar_rl.study.config import PRESETS, StudySettings


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    from oar_rl.tiny import TEST_RECIPE, load_default_model

    _, _, path = load_default_model(TEST_RECIPE, cache_dir=tmp_path_factory.mktemp("cache"), progress=False)
    return path


def varied_reward(completions, **kwargs):
    """A deterministic reward with variance within every group on the tiny model (exact answers are rare)."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


@pytest.mark.parametrize("credit", ["none", "oar-g"])
def test_micro_batches_make_the_one_pass_update(warm, tmp_path, credit):
    from oar_rl.data.arithmetic import load
    from oar_rl.study.training import train_policy

    # SGD: Adam's first step is about lr * sign(gradient), which turns rounding-level gradient differences
    # on near-zero gradients into learning-rate-sized ones; SGD keeps them at rounding scale
    common = dict(credit=credit, seed=3, steps=1, prompts_per_step=2, num_generations=4, learning_rate=0.5,
                  max_completion_length=12, temperature=1.0, show_progress=False, optim="sgd")  # fmt: skip
    data = load("train", 8)
    runs = {}
    for mb in (None, 2):
        model, hist, _ = train_policy(
            warm, data, varied_reward, workdir=tmp_path / str(mb), micro_batch=mb, **common
        )
        runs[mb] = (model, [h for h in hist if "loss" in h])
    (m1, h1), (m2, h2) = runs[None], runs[2]
    assert len(h1) == len(h2) == 1  # one optimizer step each (the micro-batched run: 4 passes)
    assert h1[0]["reward"] == h2[0]["reward"] and h1[0]["reward_std"] > 0  # the same completions
    assert h1[0]["grad_norm"] > 0 and h2[0]["grad_norm"] == pytest.approx(h1[0]["grad_norm"], rel=1e-4)
    moved = 0.0
    for (name, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters(), strict=True):
        torch.testing.assert_close(p2, p1, rtol=1e-5, atol=1e-6, msg=name)
        moved = max(moved, float((p1 - p2).detach().abs().max()))
    base = train_policy(
        warm, data, varied_reward, workdir=tmp_path / "lr0", **{**common, "learning_rate": 1e-12}
    )[0]
    step = max(
        float((p - q).detach().abs().max()) for p, q in zip(m1.parameters(), base.parameters(), strict=True)
    )
    assert step > 1e3 * max(moved, 1e-9)  # the update itself is far above the rounding the runs differ by


def test_micro_batch_must_divide_the_step_and_is_protocol_only_when_set(warm, tmp_path):
    from oar_rl.data.arithmetic import load
    from oar_rl.study.training import train_policy
    from oar_rl.tasks import exact_reward, get_task

    with pytest.raises(ValueError, match=r"micro_batch=3 must be >= 1 and divide the 8 rows"):
        train_policy(warm, load("train", 8), exact_reward, credit="none", seed=0, steps=1, prompts_per_step=2,
                     num_generations=4, learning_rate=1e-3, max_completion_length=8, temperature=1.0,
                     workdir=tmp_path, micro_batch=3, show_progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="micro_batch=0 must be >= 1"):
        StudySettings(micro_batch=0)
    quick = PRESETS["quick"]
    assert "micro_batch" not in quick.resolved(get_task("wordproblems")).protocol()  # earlier studies hold
    regime = quick.with_scope(task="wordproblems-smollm2").resolved(get_task("wordproblems-smollm2"))
    assert regime.protocol()["micro_batch"] == 8
