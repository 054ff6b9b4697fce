"""`oar-rl oracle`: the paper's §5.1 study -- do importance scores find the causal tokens?

Samples trajectories of a task's problems (`--task`, default the word-problem testbed, as for `oar-rl
study`; its data, checker and warm start come from the task registry), keeps the correct ones, labels
each token with the counterfactual oracle (Eq. 19), scores the same tokens with every method, and
reports the recall of oracle pivots within the top-K% tokens (paper Fig. 5a). Recall is computed over
the reasoning tokens (those before the answer span): the answer's own tokens are trivially causal, are
not what credit assignment ranks, and answer-span probes do not score them.

Controls, in every table (`CONTROLS`; not in the paper): `random` (a uniformly random ranking recalls
K% in expectation; the `random` method measures that empirically) and `position` (the token's index:
later reasoning tokens rank first). Where pivots cluster right before the answer, `position` finds them
without reading the model, so a signal's recall means something only where it beats `position` as well
as `random`; every other signal's paired difference to each control (`control_differences`, a paired
bootstrap over trajectories) is reported beside the curves.

Writes `recall.json` (per-K recall of each method, pivot statistics, settings, the `--credit-module`
files loaded with the sha256 of their code), `recall.md`,
`recall.png` and `heatmaps.html` (a few traces coloured by each method, with the oracle row).

The oracle pipeline here, `oracle_labels` (Eq. 19 per trajectory), `label_matrix` and `scores_per_probe`
(which adds the `position` control), is also what the study (`oar_rl.study.recall`) and the real-model
figure (`experiments.real_model.recall`) call; the statistics on its labels and scores (recall, bands,
paired differences and their JSON/Markdown) are all in `oar_rl.analysis.recall_stats`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from oar_rl.analysis.attribute import (
    answer_spans,
    chat_message,
    heatmap_page,
    load_model,
    method_scores,
    parse_methods,
    resolve_chat,
    sample_trajectories,
    sampling_budget,
    scoring_parser,
    scoring_settings,
    span_notes,
)
from oar_rl.analysis.oracle import counterfactual_oracle
from oar_rl.analysis.recall_stats import (
    KS,
    band_json,
    control_differences,
    curve_json,
    paired_json,
    paired_table,
    recall_bands,
    recall_curves,
)
from oar_rl.argparsing import add, new_parser
from oar_rl.importance.baselines import CONTROLS  # `position` is added by `with_position`
from oar_rl.io import ensure_writable_dir, savefig_atomic, write_text_atomic
from oar_rl.tasks import exact_check, get_task


def probe_methods() -> tuple[str, ...]:
    """The rules whose importance depends on the outcome probe: those registered with ``probe=True``
    (oar-g, oar-p, oar-p-span, a user's probe rule), read from the registry when called, so a rule
    registered after this module was imported (a `--credit-module` file) counts."""
    from oar_rl.credits import CREDIT_MODES

    return tuple(name for name, mode in CREDIT_MODES.items() if mode.probe)


def oracle_labels(
    model,
    tokenizer,
    trajectories: Sequence,
    check: Callable[[str, str], bool],
    *,
    max_new_tokens: int,
    progress: bool = False,
) -> list[torch.Tensor]:
    """The counterfactual oracle's pivot labels (Eq. 19) of each trajectory's completion tokens; a
    continuation counts as correct when `check(text, trajectory.answer)`."""
    return [
        counterfactual_oracle(
            model,
            tokenizer,
            t.prompt_ids,
            t.completion_ids,
            lambda text, ans=t.answer: check(text, ans),
            max_new_tokens=max_new_tokens,
        )
        for t in (tqdm(trajectories, desc="oracle") if progress else trajectories)
    ]


def label_matrix(labels: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Per-trajectory label rows, right-padded with False to the (B, C) shape of `like` (the scoring mask)."""
    out = torch.zeros_like(like)
    for i, lab in enumerate(labels):
        out[i, : lab.numel()] = lab
    return out


def with_position(scores: Mapping[str, torch.Tensor], mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """`scores` plus the `position` control: each token's index, normalised (Eq. 14) over `mask` like
    every other signal (the order is the position order, later first)."""
    from oar_rl.importance import position_importance
    from oar_rl.reshape import normalize_importance

    return {**scores, "position": normalize_importance(position_importance(mask), mask)}


def scores_per_probe(
    model,
    tokenizer,
    trajectories: Sequence,
    methods: Sequence[str],
    probes: Sequence[str],
    *,
    model_free_probe: str,
    seed: int,
    answer_pattern: str | None = None,
    scored_tokens: str = "reasoning",
    skipped: dict[str, str] | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`method_scores` of the probe-dependent `methods` (`probe_methods`) under every probe (named
    'oar-g/as-mean') and of the others once, alongside `model_free_probe` (named plainly), plus the
    `position` control; returns (scores, reasoning mask). `skipped`: as `method_scores`' (a rule left
    out once is not tried under the next probes)."""
    scores: dict[str, torch.Tensor] = {}
    mask = None
    by_probe = probe_methods()
    for p in probes:
        methods = [m for m in methods if skipped is None or m not in skipped]
        wanted = [m for m in methods if m in by_probe]
        wanted += [m for m in methods if m not in by_probe] if p == model_free_probe else []
        s, mask = method_scores(
            model,
            tokenizer,
            list(trajectories),
            wanted,
            probe=p,
            seed=seed,
            answer_pattern=answer_pattern,
            scored_tokens=scored_tokens,
            skipped=skipped,
        )
        for name, v in s.items():
            scores[f"{name}/{p}" if name in by_probe else name] = v
    if mask is None:
        raise ValueError("scores_per_probe needs at least one probe")
    return with_position(scores, mask), mask


def plot_recall(
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
        style = {"ls": "--", "lw": 1.2} if name in CONTROLS else {}  # the controls dashed
        (line,) = ax.plot(
            [100 * k for k in ks], [curve[k] for k in ks], marker="o", ms=3, label=name, **style
        )
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
    model,
    tok,
    ds,
    n: int,
    *,
    max_new_tokens: int,
    seed: int,
    chunk: int = 32,
    chat: bool = False,
    check: Callable[[str, str], bool] = exact_check,
    temperature: float = 1.0,
):
    """Sample `ds`'s prompts in chunks at `temperature` (default 1.0) until `n` trajectories are correct by
    `check` (completion text, gold answer; default: the embedded tasks' exact checker).

    Returns (every sampled trajectory, the first `n` correct ones). Only as many prompts are sampled as
    `n` needs (whole chunks; chunk i is seeded `seed + i`, so the result depends only on the arguments).
    """
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
            temperature=temperature,
        )
        trajs += batch
        correct += [t for t in batch if t.completion_ids.numel() and check(t.completion, t.answer)]
        bar.update(len(batch))
        bar.set_postfix(correct=f"{min(len(correct), n)}/{n}")
        if len(correct) >= n:
            break
    bar.close()
    return trajs, correct[:n]


def build_parser():
    """The `oar-rl oracle` parser."""
    from oar_rl.argparsing import add_renamed, add_renaming
    from oar_rl.options import shared_parser

    p = new_parser(
        "oar-rl oracle",
        __doc__.split("\n\n")[0],
        parents=[
            scoring_parser(),
            shared_parser(
                "out",
                out={"default": "oracle_out", "help": "directory for recall.json/.md/.png, heatmaps.html"},
            ),
        ],
    )
    add(
        p,
        "--split",
        help="the task's data split to sample from (default: its held-out split, test, which the "
        "generators call eval; arithmetic: train, test, hard; wordproblems: train, validation, test)",
    )
    add(p, "--trajectories", type=int, default=40, help="correct trajectories to analyse")
    add_renamed(p, "--n", "--trajectories", "correct trajectories; `eval --samples` is samples per problem")
    add_renaming(p, "--max-problems", "--max-prompts", dest="max_prompts", type=int, default=400,
                 help="give up after sampling this many problems")  # fmt: skip
    add(p, "--heatmaps", type=int, default=4, help="traces shown in heatmaps.html")
    return p


def main(argv: list[str] | None = None) -> int:
    from oar_rl.console import print_settings
    from oar_rl.options import apply_threads, data_split

    a = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        from oar_rl.credit_modules import load_credit_modules

        methods = parse_methods(a)  # --credit-module loaded first
        modules = load_credit_modules(a.credit_module)  # loaded now: their records
        if a.trajectories < 1 or a.max_prompts < 1:
            raise ValueError(
                f"--trajectories and --max-problems must be >= 1, got {a.trajectories} and {a.max_prompts}"
            )
        if a.heatmaps < 0:
            raise ValueError(f"--heatmaps must be >= 0 (traces shown), got {a.heatmaps}")
        task = get_task(a.task)
        a.split = data_split(a.split) or task.default_split
        try:
            ds = task.dataset(a.split, limit=a.max_prompts)
        except ValueError as exc:
            raise ValueError(f"--split: {exc}") from None
        a.max_new_tokens = sampling_budget(a.max_new_tokens, task, task_problems=True)
        from oar_rl.answer_span import compile_answer_pattern

        compile_answer_pattern(a.answer_pattern)
        out = ensure_writable_dir(a.out)
        apply_threads(a.threads)
        model, tok = load_model(a.model, task, a.cache_dir)
        a.model_path = model.name_or_path
        chat = resolve_chat(tok, a.chat)
    except ValueError as exc:
        print(f"oar-rl oracle: {exc}", file=sys.stderr)
        return 2
    settings = scoring_settings(a, task, methods, a.max_new_tokens, chat)
    print_settings("oracle", {**settings, "split": a.split, "trajectories": a.trajectories})
    print(chat_message("oracle", chat, a.chat), flush=True)
    trajs, correct = sample_correct(
        model,
        tok,
        ds,
        a.trajectories,
        max_new_tokens=a.max_new_tokens,
        seed=a.seed,
        chat=chat,
        check=task.check,
    )
    if not correct:
        print(f"oar-rl oracle: none of {len(trajs)} sampled completions is correct", file=sys.stderr)
        return 1
    if len(correct) < a.trajectories:
        print(
            f"oar-rl oracle: warning: only {len(correct)} correct trajectories of the {a.trajectories} asked "
            f"for (--trajectories) in {len(trajs)} sampled prompts (--max-problems {a.max_prompts}); the "
            "recall below is over those",
            file=sys.stderr,
            flush=True,
        )
    print(f"[oracle] {len(correct)} correct trajectories (of {len(trajs)} sampled)", flush=True)
    labels = oracle_labels(model, tok, correct, task.check, max_new_tokens=a.max_new_tokens, progress=True)
    _, answer_mask = answer_spans(correct, tok, a.answer_pattern)
    notes = span_notes(answer_mask.any(dim=1), methods, a.probe, a.answer_pattern)
    for note in notes:
        print(f"[oracle] {note}", flush=True)
    scored = methods if "random" in methods else [*methods, "random"]  # the controls are always there
    scores, mask = method_scores(  # mask: the reasoning tokens
        model, tok, correct, scored, probe=a.probe, seed=a.seed, answer_pattern=a.answer_pattern
    )
    scores = with_position(scores, mask)
    oracle = label_matrix(labels, mask)
    recalls = recall_curves(scores, oracle, mask)
    intervals = recall_bands(scores, oracle, mask, seed=a.seed)
    paired = control_differences(scores, oracle, mask, (0.1, 0.2, 0.3), seed=a.seed)
    n_tokens = int(mask.sum())
    n_pivots = int((oracle & mask).sum())
    result = {
        "settings": {**vars(a), "methods": methods},
        "credit_modules": [m.record() for m in modules],  # the code of the user's rules scored here
        "trajectories": len(correct),
        "sampled": len(trajs),
        "tokens": n_tokens,
        "pivots": n_pivots,
        "pivot_rate": n_pivots / max(n_tokens, 1),
        "rows_with_pivot": int((oracle & mask).any(dim=1).sum()),
        "chat_template": chat,
        "rows_without_answer_span": int((~answer_mask.any(dim=1)).sum()),
        "notes": notes,
        "recall": {name: curve_json(curve) for name, curve in recalls.items()},
        "recall_ci95": {name: band_json(band) for name, band in intervals.items()},
        "paired_difference": paired_json(paired),
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
        "(recall_ci95) and shaded in recall.png. Controls: position (later tokens first) and random.\n\n"
        f"{paired_table(paired, (0.1, 0.2, 0.3))}\n"
    )
    write_text_atomic(out / "recall.md", summary)
    plot_recall(
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
            answer=answer_mask[: len(shown)],
            notes=[chat_message("oracle", chat, a.chat).split("] ", 1)[1], *notes],
        ),
    )
    print(summary)
    print(f"[oracle] wrote {out}/recall.json, recall.md, recall.png, heatmaps.html")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
