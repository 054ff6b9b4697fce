"""`python -m experiments.wordproblems_audit`: the word-problem data audit (`audit.py`), as files.

    python -m experiments.wordproblems_audit --n 3000 --out results/wordproblems-audit

Runs every check of `audit.py` on each regime, writes OUT/audit.json and OUT/audit.md (each through a
temporary file and a rename), prints a short summary and exits 1 when the audit fails: a gold answer the
reader disagrees with (or a prompt it cannot read), a prompt shared between splits, or, in the long regime,
a story or number chain shared between splits.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from experiments.wordproblems_audit.audit import TASKS, failures, run_task


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m experiments.wordproblems_audit",
        description=__doc__.split("\n")[0],
    )
    p.add_argument(
        "--n", type=int, default=3000, help="problems per split stream for gold and references (default 3000)"
    )
    p.add_argument(
        "--tasks", default=",".join(TASKS), help=f"regimes, comma-separated (default {','.join(TASKS)})"
    )
    p.add_argument(
        "--teacher-n",
        type=int,
        default=None,
        help="SFT demonstrations to read (default: all of the shipped recipe's)",
    )
    p.add_argument("--out", default="results/wordproblems-audit", help="output directory")
    return p


def _rate(k: int, n: int) -> str:
    return f"{k}/{n} = {k / n:.3f}" if n else f"{k}/0"


def _task_md(r: dict[str, Any]) -> list[str]:
    t, g, refs, tea, ov = r["task"], r["gold"], r["references"], r["teacher"], r["overlap"]
    c = tea["counts"]
    out = [
        f"## {t}",
        "",
        f"Reference solutions: restated running totals {'yes' if r['restate'] else 'no'}, "
        f"direction-free clauses {'yes' if r['neutral'] else 'no'} (the regime's config).",
    ]
    out += [
        "",
        "### 1. Gold answer vs the reader",
        "",
        "| split (stream) | problems | disagreements | unreadable |",
        "|---|---|---|---|",
    ]
    out += [
        f"| {s} ({r['streams'][s]}) | {x['n']} | {x['disagreements']} | {x['unreadable']} |"
        for s, x in g.items()
    ]
    out += [f"\nExample: `{e}`" for x in g.values() for e in x["examples"]]
    out += [
        "",
        "### 2. Reference solutions, step by step",
        "",
        "| split | solutions | equations | restated totals | failing solutions | failed checks |",
        "|---|---|---|---|---|---|",
    ]
    out += [
        f"| {s} | {x['n']} | {x['steps']} | {x['restates']} | {x['bad_solutions']} | "
        f"{', '.join(f'{k} {v}' for k, v in x['failed_checks'].items()) or '-'} |"
        for s, x in refs.items()
    ]
    out += [f"\nExample: `{e}`" for x in refs.values() for e in x["examples"][:1]]
    conf = tea["configured"]
    out += [
        "",
        f"### 3. The SFT teacher's demonstrations (recipe `{tea['recipe']}`, {tea['problems']} problems, "
        f"seed {tea['seed']})",
        "",
        "| measure | count | effective rate | configured |",
        "|---|---|---|---|",
    ]
    if c.get("trap_problems") or conf["misread_prob"]:
        out.append(
            f"| misread, trap problems | {_rate(c.get('misread_problems', 0), c.get('trap_problems', 0))} | "
            f"{tea['misread_rate']} | {conf['misread_prob']} |"
        )
    for k, v in tea["misread_rate_by_kind"].items():
        out.append(
            f"| misread, `{k}` traps | {_rate(c[f'misread:{k}'], c[f'trap:{k}'])} | {v} "
            f"| {conf['misread_prob']} |"
        )
    out += [
        f"| slips per written result | {_rate(c['slips'], c['results'])} | {tea['slip_rate_per_result']} | "
        f"{conf['slip_prob']} |",
        f"| demonstrations with a wrong answer | {_rate(c['answer_wrong'], c['problems'])} | | |",
        f"| wrong answer without a slip or misread | {c['answer_wrong_without_slip_or_misread']} | | |",
        f"| neither a slip nor a misread (unexplained) | {c.get('bad', 0)} | | |",
        f"| prompts whose gold the reader disagrees with | {c['gold_disagreements']} | | |",
        "",
        f"Demonstrations' prompts equal the train stream's: {tea['prompts_equal_train_stream']}.",
    ]
    if tea["configured"]["misread_prob"]:
        out += [
            "",
            "The effective misread rate is below the configured one: a misread that would take the "
            "stock below zero (a gain read as a loss), or a later step that would, makes the teacher "
            "write the clean steps instead (`teacher_slips`).",
        ]
    sz = ov["sizes"]
    out += [
        "",
        f"### 4. Split overlap (sizes the studies use: train {sz['train']}, validation {sz['validation']}, "
        f"test {sz['test']}; SFT stream {sz['sft']})",
        "",
        "| pair | by prompt | by story | by number chain |",
        "|---|---|---|---|",
    ]
    out += [f"| {p} | {x['prompt']} | {x['story']} | {x['chain']} |" for p, x in ov["pairs"].items()]
    if not r["structure_overlap_fails"]:
        out += [
            "",
            "This regime's generator keeps only prompts apart; shared stories and chains are counted, "
            "not failed (its small number space repeats them by chance).",
        ]
    out += [
        "",
        "Gold disagreements on these rows: "
        + ", ".join(f"{k} {v}" for k, v in ov["gold_disagreements"].items())
        + ".",
    ]
    out += [
        "",
        "### 5. Story inconsistencies (another person gives away more than the story says they have)",
        "",
        "| split | problems | inconsistent stories |",
        "|---|---|---|",
    ]
    out += [f"| {s} | {x['n']} | {x['inconsistent_stories']} |" for s, x in g.items()]
    ex = next((e for x in g.values() for e in x["inconsistency_examples"]), None)
    if ex:
        out += ["", f"Example ({ex['split']} #{ex['index']}): {ex['prompt']} -- {'; '.join(ex['issues'])}"]
    return [*out, ""]


def markdown(record: dict[str, Any]) -> str:
    fails = record["failures"]
    lines = [
        "# Word-problem data audit",
        "",
        f"`{record['command']}`",
        "",
        f"{record['date']}, {record['wall_seconds']} s on {record['cpu']} ({record['cpu_count']} cores). "
        "Reader: `experiments/wordproblems_audit/reader.py` (text only; never the generator's solver).",
        "",
        f"**Verdict: {'FAIL' if fails else 'pass'}**" + ("" if not fails else ": " + "; ".join(fails)),
        "",
    ]
    for r in record["tasks"]:
        lines += _task_md(r)
    return "\n".join(lines)


def summary(r: dict[str, Any]) -> str:
    c, tea, pairs = r["teacher"]["counts"], r["teacher"], r["overlap"]["pairs"].values()
    gold = sum(x["disagreements"] for x in r["gold"].values())
    refs = sum(x["bad_solutions"] for x in r["references"].values())
    over = {by: sum(x[by] for x in pairs) for by in ("prompt", "story", "chain")}
    misread = ""
    if c.get("trap_problems"):
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in tea["misread_rate_by_kind"].items())
        misread = f"misread {c['misread_problems']}/{c['trap_problems']} trap problems ({kinds}), "
    counted = "" if r["structure_overlap_fails"] else " (stories, chains counted, not failed)"
    return (
        f"{r['task']}: gold disagreements {gold}/{3 * r['n']}; bad reference solutions {refs}; "
        f"teacher {misread}slips {c['slips']}/{c['results']} = {tea['slip_rate_per_result']:.3f} per result; "
        f"overlaps by prompt/story/chain {over['prompt']}/{over['story']}/{over['chain']}{counted}; "
        f"inconsistent stories {sum(x['inconsistent_stories'] for x in r['gold'].values())}"
    )


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from oar_rl.io import write_text_atomic
    from oar_rl.machine import cpu_model

    tasks = [t.strip() for t in a.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise SystemExit(f"unknown task(s) {unknown}; valid: {', '.join(TASKS)}")
    t0 = time.perf_counter()
    results = [run_task(t, a.n, teacher_n=a.teacher_n) for t in tasks]
    fails = [f for r in results for f in failures(r)]
    cmd = f"python -m experiments.wordproblems_audit --n {a.n} --out {a.out}"
    cmd += "" if a.tasks == build_parser().get_default("tasks") else f" --tasks {a.tasks}"
    cmd += "" if a.teacher_n is None else f" --teacher-n {a.teacher_n}"
    record = {
        "command": cmd,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "failures": fails,
        "tasks": results,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "audit.json", json.dumps(record, indent=1) + "\n")
    write_text_atomic(out / "audit.md", markdown(record))
    for r in results:
        print(summary(r))
    print(f"{'FAIL' if fails else 'pass'} ({record['wall_seconds']} s): {out / 'audit.md'}")
    for f in fails:
        print("  " + f)
    return 1 if fails else 0
