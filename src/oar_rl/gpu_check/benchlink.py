"""The one place `oar-rl gpu-check` imports `oar-rl bench`'s modules (a move of those is a fix here only).

gpu-check reuses the bench rather than timing anything itself: the cost table is `oar-rl bench` at its
``qwen2.5-0.5b`` preset, and the other checks borrow the bench's synthetic tokenizer, its hash reward,
its Qwen2 presets and its peak-memory reader.
"""

from __future__ import annotations

from oar_rl.bench import cli as bench_command
from oar_rl.bench.shapes import SHAPES, hash_reward, qwen2_config, synthetic_tokenizer
from oar_rl.bench.steps import PeakMemory

__all__ = ["SHAPES", "PeakMemory", "bench_command", "hash_reward", "qwen2_config", "synthetic_tokenizer"]
