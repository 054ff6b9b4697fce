"""The pre-registered choice of the learning rates and of GRPO's compute multiplier (issue 48), from the
grid's run files and the warm start's scores; `results/credit-why/PREREGISTRATION.md` states the same rule.

For each rule (GRPO, first-error) and rate of the grid, over the grid's three seeds (validation split):
the mean final sampled accuracy and the mean greedy accuracy, in points.

- A rate is **eligible** for a rule when its mean greedy accuracy is at most 2 points below the warm
  start's (validation, greedy).
- A rule's **chosen rate** is its eligible rate with the highest mean sampled accuracy (ties: the smaller
  rate). With no eligible rate, none is chosen, and the rule says so.
- **GRPO's criterion**: its chosen rate gains at least +10 sampled points over the warm start. If it does
  not, the confirmation does not run under this plan (an amendment, committed before any new run, changes
  the grid or the budget).
- **GRPO at first-error's compute** (amendments 1 and 2): over first-error's grid runs at its chosen rate
  that record them, ratio = the mean over steps of (rollout tokens + the search's continuation tokens) /
  rollout tokens; that arm trains on max(16, round(16 × ratio)) prompts per step (8 completions each).
  Rollout tokens per step: the mean completion length × 16 × 8 (TRL's `completions/mean_length`); the
  search's: `oar/search_continued_tokens`; the positions it computed (`oar/search_tokens`) beside.

    python -m experiments.credit_why rates   # writes results/credit-why/rates.json and rates.md
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.credit_why.plan import GRID, GRID_RULES, RATES, _lr
from oar_rl.io import write_text_atomic
from oar_rl.study.screen_report import signed_text

GREEDY_SLACK = 2.0
"""Points of greedy accuracy a chosen rate may lose against the warm start (issue 48, item 1)."""
MIN_GAIN = 10.0
"""Sampled points GRPO's chosen rate must gain over the warm start (issue 48, item 1)."""
ROLLOUTS = 16 * 8


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def multiplier(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """GRPO-at-first-error's-compute's prompts per step from first-error's runs at one rate (amendments 1
    and 2 of the pre-registration): ratio = the mean over steps of (rollout tokens + the search's
    continuation tokens, `oar/search_continued_tokens`) / rollout tokens, over the runs that record the
    field (a step without a search counts 0); prompts = max(16, round(16 × ratio)). The positions the
    search computed (`oar/search_tokens`, whose count depends on the decode path) are reported beside.
    {ratio, prompts, steps, seeds, computed_ratio}; ratio and prompts are None when no run records it."""
    ratios, computed, seeds = [], [], []
    for seed, rec in sorted(runs.items()):
        steps = [h for h in rec.get("history", []) if "loss" in h and h.get("completions/mean_length")]
        if not any("oar/search_continued_tokens" in h for h in steps):
            continue  # made before the field existed (amendment 1)
        seeds.append(seed)
        for h in steps:
            rollout = h["completions/mean_length"] * ROLLOUTS
            ratios.append((rollout + float(h.get("oar/search_continued_tokens", 0.0))) / rollout)
            computed.append((rollout + float(h.get("oar/search_tokens", 0.0))) / rollout)
    ratio = _mean(ratios)
    prompts = max(16, round(16 * ratio)) if ratio is not None else None
    return {"ratio": ratio, "prompts": prompts, "steps": len(ratios), "seeds": seeds,
            "computed_ratio": _mean(computed)}  # fmt: skip


def choose(runs: dict[str, dict[int, dict[str, Any]]], warm: dict[str, float]) -> dict[str, Any]:
    """The rule of the module docstring on the grid's runs {arm: {seed: run}} and the warm start's
    validation accuracy {"sampled", "greedy"} (fractions). Raises while the grid is incomplete."""
    seeds = set(RATES.screen_seeds)
    table: dict[str, list[dict[str, Any]]] = {}
    for rule in GRID_RULES:
        for rate in GRID:
            arm = f"{rule}[lr={_lr(rate)}]"
            got = runs.get(arm, {})
            if set(got) != seeds:
                raise ValueError(
                    f"the grid is not complete: {arm} has seeds {sorted(got)}, needs {sorted(seeds)}"
                )
            sampled = _mean([100 * r["final"]["sampled"] for r in got.values()])
            greedy = _mean([100 * r["final"]["greedy"] for r in got.values()])
            table.setdefault(rule, []).append({
                "rate": rate, "arm": arm, "sampled": sampled, "greedy": greedy,
                "gain": sampled - 100 * warm["sampled"], "greedy_change": greedy - 100 * warm["greedy"],
                "eligible": greedy >= 100 * warm["greedy"] - GREEDY_SLACK,
                "train_seconds": _mean([r["train_seconds"] for r in got.values()]),
            })  # fmt: skip
    chosen: dict[str, float | None] = {}
    for rule, rows in table.items():
        ok = sorted((r for r in rows if r["eligible"]), key=lambda r: (-round(r["sampled"], 9), r["rate"]))
        chosen[rule] = ok[0]["rate"] if ok else None
    grpo = next((r for r in table["grpo"] if r["rate"] == chosen["grpo"]), None)
    criterion = grpo is not None and grpo["gain"] >= MIN_GAIN
    fe_rate = chosen["first-error"]
    mult = multiplier(runs.get(f"first-error[lr={_lr(fe_rate)}]", {})) if fe_rate is not None else None
    return {
        "warm_start_validation": warm,
        "table": table,
        "chosen": chosen,
        "grpo_criterion_met": criterion,
        "compute": mult,
        "confirm": criterion and fe_rate is not None and bool(mult and mult["prompts"]),
    }


def _pm(x: float) -> str:
    """`signed_text` (the project's signed figure) with a typographic minus, as the pages print it."""
    return signed_text(x).replace("-", "−")


def markdown(rec: dict[str, Any]) -> str:
    w = rec["warm_start_validation"]
    lines = [
        "# The rate grid (issue 48)",
        "",
        "Validation split, 300 problems × 4 samples at T = 1 and greedy; seeds 4000–4002.",
        "",
        f"Warm start: {100 * w['sampled']:.1f}% sampled, {100 * w['greedy']:.1f}% greedy. A rate is eligible "
        f"when its mean greedy accuracy is at most {GREEDY_SLACK:g} points below the warm start's; each "
        "rule takes its eligible rate with the highest mean sampled accuracy.",
        "",
        "| rule | rate | sampled | gain | greedy | greedy change | eligible | train s |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for rule, rows in rec["table"].items():
        for r in rows:
            mark = " **(chosen)**" if rec["chosen"][rule] == r["rate"] else ""
            cells = [
                rule, f"{_lr(r['rate'])}{mark}", f"{r['sampled']:.1f}", _pm(r["gain"]), f"{r['greedy']:.1f}",
                _pm(r["greedy_change"]), "yes" if r["eligible"] else "no", f"{r['train_seconds']:.0f}",
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"GRPO's criterion (gain ≥ +{MIN_GAIN:g} at its chosen rate): "
              f"**{'met' if rec['grpo_criterion_met'] else 'not met'}**."]  # fmt: skip
    c = rec["compute"]
    if c and c["ratio"] is not None:
        lines.append(
            f"first-error's tokens per step, rollouts and continuations: {c['ratio']:.2f}× its rollouts' "
            f"({c['steps']} steps of seeds {', '.join(map(str, c['seeds']))}; positions computed "
            f"{c['computed_ratio']:.2f}×): GRPO at its compute trains on {c['prompts']} prompts per step."
        )
    elif rec["chosen"]["first-error"] is not None:
        lines.append(
            "No first-error run at its chosen rate records its continuation tokens: no confirmation."
        )
    return "\n".join(lines) + "\n"


def write(out: Path, runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    warm = json.loads((out / "warm_start.json").read_text())["validation"]
    rec = choose(runs, {"sampled": warm["sampled"], "greedy": warm["greedy"]})
    write_text_atomic(out / "rates.json", json.dumps(rec, indent=1, sort_keys=True) + "\n")
    write_text_atomic(out / "rates.md", markdown(rec))
    return rec
