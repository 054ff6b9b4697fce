"""`oar-rl oracle`: the paper's §5.1 study -- do importance scores find the causal tokens?

Samples trajectories on the arithmetic task, keeps the correct ones, labels each token with the
counterfactual oracle (Eq. 19), scores the same tokens with every method, and reports the recall of
oracle pivots within the top-K% tokens (paper Fig. 5a). Recall is computed over the reasoning tokens
(those before the answer span): the answer's own tokens are trivially causal, are not what credit
assignment ranks, and answer-span probes do not score them. A uniformly random ranking recalls K% in
expectation; the `random` method measures that empirically.

Writes `recall.json` (per-K recall of each method, pivot statistics, settings), `recall.md`,
`recall.png` and `heatmaps.html` (a few traces coloured by each method, with the oracle row).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from oar_rl.analysis.attribute import (
    METHODS,
    add_scoring_arguments,
    answer_spans,
    chat_message,
    heatmap_page,
    load_model,
    method_scores,
    parse_list,
    resolve_chat,
    sample_trajectories,
    span_notes,
)
from oar_rl.analysis.oracle import causal_recall, counterfactual_oracle, recall_interval
from oar_rl.argparsing import add, new_parser
from oar_rl.io import ensure_writable_dir, savefig_atomic, write_text_atomic

KS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def _plot(
    recalls: dict[str, dict[float, float]],
    path: Path,
    intervals: dict[str, dict[float, tuple[float, float]]] | None = None,
    *,
    n: int | None = None,
    with_pivot: int | None = None,
    probe: str | None = None,
) -> None:
    """Recall@K% curves, each with its 95% bootstrap band over trajectories; n and the probe in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, curve in recalls.items():
        ks = sorted(curve)
        (line,) = ax.plot([100 * k for k in ks], [curve[k] for k in ks], marker="o", ms=3, label=name)
        if intervals and name in intervals:
            band = intervals[name]
            ax.fill_between(
                [100 * k for k in ks],
                [band[k][0] for k in ks],
                [band[k][1] for k in ks],
                color=line.get_color(),
                alpha=0.15,
                lw=0,
            )
    ax.plot([0, 100], [0, 1], color="0.6", ls=":", lw=1, label="chance")
    ax.set_xlabel("top-K% tokens by importance")
    ax.set_ylabel("recall of oracle causal tokens")
    ax.set_ylim(0, 1.02)
    if n is not None:
        bands = ", shaded: 95% bootstrap CI" if intervals else ""
        pivots = f" ({with_pivot} with a pivot)" if with_pivot is not None else ""
        ax.set_title(f"n = {n} trajectories{pivots}{f', probe {probe}' if probe else ''}{bands}", fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=120)
    plt.close(fig)


def sample_correct(
    model, tok, ds, n: int, *, max_new_tokens: int, seed: int, chunk: int = 32, chat: bool = False
):
    """Sample `ds`'s prompts in chunks at temperature 1.0 until `n` correct trajectories are found.

    Returns (every sampled trajectory, the first `n` correct ones). Only as many prompts are sampled as
    `n` needs (whole chunks; chunk i is seeded `seed + i`, so the result depends only on the arguments).
    """
    from oar_rl.data.arithmetic import check

    prompts, answers = list(ds["prompt"]), list(ds["answer"])
    trajs, correct = [], []
    bar = tqdm(total=len(prompts), desc="sample", unit="prompt", mininterval=1.0)
    for i, start in enumerate(range(0, len(prompts), chunk)):
        batch = sample_trajectories(
            model,
            tok,
            prompts[start : start + chunk],
            answers[start : start + chunk],
            max_new_tokens=max_new_tokens,
            seed=seed + i,
            chat=chat,
        )
        trajs += batch
        correct += [t for t in batch if t.completion_ids.numel() and check(t.completion, t.answer)]
        bar.update(len(batch))
        bar.set_postfix(correct=f"{min(len(correct), n)}/{n}")
        if len(correct) >= n:
            break
    bar.close()
    return trajs, correct[:n]


def main(argv: list[str] | None = None) -> int:
    p = new_parser("oar-rl oracle", __doc__.split("\n\n")[0])
    add_scoring_arguments(p)
    add(p, "--split", default="eval", help="arithmetic split to sample from (train, eval, hard)")
    add(p, "--n", type=int, default=40, help="correct trajectories to analyse")
    add(p, "--max-prompts", type=int, default=400, help="give up after sampling this many prompts")
    add(p, "--heatmaps", type=int, default=4, help="traces shown in heatmaps.html")
    add(p, "--out", default="oracle_out", help="directory for recall.json/.md/.png and heatmaps.html")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        methods = parse_list(a.methods, METHODS, "--methods")
        if a.n < 1 or a.max_prompts < 1:
            raise ValueError(f"--n and --max-prompts must be >= 1, got {a.n} and {a.max_prompts}")
        if a.split not in ("train", "eval", "hard"):
            raise ValueError(f"--split {a.split!r} is not valid; choose train, eval or hard")
        from oar_rl.answer_span import compile_answer_pattern

        compile_answer_pattern(a.answer_pattern)
        out = ensure_writable_dir(a.out)
        model, tok = load_model(a.model)
        chat = resolve_chat(tok, a.chat)
    except ValueError as exc:
        print(f"oar-rl oracle: {exc}", file=sys.stderr)
        return 2
    print(chat_message("oracle", chat, a.chat), flush=True)
    from oar_rl.data.arithmetic import check, load

    ds = load(a.split)
    ds = ds.select(range(min(a.max_prompts, len(ds))))
    trajs, correct = sample_correct(
        model, tok, ds, a.n, max_new_tokens=a.max_new_tokens, seed=a.seed, chat=chat
    )
    if not correct:
        print(f"oar-rl oracle: none of {len(trajs)} sampled completions is correct", file=sys.stderr)
        return 1
    if len(correct) < a.n:
        print(
            f"oar-rl oracle: warning: only {len(correct)} correct trajectories of the {a.n} asked for "
            f"(--n) in {len(trajs)} sampled prompts (--max-prompts {a.max_prompts}); the recall below is "
            "over those",
            file=sys.stderr,
            flush=True,
        )
    print(f"[oracle] {len(correct)} correct trajectories (of {len(trajs)} sampled)", flush=True)
    labels = []
    for t in tqdm(correct, desc="oracle"):
        labels.append(
            counterfactual_oracle(
                model,
                tok,
                t.prompt_ids,
                t.completion_ids,
                lambda text, ans=t.answer: check(text, ans),
                max_new_tokens=a.max_new_tokens,
            )
        )
    _, answer_mask = answer_spans(correct, tok, a.answer_pattern)
    notes = span_notes(answer_mask.any(dim=1), methods, a.probe, a.answer_pattern)
    for note in notes:
        print(f"[oracle] {note}", flush=True)
    scores, mask = method_scores(  # mask: the reasoning tokens
        model, tok, correct, methods, probe=a.probe, seed=a.seed, answer_pattern=a.answer_pattern
    )
    oracle = torch.zeros_like(mask)
    for i, lab in enumerate(labels):
        oracle[i, : lab.numel()] = lab
    recalls = {name: causal_recall(s, oracle, mask, KS) for name, s in scores.items()}
    intervals = {name: recall_interval(s, oracle, mask, KS, seed=a.seed) for name, s in scores.items()}
    n_tokens = int(mask.sum())
    n_pivots = int((oracle & mask).sum())
    result = {
        "settings": {**vars(a), "methods": methods},
        "trajectories": len(correct),
        "sampled": len(trajs),
        "tokens": n_tokens,
        "pivots": n_pivots,
        "pivot_rate": n_pivots / max(n_tokens, 1),
        "rows_with_pivot": int((oracle & mask).any(dim=1).sum()),
        "chat_template": chat,
        "rows_without_answer_span": int((~answer_mask.any(dim=1)).sum()),
        "notes": notes,
        "recall": {name: {f"{k:g}": v for k, v in curve.items()} for name, curve in recalls.items()},
        "recall_ci95": {
            name: {f"{k:g}": list(v) for k, v in band.items()} for name, band in intervals.items()
        },
    }
    write_text_atomic(out / "recall.json", json.dumps(result, indent=2))
    head = "| method | " + " | ".join(f"top {100 * k:g}%" for k in KS) + " |"
    lines = [head, "|---" * (len(KS) + 1) + "|"]
    for name, curve in recalls.items():
        lines.append(f"| {name} | " + " | ".join(f"{curve[k]:.2f}" for k in KS) + " |")
    table = "\n".join(lines)
    summary = (
        f"{len(correct)} correct trajectories, {n_tokens} reasoning tokens, {n_pivots} oracle pivots "
        f"({100 * result['pivot_rate']:.1f}%), probe {a.probe}\n\n{table}\n\n"
        "Mean recall over the trajectories with a pivot; 95% bootstrap intervals in recall.json "
        "(recall_ci95) and shaded in recall.png.\n"
    )
    write_text_atomic(out / "recall.md", summary)
    _plot(
        recalls,
        out / "recall.png",
        intervals,
        n=len(correct),
        with_pivot=result["rows_with_pivot"],
        probe=a.probe,
    )
    shown = correct[: a.heatmaps]
    rows = {name: s[: len(shown)] for name, s in scores.items()}
    rows["oracle"] = oracle[: len(shown)].float()
    write_text_atomic(
        out / "heatmaps.html",
        heatmap_page(
            shown,
            tok,
            rows,
            "Importance vs. the counterfactual oracle",
            scored=mask[: len(shown)],
            notes=[chat_message("oracle", chat, a.chat).split("] ", 1)[1], *notes],
        ),
    )
    print(summary)
    print(f"[oracle] wrote {out}/recall.json, recall.md, recall.png, heatmaps.html")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
