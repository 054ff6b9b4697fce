"""Recall@K% of each importance signal on the warm start: vs the counterfactual oracle (paper §5.1,
Eq. 19) and, when the task labels roles, vs its ground-truth pivot tokens.

A caller of `oar_rl.analysis.recall` (the oracle pipeline) and `oar_rl.analysis.recall_stats` (the one
recall implementation): trajectories are sampled with `sample_trajectories`, the correct ones labelled
by the counterfactual oracle (`oracle_labels`), scored by `scores_per_probe` (normalised importance over
the reasoning tokens, those before the answer span) and ranked by `recall_summary`. Every rule that
reads the outcome probe (registered with `probe=True`: OAR-G, OAR-P, oar-p-span, a user's probe rule)
is run with every probe (the probe ablation's attribution side, paper Fig. 5b) and named
`<rule>/<probe>`; random, entropy and the other rules do not depend on the probe and are scored once.

In `oar-rl study` the signals are the built-in scorers (`oar_rl.analysis.attribute.METHODS`) plus every
other method of the study with a standalone scorer (`study_signals`: e.g. a `--credit-module` rule,
oar-p-span); the extra ones, and the credit modules of their rules, are part of recall.json's key
(`recall_key`), so a study whose signals changed recomputes its recall, and one with only the built-in
scorers keeps the key it always had.

Ground truth: the task's `label_roles` gives each completion token a role; the pivots are the tokens
labelled `pivot` among the reasoning tokens. A trajectory the labeller cannot label (None) or whose
label count differs from its token count is left out of the ground-truth recall and counted.

Controls: both tables carry `random` and `position` (later reasoning tokens first), each signal with
95% bootstrap intervals over trajectories (`recall_ci95`) and its paired difference to each control
(`paired_difference`), as `oar-rl oracle` reports them (`oar_rl.analysis.recall`, "Controls").

Standalone (the study's own settings: 40 correct trajectories of the test prompts, seed 1234, AS-Mean
for the model-free signals, the task's completion length)::

    python -m oar_rl.study.recall --out results/testbed-recall
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch

KS = (0.05, 0.1, 0.2, 0.3, 0.5)
TABLE_KS = (0.1, 0.2, 0.3)
"""The K of the paired differences (the top of the ranking, where credit is concentrated)."""
RECALL_FORMAT = 2
"""The study's recall.json format (2: position control, CIs, paired differences); in its key."""


def study_signals(settings) -> tuple[str, ...]:
    """The signals of a study's recall: the built-in scorers, then each other method of the study (in its
    order) that has a standalone scorer (`oar_rl.credits.SCORED_CREDITS`), the controls aside (`position`
    and `random` are in every table anyway)."""
    from oar_rl import credits
    from oar_rl.analysis.attribute import METHODS
    from oar_rl.importance.baselines import CONTROLS
    from oar_rl.study.config import credit_of

    extra = [
        credit_of(m)
        for m in settings.method_list
        if credit_of(m) in credits.SCORED_CREDITS and credit_of(m) not in (*METHODS, *CONTROLS)
    ]
    return tuple(dict.fromkeys([*METHODS, *extra]))


def recall_key(settings, protocol: dict[str, Any]) -> dict[str, Any]:
    """What the study's recall.json is keyed by (its `protocol_hash`): the study's protocol, the recall
    format and, only when the study adds signals to the built-in scorers (`study_signals`), those signals
    and the credit modules of the ones from a user's file (so a study of built-in methods keeps the key
    of the recall files made before signals were added)."""
    from oar_rl.analysis.attribute import METHODS

    key = {**protocol, "recall_format": RECALL_FORMAT}
    extra = [m for m in study_signals(settings) if m not in METHODS]
    if extra:
        key["recall_signals"] = extra
        modules = {m: settings.module_record(m) for m in extra if settings.module_record(m) is not None}
        if modules:
            key["credit_modules"] = modules
    return key


def recall_analysis(
    task,
    model,
    tokenizer,
    *,
    n: int,
    max_new_tokens: int,
    seed: int,
    probe: str,
    prompts_pool: int | None = None,
    scored_tokens: str = "reasoning",
    methods: tuple[str, ...] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Recall curves of every signal (`methods`, default the built-in scorers) on `n` correct warm-start
    trajectories of the test prompts (at most `prompts_pool` prompts are sampled, one completion each;
    default 10·n, within [20, 1000]). `progress`: a line per phase and the oracle's progress bar on
    stderr (the standalone command; a study draws its own bar)."""
    from oar_rl.analysis.attribute import METHODS, sample_trajectories
    from oar_rl.analysis.recall import label_matrix, oracle_labels, scores_per_probe
    from oar_rl.probes import PROBES

    def say(text: str) -> None:
        if progress:
            print(f"[recall] {text}", file=sys.stderr, flush=True)

    pool = prompts_pool if prompts_pool is not None else min(max(10 * n, 20), 1000)
    rows = task.prompts("test", pool)
    say(f"sampling {len(rows)} warm-start completions")
    trajs = sample_trajectories(
        model,
        tokenizer,
        [r["prompt"] for r in rows],
        [str(r["answer"]) for r in rows],
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    correct = [t for t in trajs if t.completion_ids.numel() and task.check(t.completion, t.answer)][:n]
    result: dict[str, Any] = {"ks": list(KS), "sampled": len(trajs), "trajectories": len(correct)}
    if not correct:
        result["skipped"] = f"none of {len(trajs)} sampled warm-start completions is correct"
        return result
    say(f"the oracle on {len(correct)} correct of {len(trajs)}")
    oracle_rows = oracle_labels(
        model, tokenizer, correct, task.check, max_new_tokens=max_new_tokens, progress=progress
    )
    say("scoring the signals")
    skipped: dict[str, str] = {}  # rules that read the outcome without standalone=False: left out, said
    scores, mask = scores_per_probe(
        model,
        tokenizer,
        correct,
        METHODS if methods is None else methods,
        PROBES,
        model_free_probe=probe,
        seed=seed,
        answer_pattern=task.answer_pattern,
        scored_tokens=scored_tokens,
        skipped=skipped,
    )
    for rule, why in skipped.items():
        print(f"[recall] {rule} skipped: {why}", file=sys.stderr, flush=True)
    if skipped:
        result["skipped_signals"] = skipped
    oracle = label_matrix(oracle_rows, mask)
    tokens = int(mask.sum())
    result["reasoning_tokens"] = tokens
    result["oracle"] = {
        "pivot_fraction": int((oracle & mask).sum()) / max(tokens, 1),
        **_recall_section(scores, oracle, mask, seed),
    }
    if task.label_roles is not None:
        truth = torch.zeros_like(mask)
        keep = torch.zeros(mask.shape[0], dtype=torch.bool)
        unlabelled = 0
        for i, t in enumerate(correct):
            roles = task.label_roles(t.prompt, t.completion_ids.tolist(), tokenizer)
            if roles is None or len(roles) != t.completion_ids.numel():
                unlabelled += 1
                continue
            keep[i] = True
            truth[i, : len(roles)] = torch.tensor([r == "pivot" for r in roles])
        gt_mask = mask & keep[:, None]
        g_tokens = int(gt_mask.sum())
        result["ground_truth"] = {
            "trajectories": int(keep.sum()),
            "unlabelled": unlabelled,
            "pivot_fraction": int((truth & gt_mask).sum()) / max(g_tokens, 1),
            **_recall_section(scores, truth, gt_mask, seed),
        }
    return result


def _recall_section(scores: dict, truth: torch.Tensor, mask: torch.Tensor, seed: int) -> dict[str, Any]:
    """recall, 95% bootstrap intervals and paired differences to the controls of one kind of pivot."""
    from oar_rl.analysis.recall_stats import recall_summary

    return recall_summary(scores, truth, mask, KS, seed=seed, paired_ks=TABLE_KS)


def recall_markdown(result: dict[str, Any]) -> str:
    """Both recall tables (with intervals) and their paired differences to the controls, as Markdown."""
    lines = [
        f"{result['trajectories']} correct trajectories of {result['sampled']} sampled, "
        f"{result.get('reasoning_tokens', 0)} reasoning tokens.",
    ]
    for key, label in (("oracle", "counterfactual-oracle pivots"), ("ground_truth", "ground-truth pivots")):
        sec = result.get(key)
        if not sec:
            continue
        ks = [f"{k:g}" for k in KS]
        lines += [
            "",
            f"### Recall@K% of {label} (pivot fraction {sec['pivot_fraction']:.2f}; 95% bootstrap CI)",
            "",
            "| signal | " + " | ".join(f"top {100 * float(k):g}%" for k in ks) + " |",
            "|---" * (len(ks) + 1) + "|",
        ]
        for name, c in sec["recall"].items():
            b = sec["recall_ci95"][name]
            lines.append(
                f"| {name} | " + " | ".join(f"{c[k]:.2f} ({b[k][0]:.2f}–{b[k][1]:.2f})" for k in ks) + " |"
            )
        tks = [f"{k:g}" for k in TABLE_KS]
        lines += [
            "",
            "| paired difference (95% CI) | " + " | ".join(f"top {100 * float(k):g}%" for k in tks) + " |",
        ]
        lines.append("|---" * (len(tks) + 1) + "|")
        for name, d in sec["paired_difference"].items():
            lines.append(
                f"| {name} | "
                + " | ".join(f"{d[k][0]:+.2f} ({d[k][1]:+.2f}, {d[k][2]:+.2f})" for k in tks)
                + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Recall of the warm start's signals, as the study computes it, into `--out` (JSON, Markdown, PNGs)."""
    from oar_rl.analysis.attribute import METHODS, parse_methods
    from oar_rl.argparsing import add, add_renaming, new_parser
    from oar_rl.credit_modules import add_flag
    from oar_rl.io import ensure_writable_dir, write_text_atomic
    from oar_rl.study.report import plot_recall
    from oar_rl.tasks import DEFAULT_TASK, get_task

    p = new_parser("python -m oar_rl.study.recall", "recall@K% of every signal on a task's warm start")
    add(p, "--task", default=DEFAULT_TASK)
    add_renaming(p, "--trajectories", "--n", dest="n", type=int, default=40,
                 help="correct warm-start trajectories (the study's default)")  # fmt: skip
    add(p, "--seed", type=int, default=1234, help="sampling and scoring seed (the study's eval_seed)")
    add(p, "--probe", default=None, help="probe of the model-free signals (default: the task's)")
    add_renaming(p, "--credits", "--methods", dest="methods", default=",".join(METHODS),
        help="signals to score beside the controls, comma-separated: the built-in scorers (default) or "
        "any standalone rule (oar-p-span, entropy-80-20, rules of --credit-module)")  # fmt: skip
    add_flag(p)
    add(p, "--threads", type=int, default=1, help="torch threads")
    add(p, "--out", default="results/testbed-recall")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        methods = tuple(dict.fromkeys([*parse_methods(a), "random"]))  # the random control, always
    except ValueError as e:
        p.error(str(e))
    from oar_rl.credit_modules import load_credit_modules

    modules = load_credit_modules(a.credit_module)  # loaded by parse_methods: their records
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    task = get_task(a.task)
    out = ensure_writable_dir(a.out)
    ws = task.load_warm_start("default", None)
    result = recall_analysis(
        task, ws.model, ws.tokenizer, n=a.n, max_new_tokens=task.max_completion_length, seed=a.seed,
        probe=a.probe or task.probe, methods=methods, progress=True,
    )  # fmt: skip
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["command"] = "python -m oar_rl.study.recall " + " ".join(sys.argv[1:] if argv is None else argv)
    result["threads"] = a.threads
    result["credit_modules"] = [m.record() for m in modules]  # the code of the user's rules scored here
    write_text_atomic(out / "recall.json", json.dumps(result, indent=2) + "\n")
    write_text_atomic(out / "recall.md", recall_markdown(result))
    plot_recall(result, "oracle", out / "recall_oracle.png", "recall of oracle pivots")
    plot_recall(result, "ground_truth", out / "recall_ground_truth.png", "recall of ground-truth pivots")
    print(recall_markdown(result))
    print(f"[recall] wrote {out}/recall.json, recall.md, recall_*.png in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
