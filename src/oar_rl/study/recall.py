"""Recall@K% of each importance signal on the warm start: vs the counterfactual oracle (paper §5.1,
Eq. 19) and, when the task labels roles, vs its ground-truth pivot tokens.

A caller of `oar_rl.analysis.recall` (the one recall implementation): trajectories are sampled with
`sample_trajectories`, the correct ones labelled by the counterfactual oracle (`oracle_labels`), scored
by `scores_per_probe` (normalised importance over the reasoning tokens, those before the answer span)
and ranked by `recall_curves`. The OAR scorers are run with every probe (the probe ablation's
attribution side, paper Fig. 5b); random and entropy do not depend on the probe and are scored once.

Ground truth: the task's `label_roles` gives each completion token a role; the pivots are the tokens
labelled `pivot` among the reasoning tokens. A trajectory the labeller cannot label (None) or whose
label count differs from its token count is left out of the ground-truth recall and counted.
"""

from __future__ import annotations

from typing import Any

import torch

KS = (0.05, 0.1, 0.2, 0.3, 0.5)


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
) -> dict[str, Any]:
    """Recall curves of every signal on `n` correct warm-start trajectories of the test prompts (at most
    `prompts_pool` prompts are sampled, one completion each; default 10·n, within [20, 1000])."""
    from oar_rl.analysis.attribute import METHODS, sample_trajectories
    from oar_rl.analysis.recall import (
        curve_json,
        label_matrix,
        oracle_labels,
        recall_curves,
        scores_per_probe,
    )
    from oar_rl.probes import PROBES

    pool = prompts_pool if prompts_pool is not None else min(max(10 * n, 20), 1000)
    rows = task.prompts("test", pool)
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
    oracle_rows = oracle_labels(model, tokenizer, correct, task.check, max_new_tokens=max_new_tokens)
    scores, mask = scores_per_probe(
        model,
        tokenizer,
        correct,
        METHODS,
        PROBES,
        model_free_probe=probe,
        seed=seed,
        answer_pattern=task.answer_pattern,
    )
    oracle = label_matrix(oracle_rows, mask)
    tokens = int(mask.sum())
    result["reasoning_tokens"] = tokens
    result["oracle"] = {
        "pivot_fraction": int((oracle & mask).sum()) / max(tokens, 1),
        "recall": {name: curve_json(c) for name, c in recall_curves(scores, oracle, mask, KS).items()},
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
            "recall": {name: curve_json(c) for name, c in recall_curves(scores, truth, gt_mask, KS).items()},
        }
    return result
