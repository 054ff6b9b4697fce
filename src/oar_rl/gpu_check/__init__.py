"""`oar-rl gpu-check`: one command that runs oar-rl's CUDA paths and reports what works.

Checks (each a module here; :mod:`oar_rl.gpu_check.cli` runs them in order and writes the report):

- ``environment``: declared dependency versions, every module importing, the device (:mod:`.environment`);
- ``train-qwen2`` / ``train-llama``: two `OARTrainer` steps per credit mode, SmolLM2-135M's shape, bf16,
  SDPA, ``oar/*`` metrics finite, peak memory per step (:mod:`.training`);
- ``scorer-precision`` / ``scorer-parity``: OAR-P and OAR-G in bf16 and float32 against float64, and the
  device against the CPU (:mod:`.scorers`);
- ``cost-table``: `oar-rl bench` at Qwen2.5-0.5B's shape, 1024-token completions, G = 8, beside paper
  Fig. 7 (:mod:`.cost`);
- ``oar-p-max-length``: the longest completion OAR-P's default 64-copy passes fit (:mod:`.memory`).

``--device cpu`` runs the same checks at a tiny size (tests/test_gpu_check.py), so the code the GPU runs
cannot rot. How to run it on a GPU machine without internet: docs/gpu.md.
"""

from oar_rl.gpu_check.cli import main

__all__ = ["main"]
