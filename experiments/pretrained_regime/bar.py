"""Whether GRPO learns on the pretrained regime: `results/pretrained-regime/PLAN.md`'s bar, from run files.

The bar: GRPO's test run (seed 0, at the grid's chosen rate) at least 10 sampled points above the warm
start's and at most 2 greedy points below it, both as point estimates on the same test sample. Decided on
counts (the accuracy times the number of samples), so no float rounding can move the decision.

Reported beside it, descriptive only (one seed demonstrates learning, it does not compare methods):
Wilson 95% intervals of each accuracy, and Newcombe's interval (from the two Wilson intervals) of each gain.
The sampled samples come two a problem, so their Wilson interval treats correlated draws as independent
and is somewhat too narrow; the gains' intervals ignore that both were measured on the same problems
(a positive correlation), which makes them wider than a paired interval would be.

    python -m experiments.pretrained_regime.bar --out results/pretrained-regime
    python -m experiments.pretrained_regime.bar --out results/pretrained-regime --folder steps30

Reads `<out>/<folder>/warm_start.json` and GRPO's run file in `<out>/<folder>/runs/` (`--folder`: `rates`,
the plan's 20-step protocol, by default; `steps30`, its Amendment 2); checks the warm start against
`<out>/grpo-first/warm_start.json` (the record under the earlier protocol, which the plan says must agree)
where that file exists; writes `<out>/<folder>/bar.json` and `bar.md` there (write, then rename).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from experiments.leaderboard.regimes import load_runs
from experiments.real_model.solve_rate import wilson as solve_rate_wilson
from oar_rl.io import write_text_atomic

SAMPLED_GAIN = 10  # points, at least
GREEDY_DROP = 2  # points, at most
FOLDERS = ("rates", "steps30")  # PLAN.md's protocol, and its Amendment 2 (30 steps)
Z95 = 1.959963984540054


def wilson(count: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion `count / n` (`solve_rate.wilson`, its input checked, clamped)."""
    if n <= 0 or not 0 <= count <= n:
        raise ValueError(f"a proportion needs 0 <= count <= n and n > 0, got count={count}, n={n}")
    lo, hi = solve_rate_wilson(count, n, z)
    return max(0.0, lo), min(1.0, hi)


def newcombe(c1: int, n1: int, c0: int, n0: int) -> tuple[float, float]:
    """Newcombe's hybrid score interval of `c1/n1 - c0/n0` (independent samples)."""
    p1, p0 = c1 / n1, c0 / n0
    l1, u1 = wilson(c1, n1)
    l0, u0 = wilson(c0, n0)
    d = p1 - p0
    return d - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)


def count(acc: float, n: int, what: str) -> int:
    """The number of correct samples behind an accuracy; ValueError if `acc * n` is not a whole number."""
    c = round(acc * n)
    if abs(c - acc * n) > 1e-6:
        raise ValueError(f"{what}: accuracy {acc!r} is not a count out of {n} samples")
    return c


def grpo_run(out: Path, folder: str = "rates") -> dict[str, Any]:
    """GRPO's one test run in `<out>/<folder>/runs/` (seed 0); ValueError if there is none, or more."""
    runs = load_runs(out, f"{folder}/runs").get("grpo", {})
    if sorted(runs) != [0]:
        raise ValueError(
            f"{out / folder / 'runs'}: expected GRPO's run at seed 0 alone, found seeds {sorted(runs)}"
        )
    return runs[0]


def bar(out: Path, folder: str = "rates") -> dict[str, Any]:
    """The bar's decision and its figures (see the module docstring)."""
    run = grpo_run(out, folder)
    ws = json.loads((out / folder / "warm_start.json").read_text())["accuracy"]
    n_sampled = int(run["final"]["samples"])
    per_problem = int(run["protocol"]["eval_samples"])
    n_greedy = n_sampled // per_problem
    if n_greedy * per_problem != n_sampled:
        raise ValueError(f"{n_sampled} samples are not {per_problem} a problem")
    rows = {}
    for metric, n in (("sampled", n_sampled), ("greedy", n_greedy)):
        c1 = count(run["final"][metric], n, f"GRPO's {metric}")
        c0 = count(ws[metric], n, f"the warm start's {metric}")
        rows[metric] = {
            "n": n, "grpo": c1 / n, "warm_start": c0 / n, "gain_points": 100 * (c1 - c0) / n,
            "grpo_interval": wilson(c1, n), "warm_start_interval": wilson(c0, n),
            "gain_interval_points": tuple(100 * x for x in newcombe(c1, n, c0, n)),
            "counts": (c1, c0),
        }  # fmt: skip
    (s1, s0), (g1, g0) = rows["sampled"]["counts"], rows["greedy"]["counts"]
    met_sampled = 100 * (s1 - s0) >= SAMPLED_GAIN * n_sampled
    met_greedy = 100 * (g1 - g0) >= -GREEDY_DROP * n_greedy
    record = {
        "met": met_sampled and met_greedy, "sampled_condition": met_sampled, "greedy_condition": met_greedy,
        "folder": folder, "steps": run["protocol"]["steps"],
        "learning_rate": run["protocol"]["learning_rate"], "train_seconds": run.get("train_seconds"),
        "eval_seconds": run.get("eval_seconds"), "rows": rows, "earlier_warm_start": None,
    }  # fmt: skip
    earlier = out / "grpo-first" / "warm_start.json"
    if earlier.exists():
        acc = json.loads(earlier.read_text())["accuracy"]
        record["earlier_warm_start"] = {
            m: {"earlier": acc[m], "agrees": abs(acc[m] - ws[m]) < 1e-9} for m in rows
        }
    return record


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(rec: dict[str, Any]) -> str:
    """The bar's page."""
    folder = rec.get("folder", "rates")
    option = "" if folder == "rates" else f" --folder {folder}"
    lines = [
        "# GRPO's test run on the pretrained regime: the bar",
        "",
        f"`python -m experiments.pretrained_regime.bar --out results/pretrained-regime{option}` (`PLAN.md`).",
        "",
        f"{rec['steps']} steps, learning rate {rec['learning_rate']:g}, seed 0. Bar: at least "
        f"+{SAMPLED_GAIN} sampled points over the warm start, greedy at most {GREEDY_DROP} points below it "
        "(point estimates).",
        "",
        "| | n | warm start | GRPO | gain, points | condition |",
        "|---|---:|---|---|---|---|",
    ]
    for m, cond in (("sampled", "sampled_condition"), ("greedy", "greedy_condition")):
        r = rec["rows"][m]
        (wl, wu), (gl, gu), (dl, du) = r["warm_start_interval"], r["grpo_interval"], r["gain_interval_points"]
        lines.append(
            f"| {m} | {r['n']} | {_pct(r['warm_start'])} [{_pct(wl)}, {_pct(wu)}] | {_pct(r['grpo'])} "
            f"[{_pct(gl)}, {_pct(gu)}] | {r['gain_points']:+.1f} [{dl:+.1f}, {du:+.1f}] | "
            f"{'met' if rec[cond] else 'not met'} |"
        )
    lines += ["", f"**The bar is {'met' if rec['met'] else 'not met'}.**", ""]
    lines.append(
        "Brackets: Wilson 95% intervals; the gains' are Newcombe's, unpaired. Sampled draws come two a "
        "problem, so its intervals are somewhat too narrow; descriptive only."
    )
    if rec["earlier_warm_start"]:
        agree = all(v["agrees"] for v in rec["earlier_warm_start"].values())
        got = ", ".join(f"{m} {_pct(v['earlier'])}" for m, v in rec["earlier_warm_start"].items())
        lines += ["", f"The warm start under the earlier protocol (`grpo-first/`): {got}: "
                  f"{'the same' if agree else 'DIFFERENT from this measurement'}."]  # fmt: skip
    if rec["train_seconds"] is not None:
        lines += ["", f"GRPO's run: {rec['train_seconds']:.0f} s of training, {rec['eval_seconds']:.0f} s of "
                  "evaluation (the run file's machine)."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/pretrained-regime"))
    ap.add_argument(
        "--folder",
        default="rates",
        choices=FOLDERS,
        help="the protocol's folder under --out: rates (the plan's 20 steps), steps30 (Amendment 2)",
    )
    args = ap.parse_args(argv)
    try:
        rec = bar(args.out, args.folder)
    except (OSError, ValueError, KeyError) as e:
        print(f"pretrained-regime bar: {e}", file=sys.stderr)
        return 2
    write_text_atomic(args.out / args.folder / "bar.json", json.dumps(rec, indent=1) + "\n")
    write_text_atomic(args.out / args.folder / "bar.md", render(rec))
    print(render(rec), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
