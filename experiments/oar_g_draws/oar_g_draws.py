"""How many OAR-G noise draws? Stability, agreement with OAR-P, and cost for K = 1, 2, 4, 8.

On the embedded warm-started model (``oar_rl.tiny.load_default_model``, built and cached on first use)
it samples completions of held-out arithmetic prompts, then for each K:

- **draw-to-draw ρ**: Spearman rank correlation, per row over the scored (reasoning) tokens, between
  two OAR-G runs with independent noise seeds, averaged over rows and over ``--pairs`` seed pairs;
- **ρ vs K=32**: the same against the mean of 32 draws (the best available estimate of the expected
  score);
- **recall of OAR-P top-20%**: the share of each row's top-20% tokens by OAR-P that are also in its
  top-20% by OAR-G (averaged over rows and seeds);
- **cost**: median wall time of one ``gradient_importance`` call over the whole batch relative to K=1.

    python -m experiments.oar_g_draws                  # 32 completions, AS-Mean probe (the demo's)
    python -m experiments.oar_g_draws --json out.json  # also write the figures

Times are ratios measured on whatever machine runs this; on a shared machine they are noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from oar_rl.analysis.attribute import batch_layout, sample_trajectories
from oar_rl.answer_span import answer_span_mask, scored_positions
from oar_rl.data.arithmetic import load
from oar_rl.importance import gradient_importance, perturbation_importance
from oar_rl.io import write_text_atomic
from oar_rl.tiny import load_default_model


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman ρ of two 1-D tensors (ties broken by position, fine for continuous scores)."""
    ra, rb = a.argsort().argsort().double(), b.argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()).clamp(min=1e-12))


def row_mean(fn, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, min_tokens: int = 5) -> float:
    vals = [fn(x[b][mask[b]], y[b][mask[b]]) for b in range(x.shape[0]) if int(mask[b].sum()) >= min_tokens]
    return sum(vals) / max(len(vals), 1)


def top_recall(ref: torch.Tensor, got: torch.Tensor, frac: float = 0.2) -> float:
    """Share of ref's top-frac tokens that are also in got's top-frac tokens."""
    k = max(1, round(frac * ref.numel()))
    top_ref = set(ref.topk(k).indices.tolist())
    top_got = set(got.topk(k).indices.tolist())
    return len(top_ref & top_got) / k


def _write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(payload, indent=2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.oar_g_draws", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--n", type=int, default=32, help="completions (one per held-out prompt)")
    ap.add_argument("--ks", default="1,2,4,8", help="numbers of draws to compare")
    ap.add_argument("--pairs", type=int, default=3, help="independent seed pairs per K")
    ap.add_argument("--probe", default="as-mean", choices=["lt-logits", "as-mean", "as-joint"])
    ap.add_argument("--noise-std", type=float, default=1e-3, help="σ (default: the paper's 1e-3)")
    ap.add_argument("--noise-scale", default="absolute", choices=["absolute", "rms"], help="σ or σ·RMS")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per K (median reported)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]

    model, tok, path = load_default_model(progress=False)
    ds = load("eval").select(range(args.n))
    trajs = sample_trajectories(model, tok, list(ds["prompt"]), list(ds["answer"]), seed=0)
    trajs = [t for t in trajs if t.completion_ids.numel() > 0]
    batch = batch_layout(trajs, tok.pad_token_id)
    ans = answer_span_mask(batch[2], batch[3], tok)
    kw = dict(probe=args.probe, answer_mask=ans)
    scored = scored_positions(batch[3], ans) if args.probe != "lt-logits" else batch[3].bool()
    print(
        f"model {path.name}: {len(trajs)} completions, {int(scored.sum())} scored tokens, "
        f"probe {args.probe}, "
        f"σ={args.noise_std} ({args.noise_scale}), threads={torch.get_num_threads()}",
        file=sys.stderr,
    )
    oar_p = perturbation_importance(model, *batch, **kw)

    def oar_g(seed: int, k: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        noise = dict(noise_std=args.noise_std, noise_scale=args.noise_scale)
        return gradient_importance(model, *batch, num_draws=k, generator=g, **noise, **kw)

    reference = oar_g(10_000, 32)
    rows = {}
    for k in ks:
        draws = [oar_g(1000 * k + i, k) for i in range(2 * args.pairs)]
        pair_rho = [row_mean(spearman, draws[2 * i], draws[2 * i + 1], scored) for i in range(args.pairs)]
        ref_rho = [row_mean(spearman, d, reference, scored) for d in draws]
        recall = [row_mean(top_recall, oar_p, d, scored) for d in draws]
        times = []
        for i in range(args.repeats):
            t0 = time.perf_counter()
            oar_g(99 + i, k)
            times.append(time.perf_counter() - t0)
        rows[k] = {
            "draw_to_draw_rho": statistics.mean(pair_rho),
            "rho_vs_32_draws": statistics.mean(ref_rho),
            "recall_oar_p_top20": statistics.mean(recall),
            "seconds": statistics.median(times),
        }
        print(f"K={k} done", file=sys.stderr)
    base = rows[ks[0]]["seconds"]
    print("| K | draw-to-draw ρ | ρ vs 32-draw mean | recall of OAR-P top-20% | cost × K=1 |")
    print("|---:|---:|---:|---:|---:|")
    for k, r in rows.items():
        r["cost_ratio"] = r["seconds"] / base
        print(
            f"| {k} | {r['draw_to_draw_rho']:.2f} | {r['rho_vs_32_draws']:.2f} | "
            f"{r['recall_oar_p_top20']:.2f} | {r['cost_ratio']:.2f} |"
        )
    if args.json:
        _write_json(args.json, {"settings": {k: str(v) for k, v in vars(args).items()}, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
