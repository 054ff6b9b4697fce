"""What the leaderboard reads: a `Source` (a folder of run files, its evidence label and docs page), a
`Regime` (one column group: its sources and its blame, recall and cost records), the committed regimes
(`REGIMES`), the sizes of a complete screen and confirmation (`SCREEN_SEEDS`, `CONFIRM_SEEDS`), and the
reading of a folder's run files (`load_runs`), with the few helpers that the committed page
(`leaderboard.py`) and users' studies (`sources.py`) both read and show them with."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.credit_why.plan import CONFIRM_ARMS
from experiments.pretrained_regime.plan import PLANS

SCREEN_SEEDS = 5
"""Seeds per arm of a complete screen (both pre-registered screens); fewer: the screen is still running."""
CONFIRM_SEEDS = 10
"""Seeds per arm of a complete confirmation; fewer: it is still running, blinded (its numbers are not
read), and the rule's row comes from its screen."""


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
    scored: str = "reasoning"
    """The tokens its credit rules scored (`OARConfig.scored_tokens`): today's default, the reasoning
    tokens, unless the source says otherwise (the v2 study predates the option: every token before the
    answer). The leaderboard marks a figure of another scored set."""
    arms: tuple[str, ...] = ()
    """With `blinded`: the confirmation's arms when its plan fixes them in advance (no screen's winners to
    read): every one must have all its `seeds` before any figure is read."""
    overrides: frozenset[str] = frozenset()
    """The overrides its arms carry by design (issue 48's confirmation: each arm's learning rate chosen on
    the grid, GRPO-at-first-error's-compute's prompts per step); a run with any other override is a
    variant, not the rule's row (`default_variant`)."""
    seeds: int = CONFIRM_SEEDS
    """With `blinded` and no `plan`: the seeds per arm of the complete confirmation (the pretrained regime's
    Amendment 1: 6); fewer in any arm: still running, not read."""
    study: str | None = None
    """A user's `oar-rl study` folder (`--source NAME=DIR`, DIR as given; `runs` is its runs/ folder):
    read whole, whatever its seeds, each cell labelled with its seed count (`sources.study_seeds_label`)."""


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
    studies: tuple[Source, ...] = ()
    """Users' studies (`--source`), read after the confirmed and screen sources."""

    @property
    def sources(self) -> tuple[Source, ...]:
        return (*self.confirmed, *self.screens, *self.studies)


CREDIT_WHY_ARMS = tuple(name for name, _, _ in CONFIRM_ARMS)
"""Issue 48's confirmation arms, fixed by its pre-registration (Amendment 3's arms, which land in the same
folder, are not rules of the leaderboard: a rule at another rate, GRPO on other batch shapes)."""
PRETRAINED_ARMS = ("grpo", "oar-g")
"""The pretrained regime's stage-1 arms in its confirmation's folder, blinded until both have every seed
(its pre-registration: stage 2, entropy and lowest-prob, runs as the budget allows and must not keep
OAR-G's figure hidden; its Amendment 1 runs no stage 2): GRPO given OAR-G's compute trains in a folder of
its own (`Plan.compute_arm`) and is not a rule of the leaderboard."""
PRETRAINED_PLAN = PLANS["steps30"]
"""The pretrained regime's plan in force (Amendment 1): its confirmation's folder, steps and seeds."""
LONG_4E4 = "wordproblems-long at 4e-4"
"""The long regime's first column group: its screen and confirmation ran every arm at learning rate 4e-4."""
LONG_RUNS = "results/credit-long/confirm/runs"
WARM_START_LONG = "results/credit-why/warm_start.json"
"""The warm start scored on the long confirmation's test sample (issue 48: 500 problems, greedy)."""


def grpo_greedy_at_4e4(root: Path) -> dict[str, Any]:
    """GRPO's greedy loss in the 4e-4 confirmation, from its run files and the warm start on the same test
    sample: {"rate", "warm", "grpo", "drop" (points), "below", "runs"} (the runs of every arm that end below
    the warm start's greedy accuracy); {} where either file is missing."""
    from oar_rl.study.provenance import run_settings

    runs = [json.loads(f.read_text()) for f in sorted((root / LONG_RUNS).glob("*.json"))]
    warm_path = root / WARM_START_LONG
    if not runs or not warm_path.is_file():
        return {}
    warm = 100 * json.loads(warm_path.read_text())["test"]["greedy"]
    grpo = statistics.fmean(100 * r["final"]["greedy"] for r in runs if r["variant"] == "grpo")
    rates = {run_settings(r)["learning_rate"] for r in runs}
    return {"rate": rates.pop() if len(rates) == 1 else None, "warm": warm, "grpo": grpo, "drop": warm - grpo,
            "below": sum(100 * r["final"]["greedy"] < warm for r in runs), "runs": len(runs)}  # fmt: skip


def arms_by_rate(root: Path, source: Source) -> dict[float, list[str]]:
    """{learning rate: the source's arms (`source.arms`, else every variant) that trained at it}, each
    run's own rate (`run_settings`), in ascending rate."""
    from oar_rl.study.provenance import run_settings

    runs = load_runs(root, source.runs)
    out: dict[float, list[str]] = {}
    for arm in source.arms or tuple(runs):
        for rate in sorted({run_settings(r)["learning_rate"] for r in runs.get(arm, {}).values()}):
            out.setdefault(rate, []).append(arm)
    return dict(sorted(out.items()))


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
                scored="before-answer",
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
        LONG_4E4,
        "long chains: the long-chain regime's screen and confirmation, each rule at learning rate 4e-4, "
        "where GRPO does not learn (its greedy loss there is under the summary)",
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
    Regime(
        "wordproblems-long at chosen rates",
        "long chains at the rates chosen on the re-test's validation grid, where GRPO learns (each arm's "
        "rate and `grpo-compute`'s prompts per step: results/credit-why/rates.md), with `grpo-compute`, "
        "GRPO given first-error's generated tokens per step: blame and recall as in wordproblems-long",
        confirmed=(
            Source(
                "results/credit-why/confirm/runs",
                "confirmation at chosen rates, test split",
                "credit-why.md",
                blinded=True,
                arms=CREDIT_WHY_ARMS,
                overrides=frozenset({"learning_rate", "prompts_per_step"}),
            ),
        ),
    ),
    Regime(
        "wordproblems-smollm2",
        "the pretrained regime: SmolLM2-135M-Instruct from its LoRA SFT warm start on the short word "
        f"problems, {PRETRAINED_PLAN.steps} steps of 8 prompts × 8 at learning rate 1e-5, scored on 150 test "
        "problems × 2 samples (results/pretrained-regime/PREREGISTRATION.md, Amendment 1)",
        confirmed=(
            Source(
                f"results/pretrained-regime/{PRETRAINED_PLAN.confirm}/runs",
                "confirmation, test split",
                "pretrained-regime.md",
                blinded=True,
                arms=PRETRAINED_ARMS,
                seeds=len(PRETRAINED_PLAN.seeds),
            ),
        ),
        blame="results/blame-smollm2/blame.json",
        recall="results/recall-smollm2/recall.json",
        bench="results/pretrained-regime/bench/bench.json",
    ),
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


def default_variant(
    runs: Mapping[str, Mapping[int, dict[str, Any]]], rule: str, allowed: frozenset[str] = frozenset()
) -> Mapping[int, dict[str, Any]]:
    """The rule's default variant in one folder: its own name, no overrides but `allowed` ones (a user's
    study passes ``TUNED``: with --tune-lr each method trains at its own chosen rate, an override)."""
    got = runs.get(rule, {})
    return got if all(set(r.get("overrides") or {}) <= allowed for r in got.values()) else {}


TUNED = frozenset({"learning_rate"})
"""The override a user's study's main group may carry (`default_variant`)."""


def tuned(runs: Mapping[int, dict[str, Any]]) -> bool:
    """Whether these runs trained at a learning rate chosen per method (an override)."""
    return any("learning_rate" in (r.get("overrides") or {}) for r in runs.values())


def pp_cell(ci: Mapping[str, Any]) -> str:
    """A Δ cell: a paired difference in percentage points, signed, with its 95% interval."""
    from oar_rl.study.screen_report import fmt_ci

    return fmt_ci(dict(ci), signed=True)


def comparable_seeds(
    mine: Mapping[int, dict[str, Any]],
    other: Mapping[int, dict[str, Any]],
    seeds: Iterable[int] | None = None,
) -> list[int]:
    """The seeds (of `seeds`, by default all of `mine`'s) both arms have whose training seconds may be
    put side by side: where every one of those runs records its machine (`machine`), only the seeds whose
    two runs share a machine and thread count (`oar_rl.machine.machine_line`); runs made before run files
    recorded their machine are all read, as before."""
    from oar_rl.machine import machine_line

    shared = [s for s in (mine if seeds is None else seeds) if s in mine and s in other]
    if not all(mine[s].get("machine") and other[s].get("machine") for s in shared):
        return shared
    return [s for s in shared if machine_line(mine[s]["machine"]) == machine_line(other[s]["machine"])]


def train_ratio(mine: Mapping[int, dict[str, Any]], grpo: Mapping[int, dict[str, Any]]) -> str:
    """The train-time cell: the mean training seconds per run of `mine` as × GRPO's, n/a without either.
    Where every run of both records its machine, only `comparable_seeds` are read: seconds of two CPUs
    are not put side by side. Runs made before run files recorded their machine are all read, as before."""
    if all(r.get("machine") for r in (*mine.values(), *grpo.values())):
        same = comparable_seeds(mine, grpo)
        mine, grpo = {s: mine[s] for s in same}, {s: grpo[s] for s in same}
    a = [r["train_seconds"] for r in mine.values()]
    b = [r["train_seconds"] for r in grpo.values()]
    return f"{statistics.fmean(a) / statistics.fmean(b):.2f}×" if a and b else NA


def ground_truth(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The ground-truth recall section of a recall record: `python -m oar_rl.study.recall`'s (at the top)
    or a study's recall.json (under "result"); {} without one."""
    return dict(rec.get("ground_truth") or (rec.get("result") or {}).get("ground_truth") or {})


def shown_path(path: str) -> str:
    """A path as the page shows it: relative to the current directory when it lies under it."""
    p = Path(path)
    if not p.is_absolute():
        return path
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return path


def _rate(rate: float) -> str:
    return f"{rate:.0e}".replace("e-0", "e-")


def rate_notes(root: Path, shown: Sequence[Regime]) -> list[str]:
    """The summary's notes on the long regime's rates, from the run files: GRPO's greedy loss at 4e-4, and
    which rules trained at which chosen rate."""
    lines = []
    g = grpo_greedy_at_4e4(root) if any(r.name == LONG_4E4 for r in shown) else {}
    if g:
        lines.append(
            f"- **{LONG_4E4}**: every rule at learning rate {_rate(g['rate'])}, where GRPO does not learn: "
            f"its greedy accuracy ends {g['drop']:.1f} points below the warm start's on the same test "
            f"sample ({g['grpo']:.1f}% vs {g['warm']:.1f}%), and {g['below']} of the confirmation's "
            f"{g['runs']} runs end below it."
        )
    for r in shown:
        for s in r.confirmed if r.name.endswith("at chosen rates") else ():
            at = arms_by_rate(root, s)
            if len(at) > 1:
                each = "; ".join(f"{', '.join(a)} at {_rate(q)}" for q, a in at.items())
                lines.append(f"- **{r.name}**: unequal rates, each chosen on the validation grid: {each}.")
    return lines
