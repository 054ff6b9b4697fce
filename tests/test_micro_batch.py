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
def test_micro_batches_make_the_one_pass_update(warm, tmp_path, credit, monkeypatch):
    from oar_rl.data.arithmetic import load
    from oar_rl.study.training import train_policy

    # SGD: Adam's first step is about lr * sign(gradient), which turns rounding-level gradient differences
    # on near-zero gradients into learning-rate-sized ones; SGD keeps them at rounding scale
    common = dict(credit=credit, seed=3, steps=1, prompts_per_step=2, num_generations=4, learning_rate=0.5,
                  max_completion_length=12, temperature=1.0, show_progress=False, optim="sgd")  # fmt: skip
    data = load("train", 8)
    from oar_rl.trainer import OARTrainer

    passes: list[int] = []  # rows of each forward/backward pass, as the trainer receives them
    real_step = OARTrainer.compute_loss

    def counting_step(self, model, inputs, *a, **k):
        passes.append(int(inputs["completion_ids"].shape[0]))  # the rows this loss pass sees
        return real_step(self, model, inputs, *a, **k)

    monkeypatch.setattr(OARTrainer, "compute_loss", counting_step)
    runs, seen = {}, {}
    for mb in (None, 2):
        passes.clear()
        model, hist, _ = train_policy(
            warm, data, varied_reward, workdir=tmp_path / str(mb), micro_batch=mb, **common
        )
        runs[mb] = (model, [h for h in hist if "loss" in h])
        seen[mb] = list(passes)
    assert seen == {None: [8], 2: [2, 2, 2, 2]}  # the micro-batched step really ran 4 passes of 2 rows
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


def test_passes_are_the_fewest_equal_ones_within_the_bound_and_protocol_only_when_set():
    from oar_rl.study.training import passes_per_step
    from oar_rl.tasks import get_task

    assert [passes_per_step(r, m) for r, m in ((64, 8), (4, 8), (168, 8), (7, 4))] == [8, 1, 21, 7]
    assert passes_per_step(120, 16) == 8 and passes_per_step(64, None) == 1 and passes_per_step(64, 64) == 1
    with pytest.raises(ValueError, match="micro_batch=0 must be >= 1"):
        passes_per_step(8, 0)
    with pytest.raises(ValueError, match="micro_batch=0 must be >= 1"):
        StudySettings(micro_batch=0)
    quick = PRESETS["quick"]
    assert "micro_batch" not in quick.resolved(get_task("wordproblems")).protocol()  # earlier studies hold
    regime = quick.with_scope(task="wordproblems-smollm2").resolved(get_task("wordproblems-smollm2"))
    assert regime.protocol()["micro_batch"] == 8


@pytest.mark.parametrize(
    ("credit", "extra", "needle"),
    [("entropy-80-20", {}, "top_entropy_quantile < 1"), ("none", {"loss_type": "bnpo"}, "loss_type 'bnpo'")],
)
def test_what_trl_computes_per_pass_is_refused_not_changed(warm, tmp_path, credit, extra, needle):
    """A top-entropy cut-off or the 'bnpo' token mean would be taken over each pass, not the step: another
    update, so micro-batching refuses it (and leaves it alone when the step is one pass)."""
    from oar_rl.data.arithmetic import load
    from oar_rl.study.training import train_policy

    common = dict(credit=credit, seed=0, steps=1, prompts_per_step=2, num_generations=2, learning_rate=1e-3,
                  max_completion_length=8, temperature=1.0, show_progress=False, **extra)  # fmt: skip
    with pytest.raises(
        ValueError, match=rf"micro_batch=2 splits each optimizer step into 2 passes.*{needle}"
    ):
        train_policy(warm, load("train", 4), varied_reward, workdir=tmp_path / "a", micro_batch=2, **common)
    train_policy(warm, load("train", 4), varied_reward, workdir=tmp_path / "b", micro_batch=4, **common)
