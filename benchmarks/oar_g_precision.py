"""Does OAR-G's noise survive bf16? Rank correlation of bf16 and float32 OAR-G scores, per setting.

For each tiny architecture of the test matrix (``tests/arch_models.py``: random weights, the test
batch of three left-padded rows) it scores the same batch with the same noise seeds in float32 and in
bf16 (the same weights cast), and reports the Spearman ρ between the two, per row over the completion
tokens, averaged over rows and ``--seeds`` seeds. Settings: the paper's absolute σ = 1e-3, and σ
relative to the embedding RMS (``noise_scale="rms"``) at 1e-3, 1e-2, 0.05 and 0.1. OAR-P is listed
for comparison (no noise involved).

    python benchmarks/oar_g_precision.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the matrix's tiny models

from arch_models import ARCHS, tiny_model
from oar_rl.importance import gradient_importance, perturbation_importance
from test_architectures import MASK_ID, _row_spearman, make_batch

SETTINGS = [
    ("abs 1e-3", dict(noise_std=1e-3)),
    ("rms 1e-3", dict(noise_std=1e-3, noise_scale="rms")),
    ("rms 1e-2", dict(noise_std=1e-2, noise_scale="rms")),
    ("rms 0.05", dict(noise_std=0.05, noise_scale="rms")),
    ("rms 0.1", dict(noise_std=0.1, noise_scale="rms")),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="noise seeds per setting")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    batch = make_batch()
    scored = batch[3].bool()
    print("| architecture | OAR-P | " + " | ".join(f"OAR-G {name}" for name, _ in SETTINGS) + " |")
    print("|---" * (len(SETTINGS) + 2) + "|")
    cols: dict[str, list[float]] = {name: [] for name, _ in SETTINGS}
    for arch in ARCHS:
        f32 = tiny_model(arch, seed=1)
        b16 = tiny_model(arch, seed=1).to(torch.bfloat16)
        p = _row_spearman(
            perturbation_importance(f32, *batch[:4], mask_token_id=MASK_ID),
            perturbation_importance(b16, *batch[:4], mask_token_id=MASK_ID),
            scored,
        )
        cells = [f"{p:.2f}"]
        for name, kw in SETTINGS:
            rhos = []
            for seed in range(args.seeds):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the lost-noise warning is the point here
                    a, b = (
                        gradient_importance(m, *batch[:4], generator=torch.Generator().manual_seed(s), **kw)
                        for m, s in ((f32, seed), (b16, seed))
                    )
                rhos.append(_row_spearman(a, b, scored))
            cols[name].append(statistics.mean(rhos))
            cells.append(f"{cols[name][-1]:.2f}")
        print(f"| {arch} | " + " | ".join(cells) + " |", flush=True)
    print("| **mean** | | " + " | ".join(f"**{statistics.mean(v):.2f}**" for v in cols.values()) + " |")
    print("| **min** | | " + " | ".join(f"{min(v):.2f}" for v in cols.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
