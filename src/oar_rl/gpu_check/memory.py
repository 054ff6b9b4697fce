"""gpu-check's memory check: the longest completion OAR-P's batched perturbations fit at the default bound.

OAR-P's memory is bounded by `OARConfig.perturbation_batch_size` (default 64): copies per forward pass
(:mod:`oar_rl.importance.perturbation`). Its largest pass is the first chunk of the prefix-reuse order:
the copies that perturb the earliest positions recompute (almost) the whole completion. So for each
completion length L in turn this runs exactly that chunk -- `rows` rows of a random batch at the bench's
``qwen2.5-0.5b`` shape (bf16, SDPA), the first ⌈64 / rows⌉ positions of each row perturbed, i.e. one
pass of 64 copies of ≈ L tokens after the clean rows' pass with its key/value cache -- and reads the peak
memory above the model's own. The first length that runs out of memory ends the search; a length that
runs without error "fits". Scoring a whole batch at a length that fits has the same peak (later chunks
are shorter) plus nothing but the (B, C) score tensor.

On the CPU the lengths are tiny and nothing runs out of memory: the check then only proves the path runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from oar_rl.gpu_check.benchlink import PeakMemory, qwen2_config
from oar_rl.gpu_check.sizes import Sizes
from oar_rl.importance import perturbation_importance

PROMPT_LEN = 32


def default_copies() -> int:
    """`OARConfig.perturbation_batch_size`'s default (read from the dataclass, not repeated here)."""
    from oar_rl.config import OARConfig

    return int(OARConfig.__dataclass_fields__["perturbation_batch_size"].default)


def _model(sizes: Sizes):
    from transformers import Qwen2ForCausalLM

    cfg, dtype = qwen2_config(sizes.memory_shape)
    with torch.random.fork_rng(devices=[]), torch.device(sizes.device):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg)  # initialised on the device: the weights do not matter here
    return model.to(getattr(torch, dtype)).eval(), cfg, dtype


def _trial(model, vocab: int, rows: int, length: int, copies: int, device: str) -> dict[str, Any]:
    g = torch.Generator().manual_seed(length)
    p_ids = torch.randint(4, vocab, (rows, PROMPT_LEN), generator=g).to(device)
    c_ids = torch.randint(4, vocab, (rows, length), generator=g).to(device)
    p_mask, c_mask = torch.ones_like(p_ids), torch.ones_like(c_ids)
    positions = torch.zeros(rows, length, dtype=torch.bool, device=device)
    positions[:, : math.ceil(copies / rows)] = True  # the first chunk: the earliest positions of every row
    memory = PeakMemory()
    memory.start()
    t0 = time.perf_counter()
    out = perturbation_importance(model, p_ids, p_mask, c_ids, c_mask, batch_size=copies, positions=positions)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    scored = out[positions]
    if not bool(torch.isfinite(scored).all()):
        raise AssertionError(f"OAR-P gave non-finite scores at completion length {length}")
    return {"completion_len": length, "result": "fits", "peak_mib": memory.peak(), "seconds": seconds}


def run_memory(sizes: Sizes, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Try each of `sizes.memory_lengths` in order until one runs out of memory."""
    model, cfg, dtype = _model(sizes)
    copies = default_copies()
    device_mib = None
    if sizes.device == "cuda":
        device_mib = torch.cuda.get_device_properties(0).total_memory / 2**20
    trials: list[dict[str, Any]] = []
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    for length in sizes.memory_lengths:
        if progress:
            progress(f"completion length {length}")
        try:
            trials.append(_trial(model, cfg.vocab_size, sizes.memory_rows, length, copies, sizes.device))
        except oom as exc:
            trials.append({"completion_len": length, "result": "out of memory", "message": str(exc)[:300]})
            break
        finally:
            if sizes.device == "cuda":
                torch.cuda.empty_cache()
    fits = [t["completion_len"] for t in trials if t["result"] == "fits"]
    ran_out = [t["completion_len"] for t in trials if t["result"] != "fits"]
    if ran_out:
        verdict = f"{ran_out[0]} ran out of memory"
    else:
        verdict = f"every length tried fits; {sizes.memory_lengths[-1]} + {PROMPT_LEN} is the longest tried"
    return {
        "model": f"random Qwen2 {sizes.memory_shape} ({dtype}, {cfg._attn_implementation})",
        "rows": sizes.memory_rows,
        "prompt_len": PROMPT_LEN,
        "copies": copies,
        "device_mib": device_mib,
        "trials": trials,
        "largest_fitting": max(fits) if fits else None,
        "first_out_of_memory": ran_out[0] if ran_out else None,
        "verdict": verdict,
    }
