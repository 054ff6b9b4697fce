"""The leaderboard: a summary (one row per credit rule, a Δ-and-evidence pair of columns per regime) that
fits a 1280 px page, then each regime's details, generated from the committed run files and result
records (`docs/results/leaderboard.md`). A figure whose source scored another token set than today's
default is marked (`OTHER_SCORED`), and every number prints `−`.

    python -m experiments.leaderboard            # rewrite the page (also run by `make docs`)
    python -m experiments.leaderboard --check    # exit 1 if the committed page is out of date
    python -m experiments.leaderboard --source mine=my_study --out my_leaderboard.md   # + your study

This module computes the page's cells, table and source list and is its command line. The regimes it
shows, their run folders and records, and the reading of a folder's run files are `regimes.py`'s; a
user's own `oar-rl study` folder added with `--source NAME=DIR` (checked, made a column group, its
seeds labelled, its line in the source list) is `sources.py`'s. A page written elsewhere with `--out`
links the committed docs pages relative to where it lies.

Per regime (`REGIMES`; a regime whose run files have not landed yet is listed under the table, not
shown as empty columns), each rule's:

- **Δ vs GRPO**: the paired difference of final sampled accuracy to GRPO's on the same seeds
  (percentage points, Student-t 95% interval over seeds, `oar_rl.study.stats.paired_difference`),
  computed here from the run files of the first *confirmed* source that holds the rule's default
  variant (no overrides) on all its seeds, in the regime's order (a pre-registered confirmation still
  running is blinded: none of its numbers is read until every arm in it has all its seeds, its
  progress is noted); a rule found only in a screen shows "screen only".
- **blame**: on wrong rollouts, the mean reshaping weight ω̃ on the first erroneous result vs on the
  carried last result (GRPO's is 1 on every token), and their difference with its bootstrap interval,
  under the rule's own reshaping (`oar-rl blame`'s record).
- **pivot recall@10%**: recall of the testbed's ground-truth pivots among the top 10% reasoning tokens
  by the rule's importance (AS-Mean probe for OAR), with its paired difference to the `position`
  control; "n/a" where the record has no such figure (GRPO scores nothing; `first-error` is not a
  ranking of correct trajectories; `random` is itself a control).
- **cost**: the whole training step as × GRPO's on the same machine (`oar-rl bench`), and the mean
  training time per run as × GRPO's in the same source as the Δ (same machine, shared load).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.leaderboard.regimes import (
    NA,
    REGIMES,
    SCREEN_SEEDS,
    TUNED,
    Regime,
    Source,
    default_variant,
    ground_truth,
    load_runs,
    pp_cell,
    rate_notes,
    shown_path,
    train_ratio,
)
from experiments.leaderboard.sources import SourceError, studies_note, study_cells, study_line, study_regimes

PAGE = "docs/results/leaderboard.md"
FRONT_MATTER = ("---", "hide:", "  - toc", "---", "")
"""The committed page's front matter: no table-of-contents sidebar, so the summary's column groups fit at
1280 px (`tests/test_pages.py`); a page written elsewhere has none."""
ORDER = ("grpo", "grpo-compute", "random", "entropy", "oar-g", "oar-p", "oar-gp", "grail", "first-error")
"""Row order; a rule not listed follows, alphabetically."""
CREDIT = {"grpo": "none"}
"""The bench's name of a rule (its credit mode)."""


def _arms_running(root: Path, source: Source, runs: Mapping[str, Mapping[int, Any]]) -> bool:
    """Whether a blinded source's confirmation still lacks a seed of some arm."""
    if not source.blinded:
        return False
    if source.arms:
        return any(len(runs.get(a, {})) < source.seeds for a in source.arms)
    if source.plan is None:
        return any(len(got) < source.seeds for got in runs.values())
    import importlib

    from oar_rl.study.screen import blinded, confirm_arms

    module, _, name = source.plan.partition(":")
    plan = getattr(importlib.import_module(module), name)
    arms = [a.name for a in confirm_arms(root / Path(source.runs).parent.parent, plan)]
    return blinded(dict(runs), arms, plan.confirm_seeds) is not None


SUMMARY = ("Δ vs GRPO, pp (95% CI)", "evidence")
"""The summary's columns per regime (`summary_table`)."""
ACCURACY = ("Δ vs GRPO, pp (95% CI)", "seeds", "evidence", "step × GRPO", "train time × GRPO")
CREDIT_COLUMNS = (
    "ω̃ first error vs last result",
    "error − last (95% CI)",
    "pivot recall@10% (95% CI)",
    "Δ recall vs position (95% CI)",
)
"""A regime's two detail tables (`detail_tables`): accuracy and cost; where the credit goes."""
OTHER_SCORED = "†"
"""Marks a Δ measured with another scored set than today's default (the reasoning tokens)."""
_MINUS = re.compile(r"(?<![\w.])-(?=\d)")


def minus(text: str) -> str:
    """A number's ASCII "-" as the Unicode minus every other page prints ("-1.1" -> "−1.1"); the hyphen of
    a name ("first-error", "2e-4") stays."""
    return _MINUS.sub("−", text)


def accuracy_cells(root: Path, regime: Regime, rule: str) -> list[str]:
    """Δ vs GRPO, seeds, evidence and the train-time ratio of `rule` in `regime`."""
    from oar_rl.study.stats import paired_difference

    for source in regime.studies:
        cells = study_cells(root, source, rule)
        if cells is not None:
            return cells

    running, running_label = "", ""  # "confirmation running: k of 10 seeds", for the screen's row
    for source, confirmed in [(s, True) for s in regime.confirmed] + [(s, False) for s in regime.screens]:
        runs = load_runs(root, source.runs)
        mine = default_variant(runs, rule, source.overrides)
        grpo = default_variant(runs, "grpo", source.overrides)
        if confirmed and (min(len(mine), len(grpo)) < source.seeds or _arms_running(root, source, runs)):
            if mine and source.blinded and not running:
                running = f" (confirmation running: {len(set(mine) & set(grpo))} of {source.seeds} seeds)"
                running_label = source.label
            continue
        if not mine or not grpo:
            continue
        link = source.label + ("" if confirmed else running)
        ratio = train_ratio(mine, grpo)
        if rule == "grpo":
            return ["(reference)", str(len(mine)), link if confirmed else f"screen only: {link}", ratio]
        acc = {s: 100 * r["final"]["sampled"] for s, r in mine.items()}
        ref = {s: 100 * r["final"]["sampled"] for s, r in grpo.items()}
        d = paired_difference(acc, ref)
        seeds = len(d["seeds"])
        if confirmed:
            return [pp_cell(d), str(seeds), link, ratio]
        if seeds < SCREEN_SEEDS:  # a screen still running: its partial differences are not read
            return ["running", f"screen: {seeds} of {SCREEN_SEEDS} seeds", link, NA]
        return [pp_cell(d), f"screen only, {seeds} seeds", link, ratio]
    if running:  # a blinded confirmation's rule with no screen row
        return ["running", running.strip(" ()"), running_label, NA]
    return [NA, "0", "no runs", NA]


def _ci(v: Sequence[float], signed: bool = False) -> str:
    f = "+.2f" if signed else ".2f"
    return f"{v[0]:{f}} ({v[1]:{f}}, {v[2]:{f}})"


def signal_names(rule: str) -> tuple[str, ...]:
    """The names a rule's signal may have in a blame or recall record, in the order they are looked up:
    its own name (a rule that reads no probe), then `rule/<probe>` under the default probe (the testbed's,
    AS-Mean), as those records name every rule registered with `probe=True` (oar-g, oar-p, oar-p-span, a
    user's)."""
    from oar_rl.options import DEFAULT_PROBE

    return (rule, f"{rule}/{DEFAULT_PROBE}")


def _lookup(table: Mapping[str, Any], rule: str) -> tuple[str, Any] | None:
    """(name, entry) of the first of `signal_names(rule)` in `table`."""
    return next(((n, table[n]) for n in signal_names(rule) if n in table), None)


def blame_cells(root: Path, regime: Regime, rule: str) -> list[str]:
    """ω̃ on the first error vs the last result, and their difference, under the rule's own reshaping."""
    if regime.blame is None or not (root / regime.blame).is_file():
        return [NA, NA]
    if rule == "grpo":
        return ["1 vs 1 (every token)", NA]
    rec = json.loads((root / regime.blame).read_text())
    own = _lookup(rec.get("own_reshaping", {}), rule)  # a probe rule's is under rule/as-mean too
    m = (own or _lookup(rec["signals"], rule) or (None, None))[1]
    if m is None:
        return [NA, NA]
    return [f"{m['w_error'][0]:.2f} vs {m['w_last'][0]:.2f}", _ci(m["error_minus_last"], signed=True)]


def recall_cells(root: Path, regime: Regime, rule: str) -> list[str]:
    """Ground-truth pivot recall@10% with its band, and its paired difference to `position`."""
    if regime.recall is None or not (root / regime.recall).is_file():
        return [NA, NA]
    truth = ground_truth(json.loads((root / regime.recall).read_text()))
    found = _lookup(truth.get("recall", {}), rule)
    if found is None:
        return [NA, NA]
    name = found[0]
    cell = f"{found[1]['0.1']:.2f}"
    band = truth.get("recall_ci95", {}).get(name, {}).get("0.1")  # a study's recall before format 2: none
    cell += f" ({band[0]:.2f}, {band[1]:.2f})" if band else ""
    diff = truth.get("paired_difference", {}).get(f"{name} − position", {}).get("0.1")
    return [cell, _ci(diff, signed=True) if diff else NA]


def cost_cell(root: Path, regime: Regime, rule: str) -> str:
    """The whole training step as × GRPO's: median [min–max] over the bench's paired repeats."""
    if regime.bench is None or not (root / regime.bench).is_file():
        return NA
    steps = json.loads((root / regime.bench).read_text()).get("steps", {})
    r = (steps.get(CREDIT.get(rule, rule)) or {}).get("ratio_vs_grpo")
    return NA if r is None else f"{r['median']:.2f}× [{r['min']:.2f}–{r['max']:.2f}]"


def landed(root: Path, regime: Regime) -> bool:
    """Whether any of the regime's run folders holds a run file."""
    return any(any((root / s.runs).glob("*.json")) for s in regime.sources)


def rules(root: Path, regimes: Sequence[Regime]) -> list[str]:
    """Every rule with a default-variant run in a landed regime, in `ORDER` (others after, by name)."""
    found = set()
    for regime in regimes:
        for source in regime.sources:
            runs = load_runs(root, source.runs)
            allowed = TUNED if source.study else source.overrides  # a user's study: tuned rates too
            named = source.arms or runs  # a plan that fixes its arms: only those are rules' rows
            found |= {v for v in runs if v in named and default_variant(runs, v, allowed)}
    return [r for r in ORDER if r in found] + sorted(found - set(ORDER))


def _html_table(head: str, rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    """An HTML table: `head` (its <tr> rows), then a row per (rule, cells), numbers with `−`."""
    body = []
    for rule, cells in rows:
        tds = "".join(f"<td>{html.escape(minus(c))}</td>" for c in cells)
        body.append(f"<tr><td><code>{html.escape(rule)}</code></td>{tds}</tr>")
    return "<table>\n<thead>\n" + head + "\n</thead>\n<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>"


def _source(regime: Regime, evidence: str) -> Source | None:
    """The source an evidence cell names (the longest label it starts with)."""
    text = evidence.removeprefix("screen only: ")
    named = [s for s in regime.sources if text.startswith(s.label)]
    return max(named, key=lambda s: len(s.label), default=None)


def summary_cells(regime: Regime, acc: Sequence[str]) -> list[str]:
    """A rule's summary cells in `regime` from its `accuracy_cells`: the Δ (marked `OTHER_SCORED` where its
    source scored another token set) and the evidence in a few words, with the seeds."""
    delta, seeds, evidence = acc[:3]
    source = _source(regime, evidence)
    mark = OTHER_SCORED if source is not None and source.scored != "reasoning" else ""
    if evidence == "no runs":
        return [delta, "no runs"]
    if source is not None and seeds.isdigit() and not source.study:
        kind = "confirmed" if source.blinded else source.label.split(",")[0]
        kind = "screen only" if evidence.startswith("screen only") else kind
        return [delta + mark, f"{kind}, {seeds} seeds"]
    return [delta + mark, seeds]


def summary_table(root: Path, regimes: Sequence[Regime]) -> str:
    """Rule × regime: the Δ vs GRPO with its interval and the evidence, one column pair per regime."""
    head = "<tr><th rowspan='2'>rule</th>" + "".join(
        f"<th colspan='{len(SUMMARY)}'>{html.escape(r.name)}</th>" for r in regimes
    )
    head += "</tr>\n<tr>" + "".join(f"<th>{html.escape(c)}</th>" for _ in regimes for c in SUMMARY) + "</tr>"
    rows = [(rule, [c for r in regimes for c in summary_cells(r, accuracy_cells(root, r, rule))])
            for rule in rules(root, regimes)]  # fmt: skip
    return _html_table(head, rows)


def detail_tables(root: Path, regime: Regime, names: Sequence[str]) -> str:
    """A regime's details: accuracy and cost per rule, then where its credit goes (blame and recall)."""
    acc_rows, credit_rows = [], []
    for rule in names:
        acc = accuracy_cells(root, regime, rule)
        acc_rows.append((rule, [*acc[:3], cost_cell(root, regime, rule), acc[3]]))
        credit_rows.append((rule, blame_cells(root, regime, rule) + recall_cells(root, regime, rule)))
    heads = ["<tr><th>rule</th>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"
             for cols in (ACCURACY, CREDIT_COLUMNS)]  # fmt: skip
    if regime.blame is None and regime.recall is None:  # its credit is measured in another regime's records
        return _html_table(heads[0], acc_rows)
    return _html_table(heads[0], acc_rows) + "\n\n" + _html_table(heads[1], credit_rows)


def _link(root: Path, target: str, out: Path | None) -> str:
    """A link to `target`, a page under docs/results/ (with its #anchor), from the page written to `out`:
    relative to where that lies (None: the committed page, beside the target)."""
    if out is None:
        return target
    path, sep, anchor = target.partition("#")
    return Path(os.path.relpath(root / Path(PAGE).parent / path, out.parent)).as_posix() + sep + anchor


def _sources(root: Path, regimes: Sequence[Regime], out: Path | None = None) -> list[str]:
    """The source list: each regime's run folders (a committed one linked to its docs page) and records."""
    lines = []
    for regime in regimes:
        for s in regime.studies:
            lines.append(study_line(root, regime, s, load_runs(root, s.runs)))
        for s in (*regime.confirmed, *regime.screens):
            runs = load_runs(root, s.runs)
            n = sum(len(v) for v in runs.values())
            h = {r.get("protocol_hash") for v in runs.values() for r in v.values()}
            docs = f"([page]({_link(root, s.page, out)}))"
            if not n:
                lines.append(f"- *{s.label}*: `{s.runs}/`: no run files yet {docs}")
                continue
            lines.append(f"- *{s.label}*: `{s.runs}/`, {n} run files, protocol `{next(iter(h))}` {docs}")
        lines += [f"- `{shown_path(p)}`" for p in (regime.blame, regime.recall, regime.bench) if p]
    return lines


def _compute_note(root: Path, shown: Sequence[Regime], out: Path | None) -> list[str]:
    """The note on the `grpo-compute` row, where it has one."""
    if "grpo-compute" not in rules(root, shown):
        return []
    answers = _link(root, "credit-why.md", out)
    return [
        "- **grpo-compute**: not a credit rule; GRPO given first-error's generated tokens per step (more "
        "prompts per step, as the credit-why re-test ran it). Its Δ vs GRPO is what that compute buys "
        f"GRPO; a rule beats GRPO there only if it beats both ([the answers]({answers}))."
    ]


def page(
    root: Path, regimes: Sequence[Regime] = REGIMES, command: str | None = None, out: Path | None = None
) -> str:
    """The whole page (Markdown with one HTML table); `command`: the command line that made a page with
    users' studies (its header says so); `out`: where the page is written, its links to the committed
    docs pages relative to it (None: docs/results/, as the committed page)."""
    from oar_rl.machine import REPRODUCIBILITY

    shown = [r for r in regimes if landed(root, r)]
    waiting = [r for r in regimes if not landed(root, r)]
    origin = "`python -m experiments.leaderboard` from the committed run files and records under results/"
    if any(r.studies for r in regimes):
        command = command or "python -m experiments.leaderboard --source ..."
        origin = (
            f"`{command}` from the committed run files and records under results/ and its --source studies"
        )
    lines = [
        *(FRONT_MATTER if out is None or out.resolve() == (root / PAGE).resolve() else ()),
        f"<!-- Generated by {origin}; do not edit. -->",
        "",
        "# Leaderboard",
        "",
        "Every credit rule on every regime measured so far: first the summary, each rule's Δ to GRPO per "
        "regime, then each regime's details (the same Δ with its cost, and where the rule's credit goes on "
        "wrong rollouts and on pivot tokens). Each figure is computed from the committed files under "
        "`results/`; *evidence* names the source, and the list at the bottom links each to the page that "
        "says what it asked and how it ran. To see your own rule beside them: run "
        "`oar-rl study --credit-module my_rules.py --credits grpo,my-rule --out my_study`, then "
        "`python -m experiments.leaderboard --source mine=my_study --out my_leaderboard.md` (a page of "
        "your own, with your study as one more regime; experiments/leaderboard/README.md).",
        "",
        *studies_note(shown),
        summary_table(root, shown) if shown else "No regime has run files yet.",
        "",
        "- **Δ vs GRPO**: final sampled accuracy minus GRPO's on the same seeds, percentage points, "
        "Student-t 95% interval over seeds; from the first source that confirmed the rule "
        "(*confirmed*: 10 fresh seeds on the test split, pre-registered), else *screen only* (5 seeds, "
        "validation split).",
        f"- **{OTHER_SCORED}**: scored set `before-answer` (every token before the answer: the v2 study, "
        "made before the option existed); every unmarked figure scored the reasoning tokens, today's "
        "default (`OARConfig.scored_tokens`): two settings, two experiments.",
        *_compute_note(root, shown, out),
        *rate_notes(root, shown),
        "",
    ]
    for r in shown:
        lines += [f"## {r.name}: details", "", f"{r.what[0].upper()}{r.what[1:]}.", "",
                  detail_tables(root, r, rules(root, shown)), ""]  # fmt: skip
    lines += [
        "In the details:",
        "",
        "- **step × GRPO**: the whole training step's time per token against GRPO's, median [min–max] "
        "over paired repeats on one machine (29M-parameter Qwen2 shape, 256 tokens; "
        f"[cost]({_link(root, 'cost.md', out)})). "
        "**train time × GRPO**: mean training seconds per run against GRPO's in the Δ's source (same "
        "machine, shared with other jobs).",
        "- **ω̃ first error vs last result**: on wrong rollouts whose first error lies before their last "
        "step, the rule's mean reshaping weight on the first erroneous result and on the carried last "
        "result (GRPO: 1 on every token), and their difference with a 95% bootstrap interval "
        f"([blame]({_link(root, 'blame.md', out)})).",
        "- **pivot recall@10%**: the share of the testbed's ground-truth pivot tokens among the rule's "
        "top 10% reasoning tokens on 40 correct warm-start trajectories (AS-Mean probe for OAR), 95% "
        "bootstrap interval, and the paired difference to the `position` control (later tokens first); "
        f"n/a where there is no such figure ([study]({_link(root, 'study.md#recall', out)})).",
        "",
    ]
    for r in waiting:
        folders = ", ".join(f"`{shown_path(s.runs)}/`" for s in r.sources)
        lines.append(f"Regime **{r.name}** ({r.what}): no run files yet ({folders}); its columns appear "
                     "when they land.")  # fmt: skip
        lines.append("")
    lines += [
        "## Machines",
        "",
        "The committed runs and benchmarks were made on a 2-core x86-64 CPU: the v2 study's and the "
        "short screen's on an AMD EPYC with AVX2, the long regime's on an Intel Xeon with AVX-512, the "
        "confirmation at chosen rates on an AMD EPYC with AVX-512; the earliest files do not record the CPU "
        "model, later ones do (`oar_rl.machine`). "
        f"{REPRODUCIBILITY}",
        "",
        "## Sources",
        "",
        *_sources(root, shown, out),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.leaderboard", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--root", default=".", help="the repository root (default: the current directory)")
    p.add_argument("--check", action="store_true", help="only check the committed page (exit 1 if stale)")
    p.add_argument("--source", action="append", default=[], metavar="NAME=DIR",
                   help="add a column group NAME from an `oar-rl study --out DIR` folder (repeatable; "
                   "needs --out)")  # fmt: skip
    p.add_argument(
        "--blame",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="the `oar-rl blame` record (blame.json) of a --source study (NAME=: which one)",
    )
    p.add_argument("--recall", action="append", default=[], metavar="[NAME=]FILE",
                   help="the `python -m oar_rl.study.recall` record (recall.json) of a --source study "
                   "(default: the study's own recall.json)")  # fmt: skip
    p.add_argument("--out", default=None, metavar="PAGE.md",
                   help=f"write the page there (default: {PAGE}; required with --source, which never "
                   "writes the committed page)")  # fmt: skip
    a = p.parse_args(argv)
    root = Path(a.root)
    prog = "python -m experiments.leaderboard"
    if not (root / "results").is_dir():
        print(f"{prog}: {root.resolve()} has no results/ folder; run from the "
              "repository root or pass --root", file=sys.stderr)  # fmt: skip
        return 2
    if a.check and (a.source or a.out):
        print(f"{prog}: --check compares the committed {PAGE}; it takes no --source, --out", file=sys.stderr)
        return 2
    if (a.blame or a.recall) and not a.source:
        print(
            f"{prog}: --blame and --recall belong to a --source study: add --source NAME=DIR", file=sys.stderr
        )
        return 2
    path = root / PAGE if a.out is None else Path(a.out)
    if a.source and (a.out is None or path.resolve() == (root / PAGE).resolve()):
        print(f"{prog}: --source adds your study to a page of your own; pass --out PAGE.md other than the "
              f"committed {PAGE} (it holds the committed results only)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        mine = study_regimes(root, a.source, a.blame, a.recall)
    except SourceError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    command = " ".join([prog, *(argv if argv is not None else sys.argv[1:])])
    text = page(root, (*REGIMES, *mine), command=command, out=path)
    if a.check:
        if not path.is_file() or path.read_text() != text:
            print(f"{PAGE} is out of date; run: python -m experiments.leaderboard", file=sys.stderr)
            return 1
        return 0
    from oar_rl.io import write_text_atomic

    write_text_atomic(path, text)
    print(f"wrote {path if a.out is not None else PAGE}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
