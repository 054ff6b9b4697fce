"""Issue 48's answers from the confirmation's run files, by `results/credit-why/PREREGISTRATION.md`'s rules.

- **D1**: a rule beats GRPO only if its paired interval (final sampled accuracy, test, by seed) is above 0
  against both `grpo` and `grpo-compute`, with Bonferroni-adjusted intervals (99.5%: 5 rules × 2
  baselines); the unadjusted 95% intervals are reported beside them.
- **D2**: first-error − random-departure, 95% paired interval above 0: the gain is *location*.
- **D3**: first-error − lowest-prob, 95% paired interval: distinguishable or not.
- Descriptive: greedy accuracy; area under the learning curve (trapezoid over steps 0–30, step 0 the warm
  start's accuracy on the curve's sample); runs ending > 10 points below the warm start; cost (training
  seconds and generated tokens per step, as ratios to `grpo`'s); each arm's gain over the warm start
  split by whether the warm start's greedy answer to the problem was right; the contrasts save-prefix −
  first-error and first-error − entropy.

Nothing is read while the confirmation is incomplete (blinded): :func:`answers` returns the landed seeds.

    python -m experiments.credit_why answers   # writes results/credit-why/answers.json and answers.md
"""

from __future__ import annotations

import itertools
from typing import Any

from oar_rl.study.provenance import run_settings
from oar_rl.study.screen_report import fmt_ci, progress_markdown
from oar_rl.study.stats import mean_ci, paired_difference, wins_text

RULES = ("first-error", "lowest-prob", "random-departure", "save-prefix", "entropy")
BASELINES = ("grpo", "grpo-compute")
ADJUSTED = 1 - 0.05 / (len(RULES) * len(BASELINES))
"""The Bonferroni-adjusted level of D1's intervals (0.995)."""
IMAGE = "answers.png"
"""The answers' figure (`experiments.credit_why.figure`), beside answers.md."""
COLLAPSE = 10.0
"""Points below the warm start's sampled accuracy at which a run counts as collapsed."""
GREEDY_TOLERANCE = 2.0
"""Points below the warm start's greedy accuracy that the rate grid allowed (§2); runs ending further below
are counted per arm (descriptive, added after unblinding: GRPO's greedy mean on test was below it)."""


def aulc(curve: dict[str, float], start: float, steps: int = 30) -> float:
    """Mean accuracy (points) under a run's curve {step: accuracy}, trapezoid from step 0 (`start`) to
    `steps`, divided by `steps`."""
    pts = sorted([(0, start), *((int(k), v) for k, v in curve.items() if 0 < int(k) <= steps)])
    if pts[-1][0] != steps:
        raise ValueError(f"the curve ends at step {pts[-1][0]}, not {steps}")
    area = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(pts))
    return 100 * area / steps


def generated_tokens(run: dict[str, Any], key: str = "oar/search_continued_tokens") -> float:
    """Mean generated tokens per step: rollouts (mean completion length × prompts per step × completions
    per prompt, the run's own: `run_settings`, whichever kind of file) plus the search's continuation
    tokens (amendment 1; `key="oar/search_tokens"`: the positions the search computed instead)."""
    own = run_settings(run)
    prompts, completions = int(own.get("prompts_per_step", 16)), int(own.get("num_generations", 8))
    per_step = [
        h["completions/mean_length"] * prompts * completions + float(h.get(key, 0.0))
        for h in run["history"]
        if "loss" in h and h.get("completions/mean_length") is not None
    ]
    return sum(per_step) / len(per_step)


def curves(runs: dict[int, dict], start: float, steps: int = 30) -> dict[str, list]:
    """An arm's learning curve over its seeds (points): {"steps", "mean", "low", "high"}, step 0 the warm
    start's accuracy on the curve's sample, then each evaluated step up to `steps` with the mean and 95%
    t-interval over seeds (a step some run lacks is an error: the curves are compared step by step)."""
    at = sorted({int(k) for r in runs.values() for k in r["curve"] if 0 < int(k) <= steps})
    out: dict[str, list] = {"steps": [0, *at], "mean": [100 * start], "low": [None], "high": [None]}
    for k in at:
        missing = [s for s, r in runs.items() if str(k) not in r["curve"]]
        if missing:
            raise ValueError(f"seeds {missing} have no step {k} on their learning curve")
        ci = mean_ci([100 * r["curve"][str(k)] for r in runs.values()])
        for key in ("mean", "low", "high"):
            out[key].append(ci[key])
    return out


def _same_load_ratio(runs: dict[str, dict[int, dict]], arm: str, same_load: set[str]) -> dict[str, Any]:
    """An arm's mean training seconds over its runs under the same load (`shared_cpu.same_load`), against
    `grpo`'s over its own such runs: {"ratio" (None if either has none), "runs", "grpo_runs"}."""

    def clean(a: str) -> list[float]:
        return [r["train_seconds"] for s, r in sorted(runs[a].items()) if f"{a}.seed{s}" in same_load]

    mine, base = clean(arm), clean("grpo")
    ratio = (sum(mine) / len(mine)) / (sum(base) / len(base)) if mine and base else None
    return {"ratio": ratio, "runs": len(mine), "grpo_runs": len(base)}


def _settings(runs: dict[int, dict]) -> dict[str, Any]:
    """The learning rate, prompts per step and completions per prompt an arm's runs trained with (their
    own, `run_settings`); an error if its runs differ."""
    out = {}
    for key, default in (("learning_rate", None), ("prompts_per_step", 16), ("num_generations", 8)):
        got = {run_settings(r).get(key, default) for r in runs.values()}
        if len(got) != 1:
            raise ValueError(f"the runs of one arm trained with several {key}: {sorted(got)}")
        out[key] = got.pop()
    return out


def _rate(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


def split_gain(runs: dict[int, dict], warm: dict[str, Any], right: list[bool]) -> dict:
    """Each run's gain (points) over the warm start's sampled accuracy on the problems the warm start got
    right greedily, and on those it got wrong, from per-problem counts out of the same samples per problem
    (`warm["samples"]`, the runs' too); mean and t-interval over seeds."""
    warm_counts, samples = warm["per_problem"]["sampled"], int(warm.get("samples", 4))
    for s, r in runs.items():
        got = r["final"]["per_problem"]["sampled"]
        total = int(r["final"].get("samples", len(got) * samples))  # problems × samples per problem
        if len(got) != len(warm_counts) or total != len(got) * samples:
            raise ValueError(
                f"seed {s}: {len(got)} problems, {total} samples; the warm start's {len(warm_counts)} × "
                f"{samples}: the per-problem split needs the same sample"
            )
    out = {}
    for name, want in (("warm_right", True), ("warm_wrong", False)):
        idx = [i for i, r in enumerate(right) if r == want]
        if not idx:
            out[name] = {"problems": 0}
            continue
        start = 100 * sum(warm_counts[i] for i in idx) / (samples * len(idx))
        gains = [
            100 * sum(r["final"]["per_problem"]["sampled"][i] for i in idx) / (samples * len(idx)) - start
            for r in runs.values()
        ]
        out[name] = {"problems": len(idx), "warm_start": start, **mean_ci(gains)}
    return out


def answers(
    runs: dict[str, dict[int, dict]],
    warm: dict[str, Any],
    seeds: tuple[int, ...],
    same_load: set[str] | None = None,
) -> dict[str, Any]:
    """The pre-registered answers from the confirmation's runs {arm: {seed: run}} and the warm start's
    test figures (`warm_start.json`'s "test"). `same_load`: the run keys ("arm.seedN") that trained under
    the same load (`shared_cpu.same_load`: the other confirmation process beside them, nothing else); the
    seconds ratio over those is reported beside the one over every run (None: not reported)."""
    arms = (*BASELINES, *RULES)
    landed = {a: sorted(runs.get(a, {})) for a in arms}
    if any(set(landed[a]) != set(seeds) for a in arms):
        return {"blinded": True, "landed": landed}

    def final(arm: str, key: str) -> dict[int, float]:
        return {s: 100 * r["final"][key] for s, r in runs[arm].items()}

    warm_sampled, warm_greedy = 100 * warm["sampled"], 100 * warm["greedy"]
    right = [c > 0 for c in warm["per_problem"]["greedy"]]
    rec: dict[str, Any] = {"blinded": False, "warm_start": {"sampled": warm_sampled, "greedy": warm_greedy}}
    if "problems" in warm:  # the final accuracy's sample: problems × samples per problem
        rec["final_sample"] = [int(warm["problems"]), int(warm.get("samples", 4))]

    def cost(arm: str) -> dict[str, dict[str, Any]]:
        got = runs[arm].values()
        return {
            "train_seconds": mean_ci([r["train_seconds"] for r in got]),
            "tokens_per_step": mean_ci([generated_tokens(r) for r in got]),
            "computed_tokens": mean_ci([generated_tokens(r, "oar/search_tokens") for r in got]),
        }

    grpo_cost = cost("grpo")
    rows = {}
    for arm in arms:
        got, spent = runs[arm], cost(arm)
        row: dict[str, Any] = {
            "sampled": mean_ci(list(final(arm, "sampled").values())),
            "greedy": mean_ci(list(final(arm, "greedy").values())),
            "aulc": mean_ci([aulc(r["curve"], warm["curve"]) for r in got.values()]),
            "collapsed": sum(v < warm_sampled - COLLAPSE for v in final(arm, "sampled").values()),
            "greedy_below": sum(v < warm_greedy - GREEDY_TOLERANCE for v in final(arm, "greedy").values()),
            "train_seconds": spent["train_seconds"],
            "tokens_per_step": spent["tokens_per_step"],
            "seconds_ratio": spent["train_seconds"]["mean"] / grpo_cost["train_seconds"]["mean"],
            "tokens_ratio": spent["tokens_per_step"]["mean"] / grpo_cost["tokens_per_step"]["mean"],
            # the positions the search computed (rejected drafts included) against grpo's generated tokens
            "computed_tokens_ratio": spent["computed_tokens"]["mean"] / grpo_cost["tokens_per_step"]["mean"],
            "split_vs_warm_start": split_gain(got, warm, right),
            "settings": _settings(got),
        }
        if same_load is not None:
            row["seconds_same_load"] = _same_load_ratio(runs, arm, same_load)
        if arm != "grpo":
            for base in BASELINES if arm in RULES else ("grpo",):
                row[f"vs_{base}"] = paired_difference(final(arm, "sampled"), final(base, "sampled"))
                row[f"vs_{base}_adjusted"] = paired_difference(
                    final(arm, "sampled"), final(base, "sampled"), level=ADJUSTED
                )
            row["greedy_vs_grpo"] = paired_difference(final(arm, "greedy"), final("grpo", "greedy"))
        rows[arm] = row
    rec["arms"] = rows
    rec["baselines_learned"] = {  # each GRPO arm's gain over the warm start on the same samples (points)
        b: {
            "sampled": mean_ci([v - warm_sampled for v in final(b, "sampled").values()]),
            "greedy": mean_ci([v - warm_greedy for v in final(b, "greedy").values()]),
        }
        for b in BASELINES
    }
    rec["curves"] = {arm: curves(runs[arm], warm["curve"]) for arm in arms}
    rec["curve_sample"] = list(warm.get("curve_sample", []))
    rec["D1"] = {r: all(rows[r][f"vs_{b}_adjusted"]["low"] > 0 for b in BASELINES) for r in RULES}
    d2 = paired_difference(final("first-error", "sampled"), final("random-departure", "sampled"))
    d3 = paired_difference(final("first-error", "sampled"), final("lowest-prob", "sampled"))
    rec["D2"] = {"paired": d2, "location": d2["low"] > 0}
    rec["D3"] = {"paired": d3, "distinguishable": d3["low"] > 0 or d3["high"] < 0}
    rec["contrasts"] = {  # pre-registered, descriptive (95%, paired)
        f"{x} − {y}": paired_difference(final(x, "sampled"), final(y, "sampled"))
        for x, y in (("save-prefix", "first-error"), ("first-error", "entropy"))
    }
    return rec


def _curve_sample(rec: dict[str, Any]) -> str:
    cs = rec.get("curve_sample") or []
    return f"{cs[0]} problems × {cs[1]} samples" if len(cs) == 2 else "the curve's sample"


def ci_text(d: dict[str, Any] | None, signed: bool = True) -> str:
    """A mean with its interval as the answers print it, `−` for minus."""
    return fmt_ci(d, signed=signed).replace("-", "−")


def _d1_text(rec: dict[str, Any]) -> str:
    """D1's reading under its table: what the intervals allow, and the rates the arms trained at."""
    a = rec["arms"]
    beaten = [r for r in RULES if rec["D1"][r]]
    if beaten:
        text = f"D1: {', '.join(beaten)} above both GRPO arms (99.5%)."
    else:
        fe = ci_text(a["first-error"]["vs_grpo_adjusted"])
        text = ("D1: no rule's adjusted interval is above 0 against both GRPO arms. That is a failure to "
                f"reject, not a shown equality: first-error − grpo {fe} at 99.5%.")  # fmt: skip
    rates = sorted({x["settings"]["learning_rate"] for x in a.values()})
    if len(rates) > 1:
        at = {q: ", ".join(n for n, x in a.items() if x["settings"]["learning_rate"] == q) for q in rates}
        text += (" The arms trained at unequal rates: " + "; ".join(f"{at[q]} at {_rate(q)}" for q in rates)
                 + " (each rule's rate chosen on the validation grid); Amendment 3 compares first-error and "
                 "GRPO at equal rates.")  # fmt: skip
    return text


def _d2_text(rec: dict[str, Any]) -> str:
    """D2's line: the pre-registered condition, said as the necessary condition it is, beside the
    control's own difference to GRPO."""
    d2, a = rec["D2"], rec["arms"]
    met = "met (**yes**)" if d2["location"] else "not met (no)"
    return (
        f"- **D2, location**: first-error − random-departure {ci_text(d2['paired'])}, "
        f"{wins_text(d2['paired'])} seeds ahead: the pre-registered condition is {met}, a necessary "
        "condition for crediting the location of the error, not a sufficient one. Its control, "
        f"random-departure, is itself {ci_text(a['random-departure']['vs_grpo'])} against GRPO (95%), and "
        f"first-error {ci_text(a['first-error']['vs_grpo'])}: blaming the located error avoids the harm "
        "of blaming a random off-greedy token; it is not shown to add to GRPO."
    )


def markdown(rec: dict[str, Any], seeds: tuple[int, ...]) -> str:
    """The answers page: the decisions, then one table of every arm (the figures above, in points)."""
    if rec["blinded"]:
        return progress_markdown(rec["landed"], list(seeds), "Issue 48's confirmation")
    a, w = rec["arms"], rec["warm_start"]
    yes = {True: "**yes**", False: "no"}
    lines = [
        "# Issue 48's confirmation: the answers",
        "",
        f"![Issue 48's answers: paired differences and learning curves]({IMAGE})",
        "",
        f"Test split, 500 problems × 4 samples at T = 1 per run, seeds {seeds[0]}–{seeds[-1]}; warm start "
        f"{w['sampled']:.1f}% sampled, {w['greedy']:.1f}% greedy. Points; paired by seed. The figure: the "
        "paired differences of final sampled accuracy (on that sample) above, the learning curves below "
        f"(every 5 steps, on {_curve_sample(rec)}).",
        "",
        "Did the baselines learn? Gain over the warm start on the same samples, mean over seeds (95%): "
        + "; ".join(
            f"{b} {ci_text(g['sampled'])} sampled, {ci_text(g['greedy'])} greedy"
            for b, g in rec["baselines_learned"].items()
        )
        + ".",
        "",
        "| rule | vs grpo (99.5%) | vs grpo-compute (99.5%) | beats both (D1) | vs grpo (95%) "
        "| vs grpo-compute (95%) |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for r in RULES:
        cells = [r, ci_text(a[r]["vs_grpo_adjusted"]), ci_text(a[r]["vs_grpo-compute_adjusted"]),
                 yes[rec["D1"][r]], ci_text(a[r]["vs_grpo"]), ci_text(a[r]["vs_grpo-compute"])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    d3 = rec["D3"]
    lines += [
        "",
        _d1_text(rec),
        "",
        _d2_text(rec),
        f"- **D3, the search**: first-error − lowest-prob {ci_text(d3['paired'])}, {wins_text(d3['paired'])} "
        f"seeds ahead: distinguishable: {yes[d3['distinguishable']]}.",
        *(
            f"- {name}: {ci_text(d)}, {wins_text(d)} seeds ahead (descriptive)."
            for name, d in rec["contrasts"].items()
        ),
        "",
        "| arm | sampled | greedy | vs grpo (95%) | greedy vs grpo | AULC | collapsed | greedy down "
        "| gain over warm start: greedy-right problems | greedy-wrong problems |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in a.items():
        split = r["split_vs_warm_start"]
        cells = [
            name, ci_text(r["sampled"], False), ci_text(r["greedy"], False), ci_text(r.get("vs_grpo")),
            ci_text(r.get("greedy_vs_grpo")), ci_text(r["aulc"], False), f"{r['collapsed']}/{len(seeds)}",
            f"{r['greedy_below']}/{len(seeds)}",
            ci_text(split.get("warm_right")), ci_text(split.get("warm_wrong")),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Collapsed: final sampled accuracy more than {COLLAPSE:g} points below the warm start's. "
        f"Greedy down: final greedy accuracy more than {GREEDY_TOLERANCE:g} points below the warm start's "
        "(the grid's tolerance; descriptive, added after unblinding). AULC: mean sampled accuracy under the "
        "learning curve, steps 0–30.",
        "",
        "**Cost**, from the same runs, as ratios to `grpo`'s means:",
        "",
        "| arm | train s (mean) | × grpo, every run | × grpo, runs under the same load (runs) "
        "| generated tokens per step | × grpo | positions computed × grpo |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in a.items():
        u = r.get("seconds_same_load")
        clean = "–"
        if u is not None:
            ratio = "–" if u["ratio"] is None else f"{u['ratio']:.2f}"
            clean = f"{ratio} ({u['runs']} and {u['grpo_runs']})"
        cells = [name, f"{r['train_seconds']['mean']:.0f}", f"{r['seconds_ratio']:.2f}", clean,
                 f"{r['tokens_per_step']['mean']:.0f}", f"{r['tokens_ratio']:.2f}",
                 f"{r['computed_tokens_ratio']:.2f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Generated tokens: rollouts plus the search's continuations per step; the ratios are of means over "
        "seeds (GRPO at first-error's compute was sized on first-error's grid runs, a mean of per-step "
        "ratios). Runs under the same load: the other confirmation process beside them throughout and no "
        "window of other work (`confirm/shared-cpu.json`, the run log); in brackets the arm's and grpo's "
        "counts of such runs.",
    ]
    return "\n".join(lines) + "\n"
