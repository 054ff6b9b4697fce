"""Shared fixtures: one torch thread for the whole suite, and a tiny saved Qwen2 checkpoint."""

from __future__ import annotations

from pathlib import Path

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
