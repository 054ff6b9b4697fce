"""Shared fixtures: one torch thread for the whole suite, a tiny saved Qwen2 checkpoint, a credit rule
registered for one test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from oar_rl.tiny import build_char_tokenizer, tiny_qwen2


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """The suite's models are tiny: one intra-op thread is faster and steadier than oversubscribed cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2 + char tokenizer saved like a Hub checkpoint (loaded back with from_pretrained)."""
    path = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_char_tokenizer()
    tiny_qwen2(len(tokenizer), seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# --------------------------------------------------------------------------------------------------
# shared helpers: the char tokenizer, padding, and a tiny OARTrainer on a few arithmetic prompts
# (import the plain helpers with `from conftest import ...`; the fixtures are found by name)
# --------------------------------------------------------------------------------------------------
PROMPTS = ["1+1=", "2+3=", "4+4=", "9-2=", "7*3=", "8+5=", "6-1=", "3*3="]
ANSWERS = ["2", "5", "8", "7", "21", "13", "5", "9"]


def digit_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """Deterministic toy reward: the fraction of digit characters in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def pad_texts(tok, texts: list[str], side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) of `texts`, padded on `side` ('left' or 'right') to the longest (>= 1)."""
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    W = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), W), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), W, dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(0, len(r)) if side == "right" else slice(W - len(r), W)
        ids[i, sl] = torch.tensor(r, dtype=torch.long)
        mask[i, sl] = 1
    return ids, mask


def make_args(tmp_path: Path, cls: type | None = None, **overrides: Any):
    """A two-step CPU `OARConfig` (or `cls`) for a tiny model: 4 prompts x 4 generations of 8 tokens."""
    from oar_rl.config import OARConfig

    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"),
        learning_rate=0.01,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        seed=0,
        gradient_checkpointing=False,
        save_strategy="no",
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    return (cls or OARConfig)(**kwargs)


def make_trainer(
    args, tokenizer, dataset, cls: type | None = None, reward=digit_reward, seed: int = 0, **kwargs: Any
):
    """An `OARTrainer` (or `cls`) on a fresh tiny random Qwen2 (`seed`); `kwargs` go to the trainer
    (e.g. token_roles)."""
    from oar_rl.trainer import OARTrainer

    model = tiny_qwen2(len(tokenizer), seed=seed)
    return (cls or OARTrainer)(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        **kwargs,
    )


@pytest.fixture(scope="module")
def tokenizer():
    """The embedded char tokenizer (one per test module)."""
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def dataset():
    """`PROMPTS` with their `ANSWERS` as a `datasets.Dataset`."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": PROMPTS, "answer": ANSWERS})


def register_fake_task(monkeypatch, name: str, warm_start_dir: Path):
    """A task named `name` in the registry for this test: prompts "<split><i>" answered "1", a reward of
    0, every completion correct, a stand-in warm start; for tests whose training is a fake."""
    from oar_rl import tasks
    from oar_rl.tasks import Task, WarmStart

    task = Task(
        name=name,
        description="fake",
        prompts=lambda split, n: [{"prompt": f"{split}{i}", "answer": "1"} for i in range(n)],
        reward=lambda completions, answer, **kw: [0.0] * len(completions),
        check=lambda text, answer: True,
        load_warm_start=lambda variant, cache_dir: WarmStart(object(), object(), warm_start_dir, "fakehash",
                                                             {"fake": True}),
    )  # fmt: skip
    tasks.get_task("arithmetic")  # registers the built-ins first
    monkeypatch.setitem(tasks._REGISTRY, name, task)
    return task


def hub_cache(root: Path, repo: str, commit: str, files: Path) -> None:
    """The Hugging Face cache's layout for `repo` at `commit` (refs/main points to it)."""
    entry = root / ("models--" + repo.replace("/", "--"))
    snap = entry / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in files.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(commit)


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache under tmp_path, offline (fill it with `hub_cache`)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def another_version(model_dir: Path) -> None:
    """Flip the last byte of the model's safetensors file: another version of the weights, same size."""
    weights = next(p for p in Path(model_dir).iterdir() if p.suffix == ".safetensors")
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))


@pytest.fixture
def rule():
    """`rule(name, scorer, **kw)` registers a credit rule for one test and removes it after
    (test_credit_rules.py wraps it: reshape defaults to "bilevel" there)."""
    from oar_rl import credits
    from oar_rl.credits import register_credit, unregister_credit

    names: list[str] = []

    def make(name, scorer, **kw):
        names.append(name)
        return register_credit(name, scorer, **kw)

    yield make
    for n in names:
        if n in credits.CREDIT_MODES:
            unregister_credit(n)
