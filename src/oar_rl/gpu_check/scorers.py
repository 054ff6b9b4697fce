"""gpu-check's scorer checks: OAR-P and OAR-G in bf16 and float32 against float64, and device parity.

One batch of random tokens with real padding (:func:`oar_rl.gpu_check.sizes.padded_batch`) on a random
Qwen2 of the training check's shape. Three scorers:

- ``oar-p``: :func:`~oar_rl.importance.perturbation_importance`, LT-Logits, prefix reuse, 64 copies a pass;
- ``oar-g``: :func:`~oar_rl.importance.gradient_importance` at the paper's absolute σ = 1e-3;
- ``oar-g-rms``: the same at σ = 0.05 × RMS of the row's embeddings (what the README recommends for
  bf16 models).

OAR-G's noise comes from a CPU generator seeded alike for every run, so each comparison sees the same ε.

Precision: each scorer on the model in float32 and in bfloat16 against the same scorer on a float64 copy
(:func:`oar_rl.float64.float64_copy`, every step in float64) on the same device. Figures per scorer and
dtype: relative error ‖s − s₆₄‖₂ / ‖s₆₄‖₂ over the valid tokens, the mean per-row Spearman rank
correlation with s₆₄, and the top-20% overlap (share of s₆₄'s per-row top 20% tokens also in s's, pooled
over rows: :func:`oar_rl.importance.hybrid.topk_recall`; reported, not limited). A (scorer, dtype)
fails when it is outside :data:`PRECISION_LIMITS` (or not finite). The bf16 limits are loose on purpose:
bf16 keeps 8 significant bits, and OAR-G's input gradient through a bf16 model is a coarse one (the
README's bf16 notes); the check is for what breaks scores outright.

Parity: the same batch scored in float32 on the check's device with its default batching, against the
CPU scoring it one row (OAR-G) or one perturbed copy (OAR-P) per pass. On ``--device cuda`` that is
CUDA vs CPU; on ``--device cpu`` it is batched vs serial on the CPU (the same comparison minus the device).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from oar_rl.float64 import float64_copy
from oar_rl.gpu_check.sizes import Sizes, arch_config, build_model, padded_batch, placed
from oar_rl.importance import gradient_importance, perturbation_importance
from oar_rl.importance.hybrid import topk_recall

Scorer = Callable[..., torch.Tensor]
SCORERS: tuple[str, ...] = ("oar-p", "oar-g", "oar-g-rms")
# (max relative error, min Spearman ρ) vs float64, set from a random SmolLM2-135M-shaped Qwen2 on the CPU
# (2 seeds, 2 rows × 16 tokens): float32 gave ≤ 7e-4 (OAR-P: the KLs of a random model are ~1e-5, so
# float32's rounding of log-probabilities near -10.8 shows) and ρ 1.000; bf16 gave OAR-P ≤ 0.03 (ρ ≥ 0.996)
# and OAR-G 0.31-0.49 (ρ 0.75-0.86: a bf16 input gradient is a coarse one). A wrong position, mask, dtype
# cast or noise draw moves the scores by O(1) and ρ towards 0.
PRECISION_LIMITS: dict[tuple[str, str], tuple[float, float]] = {
    ("oar-p", "float32"): (1e-2, 0.99),
    ("oar-g", "float32"): (1e-2, 0.99),
    ("oar-g-rms", "float32"): (1e-2, 0.99),
    ("oar-p", "bfloat16"): (0.2, 0.9),
    ("oar-g", "bfloat16"): (0.8, 0.5),  # all-zero scores have relative error 1.0 and no ranking: they fail
    ("oar-g-rms", "bfloat16"): (0.8, 0.5),
}
PARITY_LIMITS = (1e-2, 0.99)  # float32 on the device vs the CPU; measured ≤ 4e-4 (CPU batched vs serial)


def score(name: str, model, batch: list[torch.Tensor], seed: int, serial: bool = False) -> torch.Tensor:
    """(B, C) float64 scores of scorer `name` on the CPU; `serial`: one row / one copy per pass."""
    if name == "oar-p":
        out = perturbation_importance(model, *batch, batch_size=1 if serial else 64)
    else:
        kw = dict(noise_std=0.05, noise_scale="rms") if name == "oar-g-rms" else dict(noise_std=1e-3)
        out = gradient_importance(
            model,
            *batch,
            generator=torch.Generator().manual_seed(seed),
            batch_size=1 if serial else None,
            **kw,
        )
    return out.detach().double().cpu()


def relative_error(scores: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> float:
    """‖s − r‖₂ / ‖r‖₂ over the tokens of `mask` (float64; inf when r is 0 there and s is not)."""
    m = mask.bool().cpu()
    diff, ref = (scores - reference)[m].norm().item(), reference[m].norm().item()
    if ref == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / ref


def _ranks(x: torch.Tensor) -> torch.Tensor:
    r = torch.empty_like(x)
    r[x.argsort()] = torch.arange(x.numel(), dtype=x.dtype)
    return r


def spearman(scores: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over rows (with ≥ 3 valid tokens) of the Spearman rank correlation with `reference`."""
    values = []
    for s, r, m in zip(scores, reference, mask.bool().cpu(), strict=True):
        if int(m.sum()) < 3:
            continue
        a, b = _ranks(s[m]), _ranks(r[m])
        a, b = a - a.mean(), b - b.mean()
        den = (a.norm() * b.norm()).item()
        values.append((a @ b).item() / den if den > 0 else 0.0)
    return sum(values) / len(values) if values else float("nan")


def _judge(s: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor, limits: tuple[float, float]) -> dict:
    """Relative error and ρ of `s` against `ref`, and whether they are inside `limits` (and finite)."""
    max_err, min_rho = limits
    err, rho = relative_error(s, ref, mask), spearman(s, ref, mask)
    why = []
    if not bool(torch.isfinite(s).all()):
        why.append("non-finite scores")
    if not any(
        float(row[m].max() - row[m].min()) > 0 for row, m in zip(s, mask.bool().cpu(), strict=True) if m.any()
    ):
        why.append("constant scores on every row (no ranking)")
    if not err <= max_err:
        why.append(f"relative error {err:.3g} > {max_err:g}")
    if not rho >= min_rho:
        why.append(f"Spearman ρ {rho:.3f} < {min_rho:g}")
    return {
        "relative_error": err,
        "spearman": rho,
        "top20_overlap": topk_recall(s.cpu(), ref.cpu(), mask.cpu(), 0.2),
        "max_relative_error": max_err,
        "min_spearman": min_rho,
        "passed": not why,
        "why": "; ".join(why),
    }


def _model_and_batch(sizes: Sizes, seed: int, rows: int, completion_len: int):
    config = arch_config("qwen2", sizes.arch_shape)
    base = build_model(config, seed)
    batch = padded_batch(config.vocab_size, rows, sizes.scorer_prompt_len, completion_len, seed, "cpu")
    return base, batch


def run_precision(sizes: Sizes, seed: int, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Figures per (scorer, dtype) and the failures against :data:`PRECISION_LIMITS`."""
    base, batch_cpu = _model_and_batch(sizes, seed, sizes.scorer_rows, sizes.scorer_completion_len)
    dev = sizes.device
    batch = [t.to(dev) for t in batch_cpu]
    mask = batch_cpu[3]
    ref_model = float64_copy(base).to(dev)
    refs = {}
    for name in SCORERS:
        if progress:
            progress(f"{name} float64")
        refs[name] = score(name, ref_model, batch, seed)
    del ref_model
    rows, failures = [], []
    for dtype in sizes.scorer_dtypes:
        model = placed(base, dev, dtype)
        for name in SCORERS:
            if progress:
                progress(f"{name} {dtype}")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                s = score(name, model, batch, seed)
            row = _judge(s, refs[name], mask, PRECISION_LIMITS[(name, dtype)])
            row.update(
                scorer=name, dtype=dtype, warnings=sorted({str(w.message).split(";")[0] for w in caught})
            )
            if not row["passed"]:
                failures.append(f"{name} {dtype}: {row['why']}")
            rows.append(row)
        del model
    return {
        "model": f"random Qwen2 of {sizes.arch_shape_name}'s shape",
        "batch": {
            "rows": sizes.scorer_rows,
            "prompt_len": sizes.scorer_prompt_len,
            "completion_len": sizes.scorer_completion_len,
            "valid_tokens": int(mask.sum()),
        },
        "reference": "float64 copy on the same device",
        "rows": rows,
        "failed": failures,
    }


def run_parity(sizes: Sizes, seed: int, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """float32 scores on the device (batched) against the CPU (serial), per scorer."""
    base, batch_cpu = _model_and_batch(sizes, seed, sizes.parity_rows, sizes.parity_completion_len)
    mask = batch_cpu[3]
    on_cpu = placed(base, "cpu", "float32")
    on_dev = placed(base, sizes.device, "float32")
    batch_dev = [t.to(sizes.device) for t in batch_cpu]
    rows, failures = [], []
    for name in SCORERS:
        if progress:
            progress(name)
        ref = score(name, on_cpu, batch_cpu, seed, serial=True)
        s = score(name, on_dev, batch_dev, seed)
        row = {"scorer": name, **_judge(s, ref, mask, PARITY_LIMITS)}
        if not row["passed"]:
            failures.append(f"{name}: {row['why']}")
        rows.append(row)
    return {
        "compared": f"{sizes.device} float32, batched  vs  cpu float32, one row/copy per pass",
        "batch": {"rows": sizes.parity_rows, "completion_len": sizes.parity_completion_len},
        "rows": rows,
        "failed": failures,
    }
