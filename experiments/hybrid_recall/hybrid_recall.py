"""Does OAR-GP find exact OAR-P's top tokens on *trained* models? Recall@20%, with bootstrap intervals.

OAR-GP (``credit="oar-gp"``) runs OAR-G over every token and exact OAR-P on each row's top ``fraction``
by OAR-G. `oar-rl bench` reports how much of exact OAR-P's per-row top-20% it (and OAR-G alone) recovers,
but on a random-initialised network. This script measures the same on two trained models:

- ``wordproblems``: the shipped word-problem warm start (``oar_rl.shipped.load_task_model``, the policy
  `oar-rl study --task wordproblems` starts from) on completions it samples itself (temperature 1, at
  most 160 tokens, as in training) for validation-split prompts;
- ``smollm2-135m``: the pretrained SmolLM2-135M-Instruct (``oar-rl fetch-model smollm2-135m``) on correct
  reference solutions of two-step word problems, scored teacher-forced under the chat template, as
  ``python -m experiments.real_model`` does (the model solves too few itself to sample).

For each model and probe it scores every trajectory with exact OAR-P (prefix reuse), OAR-G, OAR-GP at
each ``--fractions`` value and, for chance level, random scores. Recall@k is pooled over trajectories,
Σ_rows |top_k(method) ∩ top_k(OAR-P)| / Σ_rows |top_k(OAR-P)|, over the tokens the probe scores
(``oar_rl.importance.hybrid.topk_recall``); the 95% interval is a percentile bootstrap over
trajectories. Each scorer's wall time over all trajectories is given beside (scorers interleaved chunk
by chunk, so a load change hits them alike), with its ratio to OAR-P's.

    python -m experiments.hybrid_recall                       # quick: 8 trajectories per model
    python -m experiments.hybrid_recall --n 128 --out results/hybrid-recall   # the full measurement

Writes ``hybrid_recall.json`` and ``hybrid_recall.md`` in ``--out`` (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch

from oar_rl.importance import gradient_importance, hybrid_importance, perturbation_importance
from oar_rl.importance.hybrid import top_fraction_probability
from oar_rl.io import ensure_writable_dir, write_text_atomic

MODELS = ("wordproblems", "smollm2-135m")
PROBES = ("lt-logits", "as-mean")


def load_trajectories(name: str, n: int, seed: int):
    """(model, tokenizer, trajectories) for one of :data:`MODELS` (see the module docstring)."""
    from oar_rl.analysis.attribute import given_trajectory, load_model, sample_trajectories

    if name == "wordproblems":
        from oar_rl.shipped import load_task_model
        from oar_rl.tasks import get_task

        model, tok, _ = load_task_model("wordproblems")
        tok.padding_side = "left"
        task = get_task("wordproblems")
        rows = task.prompts("validation", n)
        trajs = sample_trajectories(
            model,
            tok,
            [r["prompt"] for r in rows],
            [r["answer"] for r in rows],
            temperature=1.0,
            max_new_tokens=task.max_completion_length,
            seed=seed,
        )
    elif name == "smollm2-135m":
        from experiments.real_model.recall import make_problems

        model, tok = load_model(name)
        trajs = [given_trajectory(tok, q, ref, chat=True, answer=g) for q, ref, g in make_problems(n, seed)]
    else:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    trajs = [t for t in trajs if t.completion_ids.numel() > 0]
    if not trajs:
        raise RuntimeError(f"{name}: every completion is empty")
    return model.eval(), tok, trajs


def recall_counts(scores: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor, k: float):
    """Per row: (E|top_k(scores) ∩ top_k(reference)|, |top_k(reference)|) over `mask`.

    Ties at either cut are broken at random, independently, and the expected overlap is counted (as
    ``topk_recall``).
    """
    ours, ref = top_fraction_probability(scores, mask, k), top_fraction_probability(reference, mask, k)
    return (ours * ref).sum(dim=1), ref.sum(dim=1)


def pooled_with_interval(hits: torch.Tensor, sizes: torch.Tensor, n_boot: int, seed: int) -> dict[str, Any]:
    """Pooled recall Σ hits / Σ sizes and its 95% percentile-bootstrap interval over rows (sizes > 0)."""
    keep = sizes > 0
    hits, sizes = hits[keep].double(), sizes[keep].double()
    if sizes.numel() == 0:
        return {"recall": float("nan"), "ci95": [float("nan"), float("nan")], "rows": 0}
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, sizes.numel(), (n_boot, sizes.numel()), generator=gen)
    boot = hits[idx].sum(dim=1) / sizes[idx].sum(dim=1)
    lo, hi = torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return {"recall": float(hits.sum() / sizes.sum()), "ci95": [lo, hi], "rows": int(sizes.numel())}


def _scorers(model, batch, common: dict, seed: int, fractions: list[float], copies: int) -> dict:
    """name -> a call scoring `batch` (OAR-G and OAR-GP's OAR-G pass draw the same noise)."""
    from oar_rl.importance import random_importance

    def gen() -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    def hybrid(f: float):
        return lambda: hybrid_importance(
            model,
            *batch,
            **common,
            fraction=f,
            gradient_kwargs={"generator": gen()},
            perturbation_kwargs={"batch_size": copies},
        )

    return {
        "oar-p": lambda: perturbation_importance(model, *batch, **common, batch_size=copies),
        "oar-g": lambda: gradient_importance(model, *batch, **common, generator=gen()),
        **{f"oar-gp@{f:g}": hybrid(f) for f in fractions},
        "random": lambda: random_importance(batch[3], generator=gen()),
    }


def _cat(chunks: list[torch.Tensor]) -> torch.Tensor:
    """Row chunks of different widths, right-padded with zeros (False) to one width and stacked."""
    width = max(c.shape[1] for c in chunks)
    return torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1])) for c in chunks])


def score_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from oar_rl.analysis.attribute import batch_layout
    from oar_rl.answer_span import answer_span_mask, scored_positions

    t0 = time.perf_counter()
    model, tok, trajs = load_trajectories(name, args.n, args.seed)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    print(f"[hybrid-recall] {name}: {len(trajs)} trajectories ({time.perf_counter() - t0:.0f} s)", flush=True)
    out: dict[str, Any] = {"trajectories": len(trajs), "probes": {}}
    for probe in args.probes:
        names = ["oar-p", "oar-g", *(f"oar-gp@{f:g}" for f in args.fractions), "random"]
        seconds = dict.fromkeys(names, 0.0)
        scores: dict[str, list[torch.Tensor]] = {m: [] for m in names}
        masks: list[torch.Tensor] = []
        for lo in range(0, len(trajs), args.batch_size):
            batch = batch_layout(trajs[lo : lo + args.batch_size], pad)
            answer = answer_span_mask(batch[2], batch[3], tok) if probe != "lt-logits" else None
            mask = batch[3].bool() if answer is None else scored_positions(batch[3], answer) & batch[3].bool()
            common = {"probe": probe, "answer_mask": answer}

            calls = _scorers(model, batch, common, args.seed + lo, args.fractions, args.copies)
            if lo == 0:  # untimed warm-up (the model's head check, first-call allocations)
                calls["oar-g"]()
            for m, fn in calls.items():
                t = time.perf_counter()
                s = fn().float().cpu()
                seconds[m] += time.perf_counter() - t
                scores[m].append(s)
            masks.append(mask.cpu())
            print(f"[hybrid-recall] {name} {probe}: {lo + batch[3].shape[0]}/{len(trajs)}", flush=True)
        mask = _cat(masks)
        full = {m: _cat(v) for m, v in scores.items()}
        recall = {}
        for k in args.ks:
            recall[f"{k:g}"] = {
                m: pooled_with_interval(*recall_counts(full[m], full["oar-p"], mask, k), args.boot, args.seed)
                for m in names
                if m != "oar-p"
            }
        out["probes"][probe] = {
            "scored_tokens": int(mask.sum()),
            "recall": recall,
            "seconds": seconds,
            "seconds_over_oar_p": {m: v / seconds["oar-p"] for m, v in seconds.items()},
        }
    out["wall_seconds"] = time.perf_counter() - t0
    return out


def markdown(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        f"`{result['command']}` -- recall of exact OAR-P's per-row top-k tokens (pooled over trajectories; "
        f"95% bootstrap interval over trajectories, {a['boot']} resamples); scorer wall time over all "
        f"trajectories, torch threads {result['torch_threads']}, machine load average "
        f"{result['load_average']}; total wall time {result['wall_seconds'] / 60:.1f} min.",
        "",
    ]
    for name, res in result["models"].items():
        for probe, pr in res["probes"].items():
            ks = list(pr["recall"])
            lines += [
                f"**{name}**, probe {probe}: {res['trajectories']} trajectories, "
                f"{pr['scored_tokens']} scored tokens",
                "",
                "| scorer | "
                + " | ".join(f"recall@{float(k):.0%}" for k in ks)
                + " | seconds | × OAR-P time |",
                "|---|" + "---:|" * (len(ks) + 2),
            ]
            for m, sec in pr["seconds"].items():
                cells = []
                for k in ks:
                    r = pr["recall"][k].get(m)
                    cells.append(
                        "1 (reference)"
                        if r is None
                        else f"{r['recall']:.2f} ({r['ci95'][0]:.2f}–{r['ci95'][1]:.2f})"
                    )
                lines.append(
                    f"| {m} | " + " | ".join(cells) + f" | {sec:.2f} | {pr['seconds_over_oar_p'][m]:.2f} |"
                )
            lines.append("")
    return "\n".join(lines)


def _floats(text: str, flag: str, lo: float = 0.0) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{flag}: not a comma-separated list of numbers: {text!r}") from None
    if not vals or any(not lo < v <= 1.0 for v in vals):
        raise SystemExit(f"{flag}: every value must lie in ({lo:g}, 1], got {text!r}")
    return vals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.hybrid_recall", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from: {', '.join(MODELS)}")
    ap.add_argument("--n", type=int, default=8, help="trajectories per model (before dropping empty ones)")
    ap.add_argument(
        "--probes", default="lt-logits,as-mean", help=f"comma-separated, from: {', '.join(PROBES)}"
    )
    ap.add_argument("--fractions", default="0.25,0.5", help="OAR-GP fractions rescored by OAR-P")
    ap.add_argument("--ks", default="0.2", help="recall@k: share of each row's tokens in the top sets")
    ap.add_argument("--copies", type=int, default=64, help="OAR-P perturbed copies per forward pass")
    ap.add_argument("--batch-size", type=int, default=16, help="trajectories per scorer call")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="hybrid_recall_out", help="directory for hybrid_recall.json / .md")
    args = ap.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.probes = [p.strip() for p in args.probes.split(",") if p.strip()]
    if not args.models or any(m not in MODELS for m in args.models):
        ap.error(f"--models: valid values are {', '.join(MODELS)}")
    if not args.probes or any(p not in PROBES for p in args.probes):
        ap.error(f"--probes: valid values are {', '.join(PROBES)}")
    for flag in ("n", "copies", "batch_size", "boot", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be >= 1")
    args.fractions = _floats(args.fractions, "--fractions")
    args.ks = _floats(args.ks, "--ks")
    out = ensure_writable_dir(args.out)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    models = {name: score_model(name, args) for name in args.models}
    result = {
        "command": "python -m experiments.hybrid_recall " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": vars(args),
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "wall_seconds": time.perf_counter() - t0,
        "models": models,
    }
    text = markdown(result)
    write_text_atomic(out / "hybrid_recall.json", json.dumps(result, indent=2) + "\n")
    write_text_atomic(out / "hybrid_recall.md", text)
    print(text)
    print(f"[hybrid-recall] wrote {out / 'hybrid_recall.json'} and {out / 'hybrid_recall.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
