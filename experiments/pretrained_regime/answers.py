"""The pretrained regime's answers (`results/pretrained-regime/PREREGISTRATION.md`), from the run files.

P1 `oar-g − grpo` and P2 `oar-g − grpo-stepsN` (GRPO given OAR-G's compute: 1.3x the steps, its own
study directory), final sampled accuracy, paired by seed, two-sided 95% Student-t interval over the seeds
(`oar_rl.study.stats.paired_difference`); each decided as supported / contradicted / not distinguishable.
Reported beside them, with no claim beyond the interval: the same contrasts on greedy accuracy, P1 and
P2 without seed 0 and on the seeds whose two runs share one machine and thread count (Amendment 3),
`entropy − grpo` and `lowest-prob − grpo` (stage 2, where the plan has one), each arm's gain over the
warm start on the same test sample, each run's machine, and training seconds as a ratio to GRPO's (the
median over the seeds whose two runs share a machine and thread count; each arm's median per machine:
Amendment 2 lets runs be made on more than one).

    python -m experiments.pretrained_regime.answers --out results/pretrained-regime --plan steps30

Two plans (`PLANS`): `steps20`, the pre-registration as first written (20 steps, seeds 0-9, folders
`confirm/` and `grpo-steps26/`, answers in `answers.{json,md}`), never run because GRPO missed its bar;
and `steps30`, its Amendment 1 (30 steps, seeds 0-5, folders `confirm30/` and `grpo-steps39/`, answers in
`answers30.{json,md}`). Reads the plan's two folders' `runs/*.json` and `<confirm>/warm_start.json`;
writes the answers (write, then rename). A run file whose protocol differs from its arm's other files, or
whose steps are not its arm's, stops it: results of two protocols never mix.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.leaderboard.regimes import comparable_seeds, load_runs
from experiments.pretrained_regime.plan import PLANS, Plan
from oar_rl.io import write_text_atomic
from oar_rl.machine import machine_line
from oar_rl.study.stats import paired_difference


def load_arms(out: Path, plan: Plan) -> dict[str, dict[int, dict[str, Any]]]:
    """{arm: {seed: run record}} from both folders (`load_runs`: one protocol per folder, checked there);
    the compute arm is the second folder's grpo."""
    arms = dict(load_runs(out, f"{plan.confirm}/runs"))
    other = load_runs(out, f"{plan.compute_arm}/runs")
    if set(other) - {"grpo"}:
        raise ValueError(
            f"{plan.compute_arm}/runs: variants {sorted(set(other) - {'grpo'})} have no arm in this plan"
        )
    if "grpo" in other:
        arms[plan.compute_arm] = other["grpo"]
    check_protocols(arms, plan)
    return arms


def check_protocols(arms: dict[str, dict[int, dict[str, Any]]], plan: Plan) -> None:
    """The plan's arms differ only where it says: the same protocol but for the compute arm's `steps` (one
    learning rate among them), each arm at its plan's steps, no per-arm overrides. ValueError names the
    first run that breaks it."""
    ref = None
    for arm, runs in sorted(arms.items()):
        want = plan.compute_steps if arm == plan.compute_arm else plan.steps
        for seed, rec in sorted(runs.items()):
            if rec.get("overrides"):
                raise ValueError(
                    f"{arm} seed {seed}: overrides {rec['overrides']}; the plan's arms have none"
                )
            steps = rec.get("protocol", {}).get("steps")
            if steps != want:
                raise ValueError(
                    f"{arm} seed {seed}: {steps} steps; plan {plan.name} trains {arm} for {want}"
                )
            proto = {k: v for k, v in rec.get("protocol", {}).items() if k != "steps"}
            if ref is None:
                ref = (arm, seed, proto)
            elif proto != ref[2]:
                diff = sorted(k for k in {*proto, *ref[2]} if proto.get(k) != ref[2].get(k))
                raise ValueError(
                    f"{arm} seed {seed} differs from {ref[0]} seed {ref[1]} in {', '.join(diff)}: the plan's "
                    "arms share every setting but the compute arm's steps"
                )


def decide(d: dict[str, Any]) -> str:
    """The pre-registered reading of a paired difference's 95% interval."""
    if d["low"] is None:
        return "no interval (fewer than 2 seeds)"
    if d["low"] > 0:
        return "supported"
    if d["high"] < 0:
        return "contradicted"
    return "not distinguishable"


def _metric(runs: dict[int, dict[str, Any]], key: str, seeds: tuple[int, ...]) -> dict[int, float]:
    return {s: float(r["final"][key]) for s, r in runs.items() if s in seeds}


def machine(rec: dict[str, Any]) -> str:
    """What a run's seconds depend on, as its run file records it (`oar_rl.machine.machine_line`: CPU,
    kernel capability, cores, torch threads, torch and BLAS)."""
    return machine_line(rec.get("machine"))


def seconds_ratio(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], seeds: list[int]):
    """(median of a's training seconds over b's, over the seeds whose two runs may be compared
    (`comparable_seeds`: one machine and thread count); how many seeds that is); (None, 0) if none."""
    same = comparable_seeds(a, b, seeds)
    if not same:
        return None, 0
    return statistics.median(a[s]["train_seconds"] / b[s]["train_seconds"] for s in same), len(same)


def answers(out: Path, plan: Plan = PLANS["steps30"]) -> dict[str, Any]:
    arms = load_arms(out, plan)
    warm = json.loads((out / plan.confirm / "warm_start.json").read_text())["accuracy"]
    result: dict[str, Any] = {
        "plan": {"name": plan.name, "steps": plan.steps, "compute_steps": plan.compute_steps,
                 "seeds": list(plan.seeds)},
        "warm_start": warm, "arms": {}, "contrasts": [],
    }  # fmt: skip
    for arm, runs in sorted(arms.items()):
        seeds = sorted(runs)
        sampled = [runs[s]["final"]["sampled"] for s in seeds]
        greedy = [runs[s]["final"]["greedy"] for s in seeds]
        result["arms"][arm] = {
            "seeds": seeds,
            "sampled": statistics.fmean(sampled),
            "greedy": statistics.fmean(greedy),
            "gain_sampled": statistics.fmean(sampled) - warm["sampled"],
            "gain_greedy": statistics.fmean(greedy) - warm["greedy"],
            "train_seconds": {
                m: statistics.median(runs[s]["train_seconds"] for s in seeds if machine(runs[s]) == m)
                for m in sorted({machine(runs[s]) for s in seeds})
            },
            "machines": {s: machine(runs[s]) for s in seeds},
        }
    grid = out / plan.seed0_reference  # GRPO's bar test run (PLAN.md): the same seed and protocol
    if grid.is_file() and 0 in arms.get("grpo", {}):
        result["grpo_seed0"] = {
            "grid": json.loads(grid.read_text())["final"],
            "confirm": arms["grpo"][0]["final"],
        }
    for label, a, b, what in plan.contrasts():
        if a not in arms or b not in arms:
            missing = " and ".join(x for x in (a, b) if x not in arms)
            result["contrasts"].append({
                "label": label, "treatment": a, "reference": b, "what": what, "metric": "sampled",
                "subset": "", "n": 0, "mean": None, "low": None, "high": None, "sd": None, "mde80": None,
                "wins": 0, "p": None, "seconds_ratio": None, "seconds_seeds": 0,
                "decision": f"no run files of {missing}",
            })  # fmt: skip
            continue
        complete = set(plan.seeds) <= set(arms[a]) and set(plan.seeds) <= set(arms[b])
        rest = f"seeds {plan.seeds[1]}-{plan.seeds[-1]}"
        subsets = [(plan.seeds, "")] + ([(plan.seeds[1:], rest)] if label in ("P1", "P2") else [])
        one = tuple(comparable_seeds(arms[a], arms[b], plan.seeds))  # Amendment 3: one machine and threads
        if label in ("P1", "P2") and len(one) >= 2 and all(set(one) != set(s) for s, _ in subsets):
            subsets.append((one, "one machine: seeds " + ", ".join(map(str, one))))
        for key in ("sampled", "greedy"):
            for seeds, note in subsets:
                d = paired_difference(
                    _metric(arms[a], key, seeds), _metric(arms[b], key, seeds), bounds=(-1, 1)
                )
                shared = d["seeds"]
                ratio, same = seconds_ratio(arms[a], arms[b], shared)
                decision = "reported"
                if label in ("P1", "P2") and key == "sampled" and not note:
                    decision = decide(d) if complete else f"incomplete ({len(shared)} of {len(plan.seeds)})"
                result["contrasts"].append({
                    "label": label, "treatment": a, "reference": b, "what": what, "metric": key,
                    "subset": note, "n": len(shared), "mean": d["mean"], "low": d["low"], "high": d["high"],
                    "sd": d["sd"], "mde80": d["mde80"], "wins": d["wins"], "p": d["p"],
                    "seconds_ratio": ratio, "seconds_seeds": same, "decision": decision,
                })  # fmt: skip
    return result


def _pts(x: float | None, signed: bool = True) -> str:
    return "–" if x is None else (f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}")


def markdown(res: dict[str, Any]) -> str:
    w, plan = res["warm_start"], res["plan"]
    lines = [
        "# The pretrained regime: OAR-G against GRPO (answers)",
        "",
        "`python -m experiments.pretrained_regime.answers --out results/pretrained-regime --plan "
        f"{plan['name']}`, from the run files; the plan: `PREREGISTRATION.md`. SmolLM2-135M-Instruct, LoRA "
        f"SFT warm start, short word problems, {plan['steps']} steps of 8 x 8 (grpo-steps"
        f"{plan['compute_steps']}: {plan['compute_steps']}), seeds {plan['seeds'][0]}-{plan['seeds'][-1]}, "
        "final accuracy on 150 test problems x 2 samples at T = 1 and greedy; points.",
        "",
        f"Warm start: {_pts(w['sampled'], False)} sampled, {_pts(w['greedy'], False)} greedy.",
        "",
    ]
    if "grpo_seed0" in res:
        g, c = res["grpo_seed0"]["grid"], res["grpo_seed0"]["confirm"]
        lines += [
            f"GRPO's seed 0, the bar's test run against this folder's: {_pts(g['sampled'], False)} and "
            f"{_pts(c['sampled'], False)} sampled, {_pts(g['greedy'], False)} and {_pts(c['greedy'], False)} "
            "greedy.",
            "",
        ]
    lines += [
        "Each arm over its own seeds (the contrasts below pair them by seed).",
        "",
        "| arm | seeds | sampled | greedy | gain sampled | gain greedy | median train s (machine: seeds) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for arm, a in res["arms"].items():
        secs = "; ".join(
            f"{t:.0f} ({m}: {', '.join(str(s) for s, x in a['machines'].items() if x == m)})"
            for m, t in a["train_seconds"].items()
        )
        lines.append(
            f"| {arm} | {len(a['seeds'])} | {_pts(a['sampled'], False)} | {_pts(a['greedy'], False)} | "
            f"{_pts(a['gain_sampled'])} | {_pts(a['gain_greedy'])} | {secs} |"
        )
    lines += [
        "",
        "Seconds ratio: the median over the seeds (in brackets, how many) whose two runs share a machine "
        "and thread count.",
        "",
        "| | contrast | metric | seeds | difference (95% CI) | detectable (80%) | ahead | seconds ratio | "
        "reading |",
        "|---|---|---|---:|---|---:|---:|---:|---|",
    ]
    for c in res["contrasts"]:
        ci = f"{_pts(c['mean'])} ({_pts(c['low'])}, {_pts(c['high'])})"
        sub = f" ({c['subset']})" if c["subset"] else ""
        ratio = "–" if c["seconds_ratio"] is None else f"{c['seconds_ratio']:.2f}x ({c['seconds_seeds']})"
        lines.append(
            f"| {c['label']} | {c['treatment']} − {c['reference']}{sub} | {c['metric']} | {c['n']} | {ci} | "
            f"{_pts(c['mde80'], False)} | {c['wins']}/{c['n']} | {ratio} | {c['decision']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.pretrained_regime.answers", allow_abbrev=False)
    p.add_argument("--out", default="results/pretrained-regime", help="the regime's results folder")
    p.add_argument(
        "--plan", choices=sorted(PLANS), default="steps30",
        help="steps30: PREREGISTRATION.md's Amendment 1 (the one run); steps20: the plan as first written",
    )  # fmt: skip
    a = p.parse_args(argv)
    out, plan = Path(a.out), PLANS[a.plan]
    if not (out / plan.confirm / "warm_start.json").is_file():
        p.error(
            f"--out {a.out!r}: no {plan.confirm}/warm_start.json there (plan {plan.name}'s first command "
            "makes it; see PREREGISTRATION.md)"
        )
    res = answers(out, plan)
    write_text_atomic(out / f"{plan.answers}.json", json.dumps(res, indent=2) + "\n")
    write_text_atomic(out / f"{plan.answers}.md", markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
