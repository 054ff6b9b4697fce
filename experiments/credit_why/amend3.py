"""Amendment 3 of `results/credit-why/PREREGISTRATION.md` (issue 56): its settings, derived from the
confirmation's committed run files before any of its runs, and its answers once they are all in.

The settings (:func:`derive`, `python -m experiments.credit_why amend3`, `results/credit-why/amend3.json`
and `amend3.md`):

- **GRPO on first-error's seconds** (:func:`seconds_matched`): GRPO's mean training seconds over its runs
  under the same load (`shared_cpu.same_load`) as a straight line in prompts per step through its two
  measured arms, `grpo` (16) and `grpo-compute` (30), each its mean over such runs; the prompts per step
  at which the line reaches first-error's mean over its own such runs, rounded to the nearest integer.
- **GRPO on more samples** (:func:`samples_matched`): 16 prompts × the completions per prompt that give
  `grpo-compute`'s mean generated tokens per step: round(8 × its tokens / `grpo`'s), every run (tokens do
  not depend on the load).
- **What 10 seeds can detect** (:func:`detectable`): the smallest true paired difference a two-sided 95%
  paired t-test over 10 seeds detects with 80% power, from the paired SDs observed for the nearest
  contrasts already run (first-error − grpo for the rule contrasts, grpo-compute − grpo for the prompts
  versus samples one), sampled and greedy.
- **The budget** (:func:`budget`): each new arm's run as its nearest measured arm's mean wall seconds
  (train and evaluation, every run): first-error at 2e-4 as first-error's, GRPO at 1e-4 as GRPO's,
  `grpo-samples` as `grpo-compute`'s (the same completions per step), `grpo-seconds` on the line through
  GRPO's two arms; × 10 seeds.

The answers (:func:`answers`, in `answers.{json,md}`): the four pre-registered contrasts (:func:`contrasts`),
each paired by seed, sampled and greedy, 95% (and the Bonferroni 98.75% over the four sampled ones),
read only once every run of the amendment is in; before, which runs have landed.
"""

from __future__ import annotations

import statistics
from typing import Any

from experiments.credit_why.answers import _same_load_ratio, ci_text, generated_tokens
from experiments.credit_why.plan import SAMPLES_COMPLETIONS, SECONDS_PROMPTS, _lr, amendment3_names
from oar_rl.study.provenance import run_settings
from oar_rl.study.stats import mean_ci, minimum_detectable_effect, paired_difference, wins_text

ADJUSTED = 1 - 0.05 / 4
"""The Bonferroni level over the amendment's four sampled contrasts (0.9875), reported beside."""
POWER = 0.8
SEEDS = 10


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs)


def _same_load_seconds(runs: dict[int, dict], arm: str, same_load: set[str]) -> list[float]:
    return [r["train_seconds"] for s, r in sorted(runs.items()) if f"{arm}.seed{s}" in same_load]


def _prompts(runs: dict[int, dict]) -> int:
    got = {int(run_settings(r).get("prompts_per_step", 16)) for r in runs.values()}
    if len(got) != 1:
        raise ValueError(f"the runs of one arm trained on several prompts per step: {sorted(got)}")
    return got.pop()


def seconds_matched(runs: dict[str, dict[int, dict]], same_load: set[str]) -> dict[str, Any]:
    """The prompts per step at which GRPO trains for first-error's seconds (the module docstring)."""
    sec = {a: _same_load_seconds(runs[a], a, same_load) for a in ("grpo", "grpo-compute", "first-error")}
    mean = {a: _mean(v) for a, v in sec.items()}
    p0, p1 = _prompts(runs["grpo"]), _prompts(runs["grpo-compute"])
    slope = (mean["grpo-compute"] - mean["grpo"]) / (p1 - p0)
    exact = p0 + (mean["first-error"] - mean["grpo"]) / slope
    arms = ("grpo", "grpo-compute", "first-error")  # a check: the seeds on which all three ran so
    common = [s for s in sorted(runs["grpo"]) if all(f"{a}.seed{s}" in same_load for a in arms)]
    c = {a: _mean([runs[a][s]["train_seconds"] for s in common]) for a in arms}
    check = p0 + (p1 - p0) * (c["first-error"] - c["grpo"]) / (c["grpo-compute"] - c["grpo"])
    return {
        "common_seeds": common, "common_seeds_exact": check,
        "seconds": mean, "runs": {a: len(v) for a, v in sec.items()},
        "prompts": {"grpo": p0, "grpo-compute": p1},
        "seconds_per_prompt": slope, "fixed_seconds": mean["grpo"] - slope * p0, "exact": exact,
        "prompts_per_step": round(exact), "proportional": p0 * mean["first-error"] / mean["grpo"],
    }  # fmt: skip


def samples_matched(runs: dict[str, dict[int, dict]]) -> dict[str, Any]:
    """The completions per prompt at which 16 prompts generate `grpo-compute`'s tokens per step."""
    tokens = {a: _mean([generated_tokens(r) for r in runs[a].values()]) for a in ("grpo", "grpo-compute")}
    gens = {int(run_settings(r).get("num_generations", 8)) for r in runs["grpo"].values()}
    (g,) = gens
    exact = g * tokens["grpo-compute"] / tokens["grpo"]
    return {"tokens_per_step": tokens, "completions": g, "exact": exact, "num_generations": round(exact),
            "prompts_per_step": _prompts(runs["grpo"]),
            "compute_completions_per_step": _prompts(runs["grpo-compute"]) * g}  # fmt: skip


def detectable(runs: dict[str, dict[int, dict]]) -> dict[str, dict[str, float]]:
    """{contrast: {metric: {"sd", "mde"}}}: the observed paired SD (points) and the smallest detectable
    paired difference at 95%, 80% power, 10 seeds."""
    out: dict[str, dict[str, Any]] = {}
    for a, b in (("first-error", "grpo"), ("grpo-compute", "grpo")):
        out[f"{a} − {b}"] = {}
        for metric in ("sampled", "greedy"):
            d = paired_difference(
                *({s: 100 * r["final"][metric] for s, r in runs[x].items()} for x in (a, b))
            )
            out[f"{a} − {b}"][metric] = {
                "sd": d["sd"],
                "mde": minimum_detectable_effect(d["sd"], SEEDS, 0.95, POWER),
            }
    return out


def budget(
    runs: dict[str, dict[int, dict]], seconds: dict[str, Any], samples: dict[str, Any]
) -> dict[str, Any]:
    """Each new arm's estimated seconds per run (wall: training and evaluation) and the total CPU-hours."""
    wall = {
        a: _mean([r["wall_seconds"] for r in runs[a].values()])
        for a in ("grpo", "grpo-compute", "first-error")
    }
    p0, p1 = seconds["prompts"]["grpo"], seconds["prompts"]["grpo-compute"]
    per_run = {
        "first-error at GRPO's rate": wall["first-error"],
        "GRPO at first-error's rate": wall["grpo"],
        "grpo-seconds": wall["grpo"]
        + (wall["grpo-compute"] - wall["grpo"]) * (SECONDS_PROMPTS - p0) / (p1 - p0),
        "grpo-samples": wall["grpo-compute"],
    }
    total = SEEDS * sum(per_run.values())
    return {"wall_seconds": wall, "per_run": per_run, "runs": SEEDS * len(per_run), "cpu_hours": total / 3600,
            "hours_two_processes": total / 3600 / 2}  # fmt: skip


def derive(runs: dict[str, dict[int, dict]], same_load: set[str]) -> dict[str, Any]:
    """The amendment's settings from the confirmation's runs; an error if the plan's constants differ."""
    sec, smp = seconds_matched(runs, same_load), samples_matched(runs)
    if (sec["prompts_per_step"], smp["num_generations"]) != (SECONDS_PROMPTS, SAMPLES_COMPLETIONS):
        raise ValueError(
            f"the run files give {sec['prompts_per_step']} prompts per step and {smp['num_generations']} "
            f"completions; plan.py fixes {SECONDS_PROMPTS} and {SAMPLES_COMPLETIONS}"
        )
    return {"seconds_matched": sec, "samples_matched": smp, "detectable": detectable(runs),
            "budget": budget(runs, sec, smp)}  # fmt: skip


def markdown_settings(rec: dict[str, Any]) -> str:
    sec, smp, bud = rec["seconds_matched"], rec["samples_matched"], rec["budget"]
    s, n = sec["seconds"], sec["runs"]
    lines = [
        "# Amendment 3's settings, from the confirmation's run files",
        "",
        "`python -m experiments.credit_why amend3` (`experiments/credit_why/amend3.py`).",
        "",
        f"- **GRPO on first-error's seconds**: mean training seconds over the runs under the same load: grpo "
        f"{s['grpo']:.1f} s ({n['grpo']} runs, {sec['prompts']['grpo']} prompts per step), grpo-compute "
        f"{s['grpo-compute']:.1f} s ({n['grpo-compute']} runs, {sec['prompts']['grpo-compute']}), "
        f"first-error {s['first-error']:.1f} s ({n['first-error']} runs). The line through GRPO's two arms: "
        f"{sec['seconds_per_prompt']:.2f} s per prompt per step, {_signed(sec['fixed_seconds'])} s at 0 "
        f"prompts; it reaches first-error's seconds at {sec['exact']:.2f} prompts per step: "
        f"**{sec['prompts_per_step']}** (8 completions each). Checks: on the seeds where all three ran under "
        f"the same load ({', '.join(map(str, sec['common_seeds']))}) {sec['common_seeds_exact']:.2f}; "
        f"proportional to prompts (the line through 0) {sec['proportional']:.2f}.",
        f"- **GRPO on more samples**: mean generated tokens per step, every run: grpo "
        f"{smp['tokens_per_step']['grpo']:.0f}, grpo-compute {smp['tokens_per_step']['grpo-compute']:.0f}; "
        f"{smp['completions']} × {smp['tokens_per_step']['grpo-compute']:.0f} / "
        f"{smp['tokens_per_step']['grpo']:.0f} = {smp['exact']:.3f}: **{smp['prompts_per_step']} prompts × "
        f"{smp['num_generations']} completions** per step "
        f"({smp['prompts_per_step'] * smp['num_generations']} completions, grpo-compute's "
        f"{smp['compute_completions_per_step']}).",
        "- **Detectable with 10 seeds** (95% two-sided paired t, 80% power, from the observed paired SDs): "
        + "; ".join(
            f"{c}: sampled {m['sampled']['mde']:.1f} (SD {m['sampled']['sd']:.1f}), greedy "
            f"{m['greedy']['mde']:.1f} (SD {m['greedy']['sd']:.1f})"
            for c, m in rec["detectable"].items()
        )
        + " points.",
        f"- **Budget**: {bud['runs']} runs; per run (wall seconds, training and evaluation, the mean of the "
        "nearest measured arm over every run): "
        + ", ".join(f"{k} {v:.0f}" for k, v in bud["per_run"].items())
        + f"; {bud['cpu_hours']:.1f} CPU-hours (one torch thread per run), about "
        f"{bud['hours_two_processes']:.1f} hours on two processes.",
    ]
    return "\n".join(lines) + "\n"


def contrasts(grpo_rate: float, first_error_rate: float) -> list[tuple[str, str, str]]:
    """The amendment's pre-registered contrasts: (name, arm, reference)."""
    fe_hi, grpo_lo, seconds, samples = amendment3_names(grpo_rate, first_error_rate)
    return [
        (f"first-error − grpo at {_lr(first_error_rate)}", "first-error", grpo_lo),
        (f"first-error − grpo at {_lr(grpo_rate)}", fe_hi, "grpo"),
        ("first-error − grpo-seconds", "first-error", seconds),
        ("grpo-compute − grpo-samples", "grpo-compute", samples),
    ]


def _verdict(d: dict[str, Any], adjusted: dict[str, Any] | None = None) -> str:
    """How a 95% interval reads; with `adjusted` (the Bonferroni 98.75% interval), a claim that holds at
    95% but not there says so (the amendment's multiplicity rule)."""
    text = "above 0" if d["low"] > 0 else "below 0" if d["high"] < 0 else "not distinguishable from 0"
    if (
        adjusted is not None
        and text != "not distinguishable from 0"
        and adjusted["low"] <= 0 <= adjusted["high"]
    ):
        text += " (not at 98.75%)"
    return text


def descriptive(grpo_rate: float, first_error_rate: float) -> list[tuple[str, str, str]]:
    """The amendment's descriptive contrasts (no decision): GRPO's two new batch shapes against `grpo`."""
    _, _, seconds, samples = amendment3_names(grpo_rate, first_error_rate)
    return [(f"{seconds} − grpo", seconds, "grpo"), (f"{samples} − grpo", samples, "grpo")]


def post_hoc(grpo_rate: float, first_error_rate: float) -> list[tuple[str, str, str]]:
    """A contrast added after the 40 runs were read (not pre-registered, no decision): first-error at
    GRPO's rate against GRPO on first-error's seconds (the amendment's E2 reads first-error at its own)."""
    fe_hi, _, seconds, _ = amendment3_names(grpo_rate, first_error_rate)
    return [(f"{fe_hi} − {seconds}", fe_hi, seconds)]


def seconds_match(runs: dict[str, dict[int, dict]], grpo_rate: float, first_error_rate: float) -> float:
    """How well `grpo-seconds` met first-error's training seconds: the median over seeds of its seconds
    over first-error-at-GRPO's-rate's, the arm run beside it on the same machine (the amendment's sizing
    came from the first 70 runs, on another machine)."""
    fe_hi, _, seconds, _ = amendment3_names(grpo_rate, first_error_rate)
    shared = sorted(set(runs[seconds]) & set(runs[fe_hi]))
    return statistics.median(
        runs[seconds][s]["train_seconds"] / runs[fe_hi][s]["train_seconds"] for s in shared
    )


def answers(
    runs: dict[str, dict[int, dict]],
    warm: dict[str, Any],
    seeds: tuple[int, ...],
    rates: tuple[float, float],
    same_load: set[str] | None = None,
) -> dict[str, Any]:
    """The amendment's answers from the confirmation's runs {arm: {seed: run}} (its arms and the arms its
    contrasts read), the warm start's test figures and (GRPO's rate, first-error's rate); {"complete":
    False, "landed"} until every run of its arms is in. `same_load`: as `answers.answers`' (the seconds
    ratio to `grpo` over the runs under the same load; None: not reported)."""
    names = amendment3_names(*rates)
    landed = {a: sorted(runs.get(a, {})) for a in names}
    if any(set(landed[a]) != set(seeds) for a in names):
        return {"complete": False, "landed": landed, "runs": sum(map(len, landed.values())),
                "of": len(names) * len(seeds)}  # fmt: skip

    def final(arm: str, key: str) -> dict[int, float]:
        return {s: 100 * r["final"][key] for s, r in runs[arm].items()}

    rows = {}
    for name, a, b in contrasts(*rates):
        row = {m: paired_difference(final(a, m), final(b, m)) for m in ("sampled", "greedy")}
        row["sampled_adjusted"] = paired_difference(final(a, "sampled"), final(b, "sampled"), level=ADJUSTED)
        row["arms"] = [a, b]
        rows[name] = row

    def paired(names: list[tuple[str, str, str]]) -> dict[str, dict[str, Any]]:  # no decision: 95% only
        return {n: {m: paired_difference(final(a, m), final(b, m)) for m in ("sampled", "greedy")}
                for n, a, b in names}  # fmt: skip

    at_fe, at_grpo = (dict(zip(rows[c[0]]["sampled"]["seeds"], rows[c[0]]["sampled"]["diffs"], strict=True))
                      for c in contrasts(*rates)[:2])  # fmt: skip
    inter = [at_grpo[s] - at_fe[s] for s in seeds]  # rule × rate: FE − GRPO at GRPO's rate minus at FE's
    arms = {}
    for a in names:
        arms[a] = {
            "sampled": mean_ci(list(final(a, "sampled").values())),
            "greedy_gain": mean_ci([v - 100 * warm["greedy"] for v in final(a, "greedy").values()]),
            "greedy_down": sum(v < 100 * warm["greedy"] - 2 for v in final(a, "greedy").values()),
            "tokens_per_step": _mean([generated_tokens(r) for r in runs[a].values()]),
            "train_seconds": _mean([r["train_seconds"] for r in runs[a].values()]),
            "tokens_ratio": _mean([generated_tokens(r) for r in runs[a].values()])
            / _mean([generated_tokens(r) for r in runs["grpo"].values()]),
        }
        if same_load is not None:
            arms[a]["seconds_same_load"] = _same_load_ratio(runs, a, same_load)
    return {"complete": True, "contrasts": rows, "descriptive": paired(descriptive(*rates)),
            "post_hoc": paired(post_hoc(*rates)), "seconds_match": seconds_match(runs, *rates), "arms": arms,
            "interaction": mean_ci(inter)}  # fmt: skip


def markdown(rec: dict[str, Any]) -> list[str]:
    """The amendment's section of answers.md."""
    head = [
        "",
        "**Amendment 3: each rule at both rates, GRPO on first-error's seconds, more prompts or more "
        "samples.**",
        "",
    ]
    if not rec["complete"]:
        got = ", ".join(f"{a} {len(s)}" for a, s in rec["landed"].items())
        return [*head, f"Not yet run: {rec['runs']} of {rec['of']} runs in ({got}); its figures are read "
                "once every run is in (`PREREGISTRATION.md`, Amendment 3)."]  # fmt: skip
    lines = [*head, "| contrast (paired by seed) | sampled (95%) | sampled (98.75%) | seeds ahead | sampled "
             "reads | greedy (95%) | greedy reads |", "|---|---:|---:|---:|---|---:|---|"]  # fmt: skip
    for name, r in rec["contrasts"].items():
        cells = [name, ci_text(r["sampled"]), ci_text(r["sampled_adjusted"]), wins_text(r["sampled"]),
                 _verdict(r["sampled"], r["sampled_adjusted"]), ci_text(r["greedy"]),
                 _verdict(r["greedy"])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    extra = [(n, r, "descriptive") for n, r in rec.get("descriptive", {}).items()]
    extra += [(n, r, "post hoc, added after the runs were read") for n, r in rec.get("post_hoc", {}).items()]
    for name, r, kind in extra:
        cells = [f"{name} ({kind})", ci_text(r["sampled"]), "–", wins_text(r["sampled"]),
                 _verdict(r["sampled"]), ci_text(r["greedy"]), _verdict(r["greedy"])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Rule × rate (first-error − GRPO at GRPO's rate minus at first-error's, sampled, "
              f"descriptive): {ci_text(rec['interaction'])}.", "",
              "Training seconds of grpo-seconds over first-error at GRPO's rate, the median over seeds (the "
              f"same machine; added after the runs were read): {rec['seconds_match']:.2f}×.", "",
              "| arm | sampled | greedy vs warm start | greedy down | generated tokens per step (× grpo) | "
              "train s (mean) | × grpo, same load (runs) |",
              "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for a, r in rec["arms"].items():
        u = r.get("seconds_same_load") or {}
        clean = "–" if u.get("ratio") is None else f"{u['ratio']:.2f} ({u['runs']} and {u['grpo_runs']})"
        lines.append(f"| {a} | {ci_text(r['sampled'], False)} | {ci_text(r['greedy_gain'])} | "
                     f"{r['greedy_down']}/{r['sampled']['n']} | "
                     f"{r['tokens_per_step']:.0f} ({r['tokens_ratio']:.2f}) | {r['train_seconds']:.0f} | "
                     f"{clean} |")  # fmt: skip
    return lines
