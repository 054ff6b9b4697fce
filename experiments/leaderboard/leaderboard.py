"""The leaderboard: one row per credit rule, one column group per regime, generated from the committed
run files and result records (`docs/results/leaderboard.md`).

    python -m experiments.leaderboard            # rewrite the page (also run by `make docs`)
    python -m experiments.leaderboard --check    # exit 1 if the committed page is out of date

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
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAGE = "docs/results/leaderboard.md"
ORDER = ("grpo", "random", "entropy", "oar-g", "oar-p", "oar-gp", "grail", "first-error")
"""Row order; a rule not listed follows, alphabetically."""
SIGNAL = {"oar-g": "oar-g/as-mean", "oar-p": "oar-p/as-mean"}
"""The blame and recall records' name of a rule's signal under its default (the testbed's) probe."""
CREDIT = {"grpo": "none"}
"""The bench's name of a rule (its credit mode)."""


@dataclass(frozen=True)
class Source:
    """A folder of run files (`oar-rl study` / screen layout), its evidence label and its docs page."""

    runs: str
    label: str
    page: str
    blinded: bool = False
    """A pre-registered confirmation: none of its figures is read until every arm has all its seeds
    (`CONFIRM_SEEDS`); a rule whose own seeds are in is not shown before the others' are."""
    plan: str | None = None
    """With `blinded`: the study plan ("module:NAME", a `ScreenPlan`) whose confirmation arms must all be
    complete, those without a run file yet included (`oar_rl.study.screen.confirm_arms` of the study
    folder, two levels above `runs`); None: the arms with run files in the folder."""


def _arms_running(root: Path, source: Source, runs: Mapping[str, Mapping[int, Any]]) -> bool:
    """Whether a blinded source's confirmation still lacks a seed of some arm."""
    if not source.blinded:
        return False
    if source.plan is None:
        return any(len(got) < CONFIRM_SEEDS for got in runs.values())
    import importlib

    from oar_rl.study.screen import blinded, confirm_arms

    module, _, name = source.plan.partition(":")
    plan = getattr(importlib.import_module(module), name)
    arms = [a.name for a in confirm_arms(root / Path(source.runs).parent.parent, plan)]
    return blinded(dict(runs), arms, plan.confirm_seeds) is not None


@dataclass(frozen=True)
class Regime:
    """One column group: the run folders (confirmed ones first, in priority order), the screens, and the
    blame, recall and cost records of the regime (None: not measured there)."""

    name: str
    what: str
    confirmed: tuple[Source, ...]
    screens: tuple[Source, ...] = ()
    blame: str | None = None
    recall: str | None = None
    bench: str | None = None


REGIMES: tuple[Regime, ...] = (
    Regime(
        "wordproblems",
        "short chains: the shipped word-problem warm start, 30 steps of 16 prompts × 8",
        confirmed=(
            Source(
                "results/credit-screen/confirm/runs",
                "confirmation, test split",
                "credit-screen.md",
                blinded=True,
                plan="experiments.credit_screen.plan:CREDIT_SCREEN",
            ),
            Source(
                "results/study-wordproblems-v2/runs",
                "v2 study, test split, scored set before-answer",
                "study.md",
            ),
        ),
        screens=(
            Source("results/credit-screen/screen/runs", "screen, validation split", "credit-screen.md"),
        ),
        blame="results/blame/blame.json",
        recall="results/testbed-recall/recall.json",
        bench="results/bench-cpu-256/bench.json",
    ),
    Regime(
        "wordproblems-long",
        "long chains: the long-chain regime's screen and confirmation",
        confirmed=(
            Source(
                "results/credit-long/confirm/runs",
                "confirmation",
                "credit-long.md",
                blinded=True,
                plan="experiments.credit_long.plan:CREDIT_LONG",
            ),
        ),
        screens=(Source("results/credit-long/screen/runs", "screen", "credit-long.md"),),
        blame="results/blame-long/blame.json",
        recall="results/testbed-recall-long/recall.json",
    ),
)

COLUMNS = (
    "Δ vs GRPO, pp (95% CI)",
    "seeds",
    "evidence",
    "ω̃ first error vs last result",
    "error − last (95% CI)",
    "pivot recall@10% (95% CI)",
    "Δ recall vs position (95% CI)",
    "step × GRPO",
    "train time × GRPO",
)
NA = "n/a"


def load_runs(root: Path, folder: str) -> dict[str, dict[int, dict[str, Any]]]:
    """{variant: {seed: run record}} of the run files in `folder` (empty if it does not exist). Every file
    of a folder must carry the same protocol hash (a study's store never mixes two)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    hashes = set()
    for path in sorted((root / folder).glob("*.json")):
        rec = json.loads(path.read_text())
        hashes.add(rec.get("protocol_hash"))
        out.setdefault(rec["variant"], {})[int(rec["seed"])] = rec
    if len(hashes) > 1:
        raise ValueError(f"{folder} mixes run files of {len(hashes)} protocols: {sorted(map(str, hashes))}")
    return out


def _default(runs: Mapping[str, Mapping[int, dict[str, Any]]], rule: str) -> Mapping[int, dict[str, Any]]:
    """The rule's default variant (its own name, no overrides) in one folder."""
    got = runs.get(rule, {})
    return got if all(not r.get("overrides") for r in got.values()) else {}


def _pp(ci: Mapping[str, Any]) -> str:
    from oar_rl.study.screen_report import fmt_ci

    return fmt_ci(dict(ci), signed=True)


def _train_ratio(mine: Mapping[int, dict[str, Any]], grpo: Mapping[int, dict[str, Any]]) -> str:
    a = [r["train_seconds"] for r in mine.values()]
    b = [r["train_seconds"] for r in grpo.values()]
    return f"{statistics.fmean(a) / statistics.fmean(b):.2f}×" if a and b else NA


SCREEN_SEEDS = 5
"""Seeds per arm of a complete screen (both pre-registered screens); fewer: the screen is still running."""
CONFIRM_SEEDS = 10
"""Seeds per arm of a complete confirmation; fewer: it is still running, blinded (its numbers are not
read), and the rule's row comes from its screen."""


def accuracy_cells(root: Path, regime: Regime, rule: str) -> list[str]:
    """Δ vs GRPO, seeds, evidence and the train-time ratio of `rule` in `regime`."""
    from oar_rl.study.stats import paired_difference

    running, running_label = "", ""  # "confirmation running: k of 10 seeds", for the screen's row
    for source, confirmed in [(s, True) for s in regime.confirmed] + [(s, False) for s in regime.screens]:
        runs = load_runs(root, source.runs)
        mine, grpo = _default(runs, rule), _default(runs, "grpo")
        if confirmed and (min(len(mine), len(grpo)) < CONFIRM_SEEDS or _arms_running(root, source, runs)):
            if mine and source.blinded and not running:
                running = f" (confirmation running: {len(set(mine) & set(grpo))} of {CONFIRM_SEEDS} seeds)"
                running_label = source.label
            continue
        if not mine or not grpo:
            continue
        link = source.label + ("" if confirmed else running)
        ratio = _train_ratio(mine, grpo)
        if rule == "grpo":
            return ["(reference)", str(len(mine)), link if confirmed else f"screen only: {link}", ratio]
        acc = {s: 100 * r["final"]["sampled"] for s, r in mine.items()}
        ref = {s: 100 * r["final"]["sampled"] for s, r in grpo.items()}
        d = paired_difference(acc, ref)
        seeds = len(d["seeds"])
        if confirmed:
            return [_pp(d), str(seeds), link, ratio]
        if seeds < SCREEN_SEEDS:  # a screen still running: its partial differences are not read
            return ["running", f"screen: {seeds} of {SCREEN_SEEDS} seeds", link, NA]
        return [_pp(d), f"screen only, {seeds} seeds", link, ratio]
    if running:  # a blinded confirmation's rule with no screen row
        return ["running", running.strip(" ()"), running_label, NA]
    return [NA, "0", "no runs", NA]


def _ci(v: Sequence[float], signed: bool = False) -> str:
    f = "+.2f" if signed else ".2f"
    return f"{v[0]:{f}} ({v[1]:{f}}, {v[2]:{f}})"


def blame_cells(root: Path, regime: Regime, rule: str) -> list[str]:
    """ω̃ on the first error vs the last result, and their difference, under the rule's own reshaping."""
    if regime.blame is None or not (root / regime.blame).is_file():
        return [NA, NA]
    if rule == "grpo":
        return ["1 vs 1 (every token)", NA]
    rec = json.loads((root / regime.blame).read_text())
    m = rec.get("own_reshaping", {}).get(rule) or rec["signals"].get(SIGNAL.get(rule, rule))
    if m is None:
        return [NA, NA]
    return [f"{m['w_error'][0]:.2f} vs {m['w_last'][0]:.2f}", _ci(m["error_minus_last"], signed=True)]


def recall_cells(root: Path, regime: Regime, rule: str) -> list[str]:
    """Ground-truth pivot recall@10% with its band, and its paired difference to `position`."""
    if regime.recall is None or not (root / regime.recall).is_file():
        return [NA, NA]
    truth = json.loads((root / regime.recall).read_text()).get("ground_truth") or {}
    name = SIGNAL.get(rule, rule)
    if name not in truth.get("recall", {}):
        return [NA, NA]
    band = truth["recall_ci95"][name]["0.1"]
    cell = f"{truth['recall'][name]['0.1']:.2f} ({band[0]:.2f}, {band[1]:.2f})"
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
    return any(any((root / s.runs).glob("*.json")) for s in (*regime.confirmed, *regime.screens))


def rules(root: Path, regimes: Sequence[Regime]) -> list[str]:
    """Every rule with a default-variant run in a landed regime, in `ORDER` (others after, by name)."""
    found = set()
    for regime in regimes:
        for source in (*regime.confirmed, *regime.screens):
            runs = load_runs(root, source.runs)
            found |= {v for v in runs if _default(runs, v)}
    return [r for r in ORDER if r in found] + sorted(found - set(ORDER))


def table(root: Path, regimes: Sequence[Regime]) -> str:
    """The HTML table: a header row of regimes (one column group each), then one row per rule."""
    cols = len(COLUMNS)
    head = "<tr><th rowspan='2'>rule</th>" + "".join(
        f"<th colspan='{cols}'>{html.escape(r.name)}</th>" for r in regimes
    )
    head += "</tr>\n<tr>" + "".join(f"<th>{html.escape(c)}</th>" for _ in regimes for c in COLUMNS) + "</tr>"
    body = []
    for rule in rules(root, regimes):
        cells = []
        for regime in regimes:
            acc = accuracy_cells(root, regime, rule)
            cells += acc[:3] + blame_cells(root, regime, rule) + recall_cells(root, regime, rule)
            cells += [cost_cell(root, regime, rule), acc[3]]
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        body.append(f"<tr><td><code>{html.escape(rule)}</code></td>{tds}</tr>")
    return "<table>\n<thead>\n" + head + "\n</thead>\n<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>"


def _sources(root: Path, regimes: Sequence[Regime]) -> list[str]:
    lines = []
    for regime in regimes:
        for s in (*regime.confirmed, *regime.screens):
            runs = load_runs(root, s.runs)
            n = sum(len(v) for v in runs.values())
            h = {r.get("protocol_hash") for v in runs.values() for r in v.values()}
            if not n:
                lines.append(f"- *{s.label}*: `{s.runs}/`: no run files yet ([page]({s.page}))")
                continue
            lines.append(
                f"- *{s.label}*: `{s.runs}/`, {n} run files, protocol `{next(iter(h))}` ([page]({s.page}))"
            )
        lines += [f"- `{p}`" for p in (regime.blame, regime.recall, regime.bench) if p]
    return lines


def page(root: Path, regimes: Sequence[Regime] = REGIMES) -> str:
    """The whole page (Markdown with one HTML table)."""
    from oar_rl.machine import REPRODUCIBILITY

    shown = [r for r in regimes if landed(root, r)]
    waiting = [r for r in regimes if not landed(root, r)]
    lines = [
        "<!-- Generated by `python -m experiments.leaderboard` from the committed run files and records "
        "under results/; do not edit. -->",
        "",
        "# Leaderboard",
        "",
        "Every credit rule on every regime measured so far, in one table. Each figure is computed from the "
        "committed files under `results/`; *evidence* names the source, and the list at the bottom links "
        "each to the page that says what it asked and how it ran.",
        "",
        "- **Δ vs GRPO**: final sampled accuracy minus GRPO's on the same seeds, percentage points, "
        "Student-t 95% interval over seeds; from the first source that confirmed the rule "
        "(10 fresh seeds on the test split), else *screen only* (5 seeds, validation split).",
        "- **ω̃ first error vs last result**: on wrong rollouts whose first error lies before their last "
        "step, the rule's mean reshaping weight on the first erroneous result and on the carried last "
        "result (GRPO: 1 on every token), and their difference with a 95% bootstrap interval "
        "([blame](blame.md)).",
        "- **pivot recall@10%**: the share of the testbed's ground-truth pivot tokens among the rule's "
        "top 10% reasoning tokens on 40 correct warm-start trajectories (AS-Mean probe for OAR), 95% "
        "bootstrap interval, and the paired difference to the `position` control (later tokens first); "
        "n/a where there is no such figure ([study](study.md#recall)).",
        "- **step × GRPO**: the whole training step's time per token against GRPO's, median [min–max] "
        "over paired repeats on one machine (29M-parameter Qwen2 shape, 256 tokens; [cost](cost.md)). "
        "**train time × GRPO**: mean training seconds per run against GRPO's in the Δ's source (same "
        "machine, shared with other jobs).",
        "",
        table(root, shown) if shown else "No regime has run files yet.",
        "",
    ]
    for r in waiting:
        folders = ", ".join(f"`{s.runs}/`" for s in (*r.confirmed, *r.screens))
        lines.append(f"Regime **{r.name}** ({r.what}): no run files yet ({folders}); its columns appear "
                     "when they land.")  # fmt: skip
        lines.append("")
    lines += [
        "## Machines",
        "",
        "The committed runs and benchmarks were made on a 2-core x86-64 CPU, the v2 study's on an AMD EPYC "
        "with AVX2 (issue 34); files made before issue 34 do not record the CPU model, later ones do "
        f"(`oar_rl.machine`). {REPRODUCIBILITY}",
        "",
        "## Sources",
        "",
        *_sources(root, shown),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.leaderboard", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--root", default=".", help="the repository root (default: the current directory)")
    p.add_argument("--check", action="store_true", help="only check the committed page (exit 1 if stale)")
    a = p.parse_args(argv)
    root = Path(a.root)
    if not (root / "results").is_dir():
        print(f"python -m experiments.leaderboard: {root.resolve()} has no results/ folder; run from the "
              "repository root or pass --root", file=sys.stderr)  # fmt: skip
        return 2
    text = page(root)
    path = root / PAGE
    if a.check:
        if not path.is_file() or path.read_text() != text:
            print(f"{PAGE} is out of date; run: python -m experiments.leaderboard", file=sys.stderr)
            return 1
        return 0
    from oar_rl.io import write_text_atomic

    write_text_atomic(path, text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
