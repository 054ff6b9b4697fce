"""Issue 48's answers from the confirmation's run files, by `results/credit-why/PREREGISTRATION.md`'s rules.

- **D1**: a rule beats GRPO only if its paired interval (final sampled accuracy, test, by seed) is above 0
  against both `grpo` and `grpo-compute`, with Bonferroni-adjusted intervals (99.5%: 5 rules × 2
  baselines); the unadjusted 95% intervals are reported beside them.
- **D2**: first-error − random-departure, 95% paired interval above 0: the gain is *location*.
- **D3**: first-error − lowest-prob, 95% paired interval: distinguishable or not.
- Descriptive: greedy accuracy; area under the learning curve (trapezoid over steps 0–30, step 0 the warm
  start's accuracy on the curve's sample); runs ending > 10 points below the warm start; cost (training
  seconds and generated tokens per step, as ratios to `grpo`'s); each arm's gain over `grpo` split by
  whether the warm start's greedy answer to the problem was right.

Nothing is read while the confirmation is incomplete (blinded): :func:`answers` returns the landed seeds.

    python -m experiments.credit_why answers   # writes results/credit-why/answers.json and answers.md
"""

from __future__ import annotations

import itertools
from typing import Any

from oar_rl.study.screen_report import fmt_ci, progress_markdown
from oar_rl.study.stats import mean_ci, paired_difference, wins_text

RULES = ("first-error", "lowest-prob", "random-departure", "save-prefix", "entropy")
BASELINES = ("grpo", "grpo-compute")
ADJUSTED = 1 - 0.05 / (len(RULES) * len(BASELINES))
"""The Bonferroni-adjusted level of D1's intervals (0.995)."""
COLLAPSE = 10.0
"""Points below the warm start's sampled accuracy at which a run counts as collapsed."""


def aulc(curve: dict[str, float], start: float, steps: int = 30) -> float:
    """Mean accuracy (points) under a run's curve {step: accuracy}, trapezoid from step 0 (`start`) to
    `steps`, divided by `steps`."""
    pts = sorted([(0, start), *((int(k), v) for k, v in curve.items() if 0 < int(k) <= steps)])
    if pts[-1][0] != steps:
        raise ValueError(f"the curve ends at step {pts[-1][0]}, not {steps}")
    area = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(pts))
    return 100 * area / steps


def generated_tokens(run: dict[str, Any]) -> float:
    """Mean generated tokens per step: rollouts (mean length × prompts × 8) plus the search's."""
    prompts = int(dict(run.get("overrides", {})).get("prompts_per_step", 16))
    per_step = [
        h["completions/mean_length"] * prompts * 8 + float(h.get("oar/search_tokens", 0.0))
        for h in run["history"]
        if "loss" in h and h.get("completions/mean_length") is not None
    ]
    return sum(per_step) / len(per_step)


def split_gain(arm: dict[int, dict], base: dict[int, dict], right: list[bool], samples: int) -> dict:
    """Paired gains (points) over `base` on the problems the warm start got right greedily, and on those
    it got wrong, from the runs' per-problem sampled counts."""
    out = {}
    for name, want in (("warm_right", True), ("warm_wrong", False)):
        idx = [i for i, r in enumerate(right) if r == want]

        def acc(run: dict, idx: list[int] = idx) -> float:
            counts = run["final"]["per_problem"]["sampled"]
            return 100 * sum(counts[i] for i in idx) / (samples * len(idx))

        seeds = sorted(set(arm) & set(base))
        out[name] = {"problems": len(idx), **paired_difference(
            {s: acc(arm[s]) for s in seeds}, {s: acc(base[s]) for s in seeds})}  # fmt: skip
    return out


def answers(runs: dict[str, dict[int, dict]], warm: dict[str, Any], seeds: tuple[int, ...]) -> dict[str, Any]:
    """The pre-registered answers from the confirmation's runs {arm: {seed: run}} and the warm start's
    test figures (`warm_start.json`'s "test")."""
    arms = (*BASELINES, *RULES)
    landed = {a: sorted(runs.get(a, {})) for a in arms}
    if any(set(landed[a]) != set(seeds) for a in arms):
        return {"blinded": True, "landed": landed}

    def final(arm: str, key: str) -> dict[int, float]:
        return {s: 100 * r["final"][key] for s, r in runs[arm].items()}

    warm_sampled, warm_greedy = 100 * warm["sampled"], 100 * warm["greedy"]
    right = [c > 0 for c in warm["per_problem"]["greedy"]]
    rec: dict[str, Any] = {"blinded": False, "warm_start": {"sampled": warm_sampled, "greedy": warm_greedy}}
    grpo_secs = mean_ci([r["train_seconds"] for r in runs["grpo"].values()])["mean"]
    grpo_tokens = mean_ci([generated_tokens(r) for r in runs["grpo"].values()])["mean"]
    rows = {}
    for arm in arms:
        got = runs[arm]
        row: dict[str, Any] = {
            "sampled": mean_ci(list(final(arm, "sampled").values())),
            "greedy": mean_ci(list(final(arm, "greedy").values())),
            "aulc": mean_ci([aulc(r["curve"], warm["curve"]) for r in got.values()]),
            "collapsed": sum(v < warm_sampled - COLLAPSE for v in final(arm, "sampled").values()),
            "seconds_ratio": mean_ci([r["train_seconds"] for r in got.values()])["mean"] / grpo_secs,
            "tokens_ratio": mean_ci([generated_tokens(r) for r in got.values()])["mean"] / grpo_tokens,
        }
        if arm != "grpo":
            for base in BASELINES if arm in RULES else ("grpo",):
                row[f"vs_{base}"] = paired_difference(final(arm, "sampled"), final(base, "sampled"))
                row[f"vs_{base}_adjusted"] = paired_difference(
                    final(arm, "sampled"), final(base, "sampled"), level=ADJUSTED
                )
            row["greedy_vs_grpo"] = paired_difference(final(arm, "greedy"), final("grpo", "greedy"))
            row["split_vs_grpo"] = split_gain(got, runs["grpo"], right, samples=4)
        rows[arm] = row
    rec["arms"] = rows
    rec["D1"] = {r: all(rows[r][f"vs_{b}_adjusted"]["low"] > 0 for b in BASELINES) for r in RULES}
    d2 = paired_difference(final("first-error", "sampled"), final("random-departure", "sampled"))
    d3 = paired_difference(final("first-error", "sampled"), final("lowest-prob", "sampled"))
    rec["D2"] = {"paired": d2, "location": d2["low"] > 0}
    rec["D3"] = {"paired": d3, "distinguishable": d3["low"] > 0 or d3["high"] < 0}
    return rec


def _ci(d: dict[str, Any] | None, signed: bool = True) -> str:
    return fmt_ci(d, signed=signed).replace("-", "−")


def markdown(rec: dict[str, Any], seeds: tuple[int, ...]) -> str:
    """The answers page: the decisions, then one table of every arm (the figures above, in points)."""
    if rec["blinded"]:
        return progress_markdown(rec["landed"], list(seeds), "Issue 48's confirmation")
    a, w = rec["arms"], rec["warm_start"]
    yes = {True: "**yes**", False: "no"}
    lines = [
        "# Issue 48's confirmation: the answers",
        "",
        f"Test split, 500 problems × 4 samples at T = 1 per run, seeds {seeds[0]}–{seeds[-1]}; warm start "
        f"{w['sampled']:.1f}% sampled, {w['greedy']:.1f}% greedy. Points; paired by seed.",
        "",
        "| rule | vs grpo (99.5%) | vs grpo-compute (99.5%) | beats both (D1) |",
        "|---|---:|---:|---|",
    ]
    for r in RULES:
        lines.append(f"| {r} | {_ci(a[r]['vs_grpo_adjusted'])} | {_ci(a[r]['vs_grpo-compute_adjusted'])} "
                     f"| {yes[rec['D1'][r]]} |")  # fmt: skip
    d2, d3 = rec["D2"], rec["D3"]
    lines += [
        "",
        f"- **D2, location**: first-error − random-departure {_ci(d2['paired'])}, "
        f"{wins_text(d2['paired'])} seeds ahead: credited with locating errors: {yes[d2['location']]}.",
        f"- **D3, the search**: first-error − lowest-prob {_ci(d3['paired'])}, {wins_text(d3['paired'])} "
        f"seeds ahead: distinguishable: {yes[d3['distinguishable']]}.",
        "",
        "| arm | sampled | greedy | vs grpo (95%) | greedy vs grpo | AULC | collapsed | train s × | tokens × "
        "| gain, warm right | gain, warm wrong |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in a.items():
        split = r.get("split_vs_grpo", {})
        cells = [
            name, _ci(r["sampled"], False), _ci(r["greedy"], False), _ci(r.get("vs_grpo")),
            _ci(r.get("greedy_vs_grpo")), _ci(r["aulc"], False), f"{r['collapsed']}/{len(seeds)}",
            f"{r['seconds_ratio']:.2f}", f"{r['tokens_ratio']:.2f}",
            _ci(split.get("warm_right")), _ci(split.get("warm_wrong")),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Collapsed: final sampled accuracy more than {COLLAPSE:g} points below the warm start's."]
    return "\n".join(lines) + "\n"
