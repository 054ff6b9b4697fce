"""Recall per reasoning step of the real-model figure: does a signal find pivots that are NOT next to the
answer?

A reference's reasoning R (`experiments.real_model.recall`) is a few sentences, one per step. **Step k** is
the k-th sentence of R that holds a digit, together with any digit-free sentences right before it (so
an opener like "Let's see." joins step 1, and a digit-free sentence at the end joins the last step).
Sentences end at a "." that is followed by a space or by the end of R. A token belongs to the step
holding its first character (`oar_rl.answer_span`'s character ranges of the ids as written).

Two recalls per step k, over the references with at least one oracle pivot in step k
(`causal_recall`, so rows without one are skipped; ties at the cut broken at random, in expectation):

- **ranked among all of R** (`all`): the share of the row's step-k pivots among the top-K% tokens of the
  whole reasoning. The ranking the trainer uses: a signal that boosts only the tokens next to the
  answer scores 0 here for an early step.
- **ranked within step k** (`within`): the share of step-k pivots among the top-K% of step k's own
  tokens (at least one token), the ranking restricted to that step. Whether the signal tells step k's
  pivots from step k's other tokens, whatever it does elsewhere.

Each with a 95% bootstrap interval over references and paired differences to the controls (`position`,
`random`). Not in the paper (Fig. 5 pools every position).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

_SENTENCE_END = re.compile(r"\.(?= |$)")
STEP_KS = (0.1, 0.2)


def step_bounds(reasoning: str) -> list[int]:
    """Character end (exclusive) of each step of `reasoning` (module docstring); the last is len(R).
    A reasoning with no digit is one step."""
    ends = [m.end() for m in _SENTENCE_END.finditer(reasoning)]
    if not ends or ends[-1] != len(reasoning):
        ends.append(len(reasoning))
    bounds, start = [], 0
    for end in ends:
        if any(ch.isdigit() for ch in reasoning[start:end]):
            bounds.append(end)
            start = end
    if not bounds:
        return [len(reasoning)]
    bounds[-1] = len(reasoning)  # a digit-free tail joins the last step
    return bounds


def step_index(tok, trajs: Sequence, reasoning_ends: Sequence[int], shape: tuple[int, int]) -> torch.Tensor:
    """(B, C) long: the 1-based step of each reasoning token (0 elsewhere). `reasoning_ends[i]` is the
    number of reasoning tokens of row i (R's length in tokens, `reasoning_end`)."""
    from oar_rl.answer_span import token_spans

    out = torch.zeros(shape, dtype=torch.long)
    decoded = token_spans(tok, [t.completion_ids.tolist() for t in trajs])
    for i, ((text, spans), end) in enumerate(zip(decoded, reasoning_ends, strict=True)):
        if end == 0:
            continue
        r_text = text[: spans[end - 1][1]]
        bounds = step_bounds(r_text)
        for k in range(end):
            lo = spans[k][0]
            out[i, k] = 1 + next((j for j, b in enumerate(bounds) if lo < b), len(bounds) - 1)
    return out


def per_step_recall(
    scores: Mapping[str, torch.Tensor],
    oracle: torch.Tensor,
    mask: torch.Tensor,
    steps: torch.Tensor,
    *,
    seed: int,
    ks: Sequence[float] = STEP_KS,
) -> dict[str, Any]:
    """{step: {"references", "pivots", "all": {...}, "within": {...}}}: each ranking's recall, interval and
    paired differences to the controls (`oar_rl.analysis.recall_stats.recall_summary`)."""
    from oar_rl.analysis.recall_stats import recall_summary

    out: dict[str, Any] = {}
    for s in range(1, int(steps.max()) + 1):
        in_step = (steps == s) & mask
        truth = oracle & in_step
        entry: dict[str, Any] = {
            "references": int(truth.any(dim=1).sum()),
            "pivots": int(truth.sum()),
            "tokens": int(in_step.sum()),
        }
        for name, ranked in (("all", mask), ("within", in_step)):
            entry[name] = recall_summary(scores, truth, ranked, ks, seed=seed)
        out[str(s)] = entry
    return out


def per_step_markdown(per_step: Mapping[str, Any], ks: Sequence[float] = STEP_KS) -> str:
    """The per-step recall tables (both rankings, with intervals) and the paired differences of step 1."""
    steps = list(per_step)
    counts = "; ".join(
        f"step {s}: {v['pivots']} pivots in {v['references']} references ({v['tokens']} tokens)"
        for s, v in per_step.items()
    )
    lines = [f"Oracle pivots per step: {counts}.", ""]
    for name, title in (("all", "ranked among all reasoning tokens"), ("within", "ranked within the step")):
        head = [f"step {s} top {100 * k:g}%" for s in steps for k in ks]
        lines += [f"Recall per step, {title} (95% CI):", "", "| signal | " + " | ".join(head) + " |"]
        lines.append("|---" * (len(head) + 1) + "|")
        signals = per_step[steps[0]][name]["recall"]
        for sig in signals:
            cells = []
            for s in steps:
                sec = per_step[s][name]
                for k in ks:
                    key = f"{k:g}"
                    v, (lo, hi) = sec["recall"][sig][key], sec["recall_ci95"][sig][key]
                    cells.append(f"{v:.2f} ({lo:.2f}–{hi:.2f})")
            lines.append(f"| {sig} | " + " | ".join(cells) + " |")
        paired = per_step[steps[0]][name]["paired_difference"]
        lines += ["", f"Step 1, {title}: paired difference to the controls (95% CI):", ""]
        lines.append("| paired difference | " + " | ".join(f"top {100 * k:g}%" for k in ks) + " |")
        lines.append("|---" * (len(ks) + 1) + "|")
        for pair, d in paired.items():
            cells = [f"{d[f'{k:g}'][0]:+.2f} ({d[f'{k:g}'][1]:+.2f}, {d[f'{k:g}'][2]:+.2f})" for k in ks]
            lines.append(f"| {pair} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
