"""Exact float64 copies of models: references for equality tests and `oar-rl gpu-check`'s precision check.

Two float32 results computed with different batch sizes differ by their own rounding: the reductions
inside a matrix product run in an order that depends on the batch shape and on the CPU's kernels, so
an absolute tolerance far below the values' rounding error passes on one machine and fails on another.
Such tests compare float64 results instead, where rounding is ~1e-16 relative and a tolerance of
1e-6 relative still catches any real difference (a noise draw keyed per chunk instead of per row moves
scores by O(1)).

transformers 5.23 keeps two float32 steps inside a `.double()` model, fixed here:
- eager attention in float64 turns left-padded rows into NaN (a padded query sees only keys masked
  at float64's most negative value, the sum overflows to -inf, and softmax of all -inf is NaN, which
  then leaks into real rows through 0 × NaN): SDPA is used, or, for an architecture without SDPA
  (Gemma2), its own eager attention with the padded queries' NaN outputs set to 0;
- Qwen2/Llama/Gemma RMSNorm compute in float32 whatever the input dtype: an exact float64 forward is
  patched in (Gemma's norms scale by 1 + weight).
"""

from __future__ import annotations

import copy
import sys
import types

import torch
from transformers import AttentionInterface


def _rms64(self, x):
    eps = getattr(self, "variance_epsilon", getattr(self, "eps", 1e-6))
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rms64_gemma(self, x):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * (1.0 + self.weight)


def float64_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of `model` (the original is untouched) with every step in float64."""
    m = copy.deepcopy(model).double()
    try:
        m.set_attn_implementation("sdpa")
    except ValueError:  # no SDPA for this architecture (Gemma2)
        eager = sys.modules[type(model).__module__].eager_attention_forward

        def eager_padded_queries_zero(module, *args, **kwargs):
            out, weights = eager(module, *args, **kwargs)
            return torch.nan_to_num(out, nan=0.0), weights

        name = f"eager64-{type(model).__name__}"
        AttentionInterface.register(name, eager_padded_queries_zero)
        m.set_attn_implementation(name)
    for mod in m.modules():
        name = type(mod).__name__
        if name.endswith("RMSNorm"):
            mod.forward = types.MethodType(_rms64_gemma if name.startswith("Gemma") else _rms64, mod)
    return m
