"""Issue 33's three questions, answered from the committed run files of both regimes, whatever they say.

1. **Does any rule beat GRPO, in either regime?** Per regime, each confirmed rule's paired difference to
   GRPO on the test split (the pre-registered criterion: its 95% t-interval lies above 0), beside its
   screen row (validation split, 5 seeds). A regime whose confirmation lacks seeds says "pending", and
   its confirmation is blinded until complete: only how many seeds of each arm have landed is shown (in
   every answer), so that the pre-registered criterion is read once, on the complete set.
2. **Does OAR's sign or size change with the regime?** OAR-G's (and first-error's) mean gap to GRPO in
   each regime, on the screen and on the confirmation, with the Welch interval of long − short (the
   regimes' seeds are unrelated); the screens' pre-registered verdict is `regimes.py`'s.
3. **Is OAR-G distinguishable from `position` in training?** OAR-G's gap minus position's, paired by seed
   (the same seeds, each against its own GRPO run), on each screen and on the long confirmation.

Also: every folder's protocol hash(es) and run count, and the command that made it. Departure from a
hand-written page: nothing here is typed in; `tests/test_answers.py` checks the arithmetic on made-up
runs and `tests/test_committed_tables.py` that the committed `answers.md` is what the run files give.

    python -m experiments.credit_long.answers   # writes results/credit-long/answers.{json,md}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.credit_long.regimes import ci_text, folder_args
from oar_rl.study.stats import wins_text

COMMANDS = {
    ("short", "screen"): "python -m experiments.credit_screen run   (stages 1-4: --stages N)",
    ("short", "confirm"): "python -m experiments.credit_screen confirm",
    ("long", "screen"): "python -m experiments.credit_long run   (stage 2: --stages 2)",
    ("long", "confirm"): "python -m experiments.credit_long confirm",
}
REGIMES = ("short", "long")
KINDS = ("screen", "confirm")


def _cell(p: dict[str, Any] | None) -> str:
    return f"{ci_text(p)} ({len(p['seeds'])})" if p else "–"


def _above(c: dict[str, Any] | None) -> bool:
    return bool(c) and c.get("low") is not None and c["low"] > 0


def rule_rows(runs: dict[str, dict[int, dict]], plan, arms: list[str], seeds: int) -> list[dict[str, Any]]:
    """Per non-GRPO arm of `arms` that has runs: its paired difference to its GRPO baseline, whether it
    is complete (`seeds` paired seeds) and whether its interval lies above 0."""
    from oar_rl.study.screen import summarize

    rows = []
    for r in summarize(runs, [plan.arm(a) for a in arms if a in runs]):
        if r["baseline"] is None:
            continue
        p = r["paired"]
        rows.append({"arm": r["arm"], "stage": r["stage"], "paired": p, "beats_grpo": _above(p),
                     "complete": bool(p) and len(p["seeds"]) >= seeds})  # fmt: skip
    return rows


def beats(rows: list[dict[str, Any]], expected: list[str], landed: dict[str, int] | None = None) -> str:
    """The regime's answer to question 1 from its confirmation's rows; while it is blinded, `landed`
    ({arm: seeds landed}, the baseline included) says how far each arm is."""
    if landed:
        return f"pending (seeds landed: {', '.join(f'{a} {n}' for a, n in landed.items())})"
    done = {r["arm"]: r for r in rows if r["complete"]}
    missing = [a for a in expected if a not in done]
    if missing:
        return f"pending ({', '.join(missing)} lack their seeds)"
    won = [a for a in expected if done[a]["beats_grpo"]]
    return f"yes: {', '.join(won)}" if won else "no"


def difference_of_gaps(runs, plan, a: str, b: str) -> dict[str, Any] | None:
    """a's gap to its baseline minus b's, paired by seed (None with fewer than 2 common seeds)."""
    from oar_rl.study.screen import gaps
    from oar_rl.study.stats import paired_difference

    ga, gb = gaps(runs, a, plan.arm(a).baseline), gaps(runs, b, plan.arm(b).baseline)
    return paired_difference(ga, gb) if len(set(ga) & set(gb)) >= 2 else None


def protocols(root: Path) -> list[dict[str, Any]]:
    """Per run folder under `root` ("screen", "confirm"): its run count by protocol hash."""
    import json

    out = []
    for kind in KINDS:
        files = sorted((root / kind / "runs").glob("*.json"))
        by_hash: dict[str, int] = {}
        for f in files:
            h = json.loads(f.read_text())["protocol_hash"]
            by_hash[h] = by_hash.get(h, 0) + 1
        if files:
            out.append({"folder": f"{root}/{kind}/runs", "kind": kind, "runs": len(files), "hashes": by_hash})
    return out


def answers(short_dir: Path, long_dir: Path) -> dict[str, Any]:
    from experiments.credit_long.plan import CREDIT_LONG
    from experiments.credit_long.regimes import cross_regime
    from experiments.credit_screen.plan import CREDIT_SCREEN
    from oar_rl.study.screen import blinded, load_runs

    plans = {"short": CREDIT_SCREEN, "long": CREDIT_LONG}
    dirs = {"short": Path(short_dir), "long": Path(long_dir)}
    runs = {(g, k): load_runs(dirs[g], k, plans[g]) for g in REGIMES for k in KINDS}
    landed: dict[str, dict[str, int]] = {}
    for g in REGIMES:  # a confirmation is read once, complete: until then only its progress is shown
        confirmed = _confirmed(dirs[g], plans[g])
        held = blinded(runs[g, "confirm"], confirmed, plans[g].confirm_seeds)
        landed[g] = {a: len(s) for a, s in (held or {}).items()}
        if not confirmed or held is not None:
            runs[g, "confirm"] = {}
    q1 = {}
    for g in REGIMES:
        plan = plans[g]
        screened = [a.name for a in plan.arms]
        confirmed = _confirmed(dirs[g], plan)
        conf_rows = rule_rows(runs[g, "confirm"], plan, confirmed, len(plan.confirm_seeds))
        q1[g] = {
            "screen": rule_rows(runs[g, "screen"], plan, screened, len(plan.screen_seeds)),
            "confirm": conf_rows,
            "answer": beats(conf_rows, [a for a in confirmed if plan.arm(a).baseline is not None], landed[g])
            if confirmed
            else "pending (no winners yet)",
        }
    q2: dict[str, Any] = {
        kind: cross_regime(runs["short", kind], runs["long", kind], ("oar-g", "first-error"))["rows"]
        for kind in KINDS
    }
    q2["screens_verdict"] = cross_regime(runs["short", "screen"], runs["long", "screen"])["verdict"]
    q3 = {
        f"{g} {k}": difference_of_gaps(runs[g, k], plans[g], "oar-g", "position")
        for g in REGIMES
        for k in KINDS
        if "position" in runs[g, k]
    }
    prot = [p | {"command": COMMANDS[g, p["kind"]]} for g in REGIMES for p in protocols(dirs[g])]
    n = {g: len(plans[g].confirm_seeds) for g in REGIMES}
    return {"q1": q1, "q2": q2, "q3": q3, "protocols": prot, "landed": landed, "confirm_seeds": n}


def _confirmed(root: Path, plan) -> list[str]:
    """The confirmation's arms (the screen's winners, the always-confirmed ones, their baselines), or []
    while the screen has named no winners."""
    from oar_rl.study.screen import confirm_arms

    try:
        return [a.name for a in confirm_arms(root, plan)]
    except ValueError:
        return []


def markdown(res: dict[str, Any]) -> str:
    """The answers page: one section per question, then the protocols."""
    lines = [
        "# Issue 33's questions, from the run files",
        "",
        "Percentage points of final sampled accuracy (T = 1); Δ: paired by seed against the arm's GRPO run; "
        "95% t-intervals over seeds. Screen: validation split, 5 seeds; confirmation: test split, 10 fresh "
        "seeds. Written by `python -m experiments.credit_long.answers`; nothing here is typed in.",
        "",
        "## 1. Does any rule beat GRPO?",
        "",
    ]
    for g in REGIMES:
        q = res["q1"][g]
        lines += [f"**{g} regime: {q['answer']}.**", "",
                  "| rule | screen stage | screen Δ (seeds) | confirmation Δ (seeds) |",
                  "|---|---:|---:|---:|"]  # fmt: skip
        conf = {r["arm"]: r for r in q["confirm"]}
        seeds = res["landed"][g]
        for r in q["screen"]:
            c = conf.get(r["arm"])
            cell = _cell(c["paired"]) if c else "–"
            if not c and r["arm"] in seeds:  # blinded while running
                cell = f"running: {seeds[r['arm']]} of {res['confirm_seeds'][g]} seeds landed"
            lines.append(f"| {r['arm']} | {r['stage']} | {_cell(r['paired'])} | {cell} |")
        lines.append("")
    lines += ["## 2. Does OAR's sign or size change with the regime?", "",
              "| rule | runs | short: Δ vs GRPO | long: Δ vs GRPO | long − short (Welch 95% CI) |",
              "|---|---|---:|---:|---:|"]  # fmt: skip
    for kind in KINDS:
        for gr in res["q2"][kind]:
            if not (gr["short"]["seeds"] and gr["long"]["seeds"]):  # a confirmation still running
                continue
            short, long = (f"{ci_text(gr[g])} (n={gr[g]['n']})" for g in REGIMES)
            lines.append(f"| {gr['rule']} | {kind} | {short} | {long} | {ci_text(gr['growth'])} |")
    lines += ["", f"The screens' pre-registered verdict (`python -m experiments.credit_long.regimes`): "
              f"**{res['q2']['screens_verdict']}**.", "",
              "## 3. Is OAR-G distinguishable from `position` in training?", "",
              "| runs | OAR-G − position, paired (95% CI) | seeds | OAR-G ahead |",
              "|---|---:|---:|---:|"]  # fmt: skip
    for where, d in res["q3"].items():
        if d is not None:
            lines.append(f"| {where} | {ci_text(d)} | {len(d['seeds'])} | {wins_text(d)} |")
    lines += ["", "## Blame and pivot recall on the long regime, with the position control", "",
              "Measured apart from training (the warm start's rollouts), each with its command in its file: "
              "`results/blame-long/blame.md` (weight on the first error vs the last result; `oar-rl blame "
              "--task wordproblems-long`) and `results/testbed-recall-long/recall.md` (recall@K of the "
              "oracle's and the ground-truth pivots, paired differences against position and random; "
              "`python -m oar_rl.study.recall --task wordproblems-long`).",
              "", "## Protocols and commands", "", "| run folder | runs | protocol hash (runs) | command |",
              "|---|---:|---|---|"]  # fmt: skip
    for p in res["protocols"]:
        hashes = ", ".join(f"`{h}` ({n})" for h, n in sorted(p["hashes"].items()))
        lines.append(f"| `{p['folder']}` | {p['runs']} | {hashes} | `{p['command']}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import json

    from oar_rl.io import ensure_writable_dir, write_text_atomic

    a = folder_args(argv, "answers", __doc__, "answers.{json,md}")
    res = answers(Path(a.short), Path(a.long))
    out = ensure_writable_dir(a.out)
    write_text_atomic(out / "answers.json", json.dumps(res, indent=1, sort_keys=True) + "\n")
    text = markdown(res)
    write_text_atomic(out / "answers.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
