"""Where OAR-G loses precision in bf16: Spearman ρ and top-20% overlap of bf16 scores against float64.

Part 1, the test matrix (``tests/arch_models.py``: tiny random models, the test batch of three
left-padded rows): each architecture's bf16 copy (the same weights cast) scored with the same noise seeds
as its float64 copy (float32 for ``qwen2_moe``, whose grouped expert matmul has no float64 kernel), per
row over the completion tokens, averaged over rows and ``--seeds`` seeds. Settings: OAR-P, OAR-G at the
paper's absolute σ = 1e-3, OAR-G at σ = 0.05 × RMS of the row's embeddings. "lost" is the share of the
σ = 1e-3 noise elements that round away when e + ε is cast to bf16 (these models' embeddings are large,
|e| ≫ 512 σ).

Part 2, the decomposition (``--layers N``, 0 to skip): a random Qwen2 of SmolLM2-135M's shape cut to N
layers (gpu-check's scorer-precision model is the 30-layer one), gpu-check's padded batch of 4 rows ×
(16 + 48) tokens, embeddings at std 0.02 so the noise survives the cast. Rows, against float64 at the same
σ unless said: bf16 at σ = 1e-3, 4e-3, 1.6e-2; float32 arithmetic on bf16-rounded weights at 1e-3 (the
weights' share); bf16 with the LM head and KL in float32 at 1e-3; and float64 at 4e-3 and 1.6e-2
against float64 at 1e-3 (does a larger σ give the same scores in exact arithmetic?).

    python -m experiments.oar_g_precision [--seeds 3] [--layers 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the matrix's tiny models

from arch_models import ARCHS, tiny_model
from oar_rl.float64 import float64_copy
from oar_rl.importance import gradient_importance, perturbation_importance
from oar_rl.importance.gradient import row_noise
from oar_rl.importance.hybrid import topk_recall
from test_architectures import MASK_ID, _row_spearman, make_batch

SETTINGS = {"OAR-G abs 1e-3": dict(noise_std=1e-3), "OAR-G rms 0.05": dict(noise_std=0.05, noise_scale="rms")}
NO_FLOAT64 = ("qwen2_moe", "gemma2")
"""References in float32, not float64: qwen2_moe, and gemma2, whose eager attention with logit softcapping
gives NaN logits in float64 on left-padded rows (a plain transformers forward; the padded rows' NaN reaches
the valid positions through the next layer), so a float64 reference would be NaN (until 2026-11-27 the
top-20% figure then counted NaN scores silently: gemma2's OAR-P row read 0.70 / 0.25)."""


def _oar_g(model, batch, seed: int, **kw) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the lost-noise warning is measured here
        return gradient_importance(
            model, *batch, generator=torch.Generator().manual_seed(seed), **kw
        ).double()


def _lost_share(model, batch, sigma: float) -> float:
    """Share of the completion's noise elements that round away in e + ε cast to the model dtype."""
    emb = model.get_input_embeddings()(batch[2])  # (B, C, H)
    eps = torch.cat([row_noise(s, 1, emb.shape[1], emb.shape[2]) for s in range(emb.shape[0])])
    moved = (emb.float() + sigma * eps).to(emb.dtype) != emb
    valid = batch[3].bool()[..., None].expand_as(moved)
    return 1.0 - float(moved[valid].float().mean())


def matrix(seeds: int) -> None:
    batch = make_batch()
    p4, scored = batch[:4], batch[3].bool()
    cols = ["OAR-P", *SETTINGS]
    print("| architecture | reference | lost | " + " | ".join(f"{c} ρ / top-20%" for c in cols) + " |")
    print("|---|---|---:|" + "---:|" * len(cols))
    acc: dict[str, list[tuple[float, float]]] = {c: [] for c in cols}
    for arch in ARCHS:
        ref_dtype = torch.float32 if arch in NO_FLOAT64 else torch.float64
        ref_m = tiny_model(arch, seed=1).to(ref_dtype)
        b16 = tiny_model(arch, seed=1).to(torch.bfloat16)
        p_ref = perturbation_importance(ref_m, *p4, mask_token_id=MASK_ID).double()
        p_b16 = perturbation_importance(b16, *p4, mask_token_id=MASK_ID).double()
        acc["OAR-P"].append((_row_spearman(p_b16, p_ref, scored), topk_recall(p_b16, p_ref, scored)))
        for name, kw in SETTINGS.items():
            pairs = []
            for s in range(seeds):
                a, b = _oar_g(ref_m, p4, s, **kw), _oar_g(b16, p4, s, **kw)
                pairs.append((_row_spearman(b, a, scored), topk_recall(b, a, scored)))
            acc[name].append(tuple(statistics.mean(x) for x in zip(*pairs, strict=True)))
        cells = [f"{acc[c][-1][0]:.2f} / {acc[c][-1][1]:.2f}" for c in cols]
        lost = _lost_share(b16, p4, 1e-3)
        print(f"| {arch} | {str(ref_dtype)[6:]} | {lost:.0%} | " + " | ".join(cells) + " |", flush=True)
    for label, fn in (("mean", statistics.mean), ("min", min)):
        cells = [f"{fn(r for r, _ in acc[c]):.2f} / {fn(o for _, o in acc[c]):.2f}" for c in cols]
        print(f"| **{label}** | | | " + " | ".join(cells) + " |")


def decomposition(layers: int) -> None:
    from oar_rl import probes
    from oar_rl.gpu_check.scorers import spearman
    from oar_rl.gpu_check.sizes import GPU, arch_config, build_model, padded_batch, placed
    from oar_rl.model_parts import head_logits

    cfg = arch_config("qwen2", dict(GPU.arch_shape, num_hidden_layers=layers))
    print(f"\nRandom Qwen2 of SmolLM2-135M's shape with {layers} layers, 4 rows × (16 + 48) tokens:\n")
    print("| seed | case | σ | against | Spearman ρ | top-20% overlap | relative error |")
    print("|---:|---|---:|---|---:|---:|---:|")
    for seed in (0, 1):
        base = build_model(cfg, seed)
        batch = padded_batch(cfg.vocab_size, 4, 16, 48, seed, "cpu")
        mask = batch[3].bool()
        f64, b16 = float64_copy(base), placed(base, "cpu", "bfloat16")
        w32 = placed(b16, "cpu", "float32")  # bf16-rounded weights, float32 arithmetic
        refs = {s: _oar_g(f64, batch, seed, noise_std=s) for s in (1e-3, 4e-3, 1.6e-2)}

        def row(case: str, s: torch.Tensor, sigma: float, ref_sigma: float, refs=refs, mask=mask, seed=seed):
            r = refs[ref_sigma]
            err = float((s - r)[mask].norm() / r[mask].norm())
            print(
                f"| {seed} | {case} | {sigma:g} | float64 at {ref_sigma:g} | {spearman(s, r, mask):.3f} "
                f"| {topk_recall(s, r, mask):.2f} | {err:.3f} |",
                flush=True,
            )

        for sigma in (1e-3, 4e-3, 1.6e-2):
            row("bf16", _oar_g(b16, batch, seed, noise_std=sigma), sigma, sigma)
        row("float32 arithmetic, bf16 weights", _oar_g(w32, batch, seed, noise_std=1e-3), 1e-3, 1e-3)
        original = probes.head_logits

        def head32(model, hidden):  # the LM head (and so the KL) in float32
            head = model.get_output_embeddings()
            return torch.nn.functional.linear(hidden.float(), head.weight.detach().float())

        probes.head_logits = head32
        try:
            row("bf16, LM head and KL in float32", _oar_g(b16, batch, seed, noise_std=1e-3), 1e-3, 1e-3)
        finally:
            probes.head_logits = original
        assert probes.head_logits is head_logits
        for sigma in (4e-3, 1.6e-2):
            row("float64", refs[sigma], sigma, 1e-3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.oar_g_precision", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--seeds", type=int, default=3, help="noise seeds per setting (part 1)")
    ap.add_argument("--layers", type=int, default=6, help="layers of the part-2 model (0: skip part 2)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    matrix(args.seeds)
    if args.layers:
        decomposition(args.layers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
