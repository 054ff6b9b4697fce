"""How much of exact OAR-P's ranking does span-level OAR-P keep, and at what cost? (issue 33 item 2)

    python -m experiments.span_recall --out results/oar-p-span

On the shipped word-problem warm start: sample `--prompts` test problems (one completion each, T = 1,
seeded), score every completion's reasoning tokens with exact OAR-P (`oar-p`) and with span-level OAR-P
(`oar-p-span`: each sentence or line masked as one unit, `oar_rl.importance.span`) under the same probe
(AS-Mean, the default of every oar-rl command), with the options of `OARConfig`'s defaults (as the
trainer and `oar-rl blame` call them), and report

- recall of exact OAR-P's per-row top 20% reasoning tokens in span-level OAR-P's top 20%
  (`oar_rl.importance.hybrid.topk_recall`, pooled over rows; a span's tokens tie: the expected figure
  under random tie-breaking),
  with a percentile bootstrap over completions, beside the `position` rule's and the expected 0.20 of a
  random ranking;
- masked copies (token-forwards are not counted) and the wall time of each scorer on the same batch,
  timed in alternation (one thread; the CPU is shared, so the times are indicative).

Writes OUT/span_recall.json and OUT/span_recall.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.span_recall", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of each scorer")
    p.add_argument("--out", default="results/oar-p-span")
    a = p.parse_args(argv)
    torch.set_num_threads(1)

    from oar_rl.analysis.attribute import batch_layout, sample_trajectories
    from oar_rl.answer_span import answer_masks
    from oar_rl.config import oar_defaults
    from oar_rl.credits import CREDIT_MODES, ScoringContext, compute_importance
    from oar_rl.importance.hybrid import topk_recall
    from oar_rl.importance.span import reasoning_steps, span_groups
    from oar_rl.io import write_text_atomic
    from oar_rl.tasks import get_task

    task = get_task("wordproblems")
    ws = task.load_warm_start("default", None)
    model, tok = ws.model.eval(), ws.tokenizer
    rows = task.prompts("test", a.prompts)
    trajs = sample_trajectories(
        model, tok, [r["prompt"] for r in rows], [str(r["answer"]) for r in rows],
        max_new_tokens=task.max_completion_length, seed=a.seed,
    )  # fmt: skip
    trajs = [t for t in trajs if t.completion_ids.numel()]
    batch = batch_layout(trajs, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    answer, reasoning = answer_masks(batch[2], batch[3], tok, pattern=task.answer_pattern)
    reasoning = reasoning & batch[3].bool()
    probe = "as-mean"
    settings = oar_defaults()

    def score(name: str) -> torch.Tensor:
        mode = CREDIT_MODES[name]
        ctx = ScoringContext(settings=settings, probe=probe, tokenizer=tok)
        kw = {**mode.kwargs(ctx), "reasoning_mask": reasoning}
        if mode.probe:
            kw["answer_mask"] = answer
        return compute_importance(name, model, *batch, **kw).float()

    times: dict[str, list[float]] = {"oar-p": [], "oar-p-span": []}
    scores: dict[str, torch.Tensor] = {}
    for _ in range(a.repeats):
        for name in times:
            t0 = time.perf_counter()
            scores[name] = score(name)
            times[name].append(time.perf_counter() - t0)
    scores["position"] = score("position")
    from oar_rl.answer_span import positions_before

    scored = positions_before(batch[3], answer) & reasoning  # the tokens the AS-Mean probe scores
    steps = reasoning_steps(tok, batch[2], scored)
    n_spans = int(span_groups(steps)[0].numel())
    n_tokens = int(scored.sum())

    def recall(name: str, rows_idx: torch.Tensor | None = None) -> float:
        s, ref, m = scores[name], scores["oar-p"], scored
        if rows_idx is not None:
            s, ref, m = s[rows_idx], ref[rows_idx], m[rows_idx]
        return topk_recall(s, ref, m, 0.2)

    g = torch.Generator().manual_seed(a.seed)
    B = len(trajs)
    boot = {n: [] for n in ("oar-p-span", "position")}
    for _ in range(1000):
        idx = torch.randint(0, B, (B,), generator=g)
        for n in boot:
            boot[n].append(recall(n, idx))

    def interval(v: list[float]) -> list[float]:
        t = torch.tensor(v)
        return [float(t.quantile(0.025)), float(t.quantile(0.975))]

    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    result = {
        "command": "python -m experiments.span_recall " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": f"shipped word-problem warm start (recipe {ws.recipe_hash})",
        "completions": B,
        "probe": probe,
        "scored_tokens": n_tokens,
        "spans": n_spans,
        "tokens_per_span": n_tokens / max(n_spans, 1),
        "recall_top20_of_oar_p": {
            "oar-p-span": recall("oar-p-span"),
            "position": recall("position"),
            "random (expected)": 0.2,
        },
        "recall_ci95": {n: interval(v) for n, v in boot.items()},
        "masked_copies": {"oar-p": n_tokens, "oar-p-span": n_spans},
        "seconds_median": med,
        "seconds_all": times,
        "span_over_exact_time": med["oar-p-span"] / med["oar-p"],
        "machine": f"{platform.machine()} CPU, 1 torch thread, torch {torch.__version__}; "
        f"load average {[round(x, 2) for x in os.getloadavg()]} at the end (other jobs raise the times)",
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "span_recall.json", json.dumps(result, indent=2) + "\n")
    r = result["recall_top20_of_oar_p"]
    ci = result["recall_ci95"]
    md = "\n".join([
        f"`{result['command']}` — {result['model']}, {B} sampled test completions (T = 1, seed {a.seed}), "
        f"probe {probe}, {n_tokens} scored reasoning tokens in {n_spans} steps "
        f"({result['tokens_per_span']:.1f} tokens per step). {result['machine']}.",
        "",
        "| signal | recall of exact OAR-P's top 20% (95% CI over completions) | masked copies | median s |",
        "|---|---|---:|---:|",
        f"| oar-p (exact) | 1 | {n_tokens} | {med['oar-p']:.2f} |",
        f"| oar-p-span | {r['oar-p-span']:.2f} ({ci['oar-p-span'][0]:.2f}, {ci['oar-p-span'][1]:.2f}) "
        f"| {n_spans} | {med['oar-p-span']:.2f} |",
        f"| position | {r['position']:.2f} ({ci['position'][0]:.2f}, {ci['position'][1]:.2f}) | 0 | – |",
        "| random (expected) | 0.20 | 0 | – |",
        "",
    ])  # fmt: skip
    write_text_atomic(out / "span_recall.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
