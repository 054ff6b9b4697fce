"""The credit-rule screen and its confirmation (issue 26), as pre-registered in
`results/credit-screen/PREREGISTRATION.md` (committed before the first run file).

- **Screen** (`python -m oar_rl.study.screen run --out DIR`): every arm of :data:`ARMS` trains from the
  shipped word-problem warm start with the v2 study's recipe (30 generation batches of 16 prompts × 8,
  τ 0.4, β 2, AS-Mean, learning rate 4e-4 unless the arm says otherwise) on seeds 2000-2004, and is
  scored on the **validation** split (300 problems × 4 samples at T = 1). Each arm is paired by seed with
  its GRPO baseline arm (the same learning rate and trust region).
- **Decision** (`... report --out DIR`, which also tabulates the confirmation's runs so far): the two
  non-GRPO arms with the highest mean paired difference to their baseline (ties: the cheaper) are the
  winners (:func:`winners`).
- **Confirmation** (`... confirm --out DIR`): the two winners and their GRPO baselines on 10 fresh seeds
  (100-109) on the **test** split (500 problems × 4 samples = 2000, and greedy), paired by seed.

Runs are resumable and several processes may share an output directory (the study's claim files);
each run file records the protocol, and a changed protocol is refused. This module holds the plan and
the arithmetic; training is the study's (`oar_rl.study.runner.train_and_evaluate`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from oar_rl.io import write_text_atomic
from oar_rl.study.config import PRESETS, Variant

SCREEN_SEEDS: tuple[int, ...] = (2000, 2001, 2002, 2003, 2004)
CONFIRM_SEEDS: tuple[int, ...] = tuple(range(100, 110))
LEARNING_RATE = 4e-4  # every method's choice in the v2 study's sweep (results/study-wordproblems-v2)
VALIDATION_PROBLEMS = 300
SCREEN_FORMAT = 1


@dataclass(frozen=True)
class Arm:
    """One screened configuration: a method, its OARConfig overrides and the GRPO arm it is paired with."""

    name: str
    method: str
    overrides: tuple[tuple[str, Any], ...] = ()
    baseline: str | None = "grpo"
    stage: int = 1
    cost: float = 1.0
    """Relative CPU cost (GRPO = 1), from the v2 study's per-run seconds; breaks ties between winners."""

    def variant(self) -> Variant:
        return Variant(self.name, self.method, self.overrides)


_TR = (("steps_per_generation", 2), ("learning_rate", 2e-4))  # trust region: 2 clipped steps per batch

ARMS: tuple[Arm, ...] = (
    # stage 1: the scored set, which rows, the floor, the new rule, OAR-P
    Arm("grpo", "grpo", baseline=None),
    Arm("oar-g[before-answer]", "oar-g", (("scored_tokens", "before-answer"),), cost=1.1),
    Arm("oar-g", "oar-g", cost=1.1),
    Arm("oar-g[positive]", "oar-g", (("reshape_rows", "positive"),), cost=1.1),
    Arm("oar-g[negative]", "oar-g", (("reshape_rows", "negative"),), cost=1.1),
    Arm("oar-g[floor=0.1]", "oar-g", (("floor", 0.1),), cost=1.1),
    Arm("first-error", "first-error", cost=2.5),
    Arm("oar-p", "oar-p", cost=4.0),
    # stage 2: step size (finer learning-rate grid, a trust region) and OAR-G's noise draws
    Arm("grpo[lr=2e-4]", "grpo", (("learning_rate", 2e-4),), baseline=None, stage=2),
    Arm("grpo[lr=2.8e-4]", "grpo", (("learning_rate", 2.83e-4),), baseline=None, stage=2),
    Arm("oar-g[lr=2e-4]", "oar-g", (("learning_rate", 2e-4),), "grpo[lr=2e-4]", 2, 1.1),
    Arm("oar-g[lr=2.8e-4]", "oar-g", (("learning_rate", 2.83e-4),), "grpo[lr=2.8e-4]", 2, 1.1),
    Arm("grpo[tr]", "grpo", _TR, baseline=None, stage=2),
    Arm("oar-g[tr]", "oar-g", _TR, "grpo[tr]", 2, 1.1),
    Arm("oar-g[draws=4]", "oar-g", (("oar_noise_draws", 4),), stage=2, cost=1.5),
)
ARM_BY_NAME = {a.name: a for a in ARMS}


EVAL: dict[str, tuple[str, int]] = {"screen": ("validation", VALIDATION_PROBLEMS), "confirm": ("test", 500)}
"""Per kind of run: (split it is scored on, problems); 4 samples each at T = 1."""


CONFIRM_CURVE = (150, 2)
"""The confirmation's accuracy curve every 5 steps: the first 150 test problems × 2 samples, as the v2
study's (its final accuracy is on all 500 × 4). Screen runs have no curve (final accuracy only)."""


def settings(kind: str):
    """The v2 study's full recipe at the screen's learning rate, scored on the split of `kind`."""
    curve = CONFIRM_CURVE if kind == "confirm" else (None, None)
    return replace(
        PRESETS["full"],
        learning_rate=LEARNING_RATE,
        lr_source="the v2 study's sweep chose 4e-4 for every method (results/study-wordproblems-v2)",
        test_problems=EVAL[kind][1],
        eval_samples=4,
        curve_problems=curve[0],
        curve_samples=curve[1],
        recall_trajectories=0,
    )


def protocol(kind: str) -> dict[str, Any]:
    """What every run of the screen (kind "screen") or the confirmation ("confirm") shares."""
    d = settings(kind).protocol()
    # screen_format 1 has scored the reasoning only (the default) since its first run, and its files record
    # no scored_tokens key; the oar-g[before-answer] arm names its own in its overrides
    d.pop("scored_tokens")
    return {**d, "split": EVAL[kind][0], "screen_format": SCREEN_FORMAT}


# ----------------------------------------------------------------------------------------------------
# training


def train_arms(out: Path, arms: list[Arm], seeds: tuple[int, ...], kind: str, cache_dir: str | None) -> None:
    """Train every (arm, seed) not stored under `out/<kind>/runs`, seed-major, sharing work with other
    processes on the same directory."""
    from oar_rl.study.runner import Progress, RunStore, run_claimed, train_and_evaluate
    from oar_rl.tasks import get_task

    task = get_task("wordproblems")
    s = replace(settings(kind), max_completion_length=task.max_completion_length, probe=task.probe)
    store = RunStore(out / kind / "runs", protocol(kind))
    store.check_all()
    ws = task.load_warm_start("default", cache_dir)
    train_rows = task.prompts("train", s.n_train_prompts)
    eval_rows = task.prompts(EVAL[kind][0], s.test_problems)
    plan = [(a, seed) for seed in seeds for a in arms]
    progress = Progress(sum(s.steps * int(dict(a.overrides).get("steps_per_generation", 1)) for a, _ in plan))
    try:
        with tempfile.TemporaryDirectory(prefix="oar-rl-screen-") as work:

            def train(item: tuple[int, Arm, int]) -> dict[str, Any]:
                i, arm, seed = item
                progress.describe(f"[{i}/{len(plan)}] {arm.name} seed {seed}")
                rec = train_and_evaluate(
                    task, ws, s, arm.variant(), seed, train_rows, eval_rows, Path(work) / f"run{i}",
                    progress, learning_rate=s.learning_rate, curve=kind == "confirm",
                )  # fmt: skip
                progress.write(
                    f"[{i}/{len(plan)}] {arm.name} seed {seed}: {kind} accuracy "
                    f"{rec['final']['sampled']:.3f}, {rec['wall_seconds']:.0f} s"
                )
                return rec

            items = [(a.name, seed, (i, a, seed)) for i, (a, seed) in enumerate(plan, 1)]
            run_claimed(store, items, train, progress, s.steps)
    finally:
        progress.close()


# ----------------------------------------------------------------------------------------------------
# aggregation and the decision rule


def load_runs(out: Path, kind: str) -> dict[str, dict[int, dict[str, Any]]]:
    """{arm: {seed: run record}} of every finished run under `out/<kind>/runs` (protocol checked)."""
    from oar_rl.study.runner import RunStore

    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for rec in RunStore(out / kind / "runs", protocol(kind)).check_all().values():
        runs.setdefault(rec["variant"], {})[int(rec["seed"])] = rec
    return runs


def _accuracies(runs_of: dict[int, dict[str, Any]], key: str) -> dict[int, float]:
    """{seed: final accuracy in %} of one arm's runs, "sampled" or "greedy" (runs without it left out)."""
    return {s: 100 * r["final"][key] for s, r in runs_of.items() if r["final"].get(key) is not None}


def summarize(runs: dict[str, dict[int, dict[str, Any]]], arms: list[Arm]) -> list[dict[str, Any]]:
    """One row per arm: accuracy and greedy accuracy (mean, t-interval over seeds) and their paired
    differences to its baseline."""
    from oar_rl.study.stats import mean_ci, paired_difference

    rows = []
    for arm in arms:
        got = runs.get(arm.name, {})
        acc, greedy = _accuracies(got, "sampled"), _accuracies(got, "greedy")
        row: dict[str, Any] = {
            "arm": arm.name,
            "method": arm.method,
            "overrides": dict(arm.overrides),
            "baseline": arm.baseline,
            "stage": arm.stage,
            "seeds": sorted(acc),
            "accuracy": mean_ci(list(acc.values()), bounds=(0, 100)) if acc else None,
            "greedy": mean_ci(list(greedy.values()), bounds=(0, 100)) if greedy else None,
            "train_seconds": (sum(r["train_seconds"] for r in got.values()) / len(got)) if got else None,
        }
        if arm.baseline is not None:
            base = runs.get(arm.baseline, {})
            for name, mine, ref in (
                ("paired", acc, _accuracies(base, "sampled")),
                ("paired_greedy", greedy, _accuracies(base, "greedy")),
            ):
                row[name] = paired_difference(mine, ref) if set(mine) & set(ref) else None
        rows.append(row)
    return rows


def winners(rows: list[dict[str, Any]], seeds: int = len(SCREEN_SEEDS), k: int = 2) -> list[str]:
    """The pre-registered rule: among non-GRPO arms with all `seeds` paired seeds, the `k` highest mean
    paired differences to their baselines; ties go to the cheaper arm. ValueError while arms are missing."""
    missing = [
        r["arm"]
        for r in rows
        if r["baseline"] is not None and len((r.get("paired") or {}).get("seeds", [])) < seeds
    ]
    if missing:
        raise ValueError(
            f"the screen is not complete: {', '.join(missing)} lack paired runs on {seeds} seeds"
        )
    cand = [r for r in rows if r["baseline"] is not None]
    cand.sort(key=lambda r: (-r["paired"]["mean"], ARM_BY_NAME[r["arm"]].cost))
    return [r["arm"] for r in cand[:k]]


CONTRASTS: tuple[tuple[str, str, str], ...] = (
    ("oar-g", "oar-g[before-answer]", "2: reasoning only vs the v2 scored set"),
    ("oar-g[positive]", "oar-g[negative]", "1: reshape correct rows only vs wrong rows only"),
    ("first-error", "oar-g", "1: blame the first error vs OAR-G"),
    ("oar-g[lr=2.8e-4]", "oar-g", "3: OAR-G's gap to GRPO at 2.8e-4 vs at 4e-4"),
    ("oar-g[lr=2e-4]", "oar-g", "3: OAR-G's gap to GRPO at 2e-4 vs at 4e-4"),
    ("oar-g[tr]", "oar-g", "3: OAR-G's gap to GRPO with a trust region vs without"),
    ("oar-g[draws=4]", "oar-g", "4: 4 noise draws vs 1"),
    ("oar-g[floor=0.1]", "oar-g", "5: floor 0.1 vs none"),
    ("oar-p", "oar-g", "OAR-P vs OAR-G"),
)
"""Which hypothesis each pair of arms speaks to (issue 26). Descriptive, not part of the pre-registered
decision: per seed, (arm − its baseline) − (other − its baseline), so arms trained at different step
sizes are compared by their gaps to GRPO at their own step size."""


def contrasts(runs: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per :data:`CONTRASTS` pair with runs on common seeds: the paired difference of the two
    arms' gaps to their baselines (percentage points)."""
    from oar_rl.study.stats import paired_difference

    def gap(name: str) -> dict[int, float]:
        arm, got = ARM_BY_NAME[name], runs.get(name, {})
        base = runs.get(arm.baseline, {}) if arm.baseline else {}
        return {
            s: 100 * (r["final"]["sampled"] - base[s]["final"]["sampled"])
            for s, r in got.items()
            if s in base
        }

    rows = []
    for a, b, what in CONTRASTS:
        ga, gb = gap(a), gap(b)
        if len(set(ga) & set(gb)) >= 2:
            rows.append({"arm": a, "versus": b, "hypothesis": what, "paired": paired_difference(ga, gb)})
    return rows


def contrasts_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "## Contrasts by hypothesis (descriptive)",
        "",
        "Per seed, the arm's gap to its GRPO baseline minus the other arm's (percentage points; at the same "
        "step size this is the difference of their accuracies). Not part of the pre-registered decision, "
        "and not corrected for the number of contrasts: a reading aid for the hypotheses.",
        "",
        "| hypothesis | arm − other | seeds | Δ (95% CI) | arm ahead |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        p = r["paired"]
        lines.append(
            f"| {r['hypothesis']} | {r['arm']} − {r['versus']} | {len(p['seeds'])} | "
            f"{_fmt_ci(p, signed=True)} | {p['wins']}/{len(p['seeds'])} |"
        )
    return "\n".join(lines) + "\n"


DIAGNOSTICS: tuple[tuple[str, str], ...] = (
    ("oar/ess_ratio", "ESS ratio"),
    ("oar/top10_mass", "top-10% |A| mass"),
    ("oar/pivot_adv_share", "pivot share of |A|"),
    ("clip_ratio/region_mean", "clipped share"),
)
"""Logged training metrics shown per arm (means over steps, then seeds); the pivot share is measured
against the testbed's ground-truth pivots (GRPO's equals the pivots' share of the tokens)."""


def diagnostics(runs: dict[str, dict[int, dict[str, Any]]], arms: list[Arm]) -> list[dict[str, Any]]:
    """Per arm: the gradient norm against its baseline's on the same seed (mean of per-seed ratios of
    per-run mean norms) and the :data:`DIAGNOSTICS` metrics."""

    def mean_of(rec: dict[str, Any], key: str) -> float | None:
        vals = [h[key] for h in rec.get("history", []) if h.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    def seed_mean(vals: list[float | None]) -> float | None:
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    rows = []
    for arm in arms:
        got = runs.get(arm.name, {})
        base = runs.get(arm.baseline or arm.name, {})
        ratios = []
        for seed, rec in got.items():
            g, b = mean_of(rec, "grad_norm"), mean_of(base.get(seed, {}), "grad_norm")
            if g is not None and b:
                ratios.append(g / b)
        row = {"arm": arm.name, "grad_norm_ratio": seed_mean(ratios)}
        row.update({k: seed_mean([mean_of(r, k) for r in got.values()]) for k, _ in DIAGNOSTICS})
        rows.append(row)
    return rows


def diagnostics_markdown(rows: list[dict[str, Any]]) -> str:
    head = " | ".join(label for _, label in DIAGNOSTICS)
    lines = [
        "## Training diagnostics (logged, means over the 30 steps and the seeds)",
        "",
        "Gradient norm: the arm's mean over its run divided by its baseline's on the same seed.",
        "",
        f"| arm | grad norm / baseline's | {head} |",
        "|---|" + "---:|" * (len(DIAGNOSTICS) + 1),
    ]
    for r in rows:
        cells = ["–" if r[k] is None else f"{r[k]:.4f}" for k, _ in DIAGNOSTICS]
        ratio = "–" if r["grad_norm_ratio"] is None else f"{r['grad_norm_ratio']:.2f}"
        lines.append(f"| {r['arm']} | {ratio} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt_ci(ci: dict[str, Any] | None, signed: bool = False) -> str:
    if not ci or ci.get("mean") is None:
        return "–"
    f = "{:+.1f}" if signed else "{:.1f}"
    if ci.get("low") is None:
        return f.format(ci["mean"])
    lo = f.format(ci["low"]) + ("*" if "low" in ci.get("clipped", ()) else "")
    hi = f.format(ci["high"]) + ("*" if "high" in ci.get("clipped", ()) else "")
    return f"{f.format(ci['mean'])} ({lo}, {hi})"


def markdown(rows: list[dict[str, Any]], title: str, note: str) -> str:
    """The table; with greedy accuracies (the confirmation) two greedy columns follow the sampled ones
    and the stage column is left out."""
    greedy = any(r.get("greedy") for r in rows)
    head = "| arm | " + ("" if greedy else "stage | ") + "seeds | accuracy % (95% CI) | "
    head += "Δ vs baseline, paired (95% CI) | baseline | wins | "
    head += ("greedy % (95% CI) | Δ greedy, paired | " if greedy else "") + "train s/run |"
    rule = (
        "|---|" + ("" if greedy else "---:|") + "---:|---:|---:|---|---:|" + ("---:|---:|" if greedy else "")
    )
    lines = [f"# {title}", "", note, "", head, rule + "---:|"]
    for r in rows:
        p, pg = r.get("paired"), r.get("paired_greedy")
        wins = "{}/{}".format(p["wins"], len(p["seeds"])) if p else "–"
        secs = "{:.0f}".format(r["train_seconds"]) if r["train_seconds"] else "–"
        cells = [r["arm"]] + ([] if greedy else [str(r["stage"])])
        cells += [str(len(r["seeds"])), _fmt_ci(r["accuracy"]), _fmt_ci(p, signed=True) if p else "–"]
        cells += [r["baseline"] or "–", wins]
        if greedy:
            cells += [_fmt_ci(r["greedy"]), _fmt_ci(pg, signed=True) if pg else "–"]
        lines.append("| " + " | ".join([*cells, secs]) + " |")
    return "\n".join(lines) + "\n"


def write_report(out: Path, kind: str) -> dict[str, Any]:
    """`out/<kind>/study.json` (beside the runs) and `out/<kind>.md`: the table of every arm with runs (and,
    for the screen, the winners once it is complete), the contrasts and the diagnostics."""
    runs = load_runs(out, kind)
    arms = [a for a in ARMS if a.name in runs] if kind == "screen" else _confirm_arms(out)
    rows = summarize(runs, arms)
    record: dict[str, Any] = {"kind": kind, "protocol": protocol(kind), "rows": rows,
                              "seeds": list(SCREEN_SEEDS if kind == "screen" else CONFIRM_SEEDS)}  # fmt: skip
    note = (
        "Validation split, 300 problems × 4 samples at T = 1 per run; seeds 2000-2004; differences paired "
        "by seed against the arm's GRPO baseline (same learning rate and trust region). Student-t "
        "intervals over seeds; * marks an end clipped to [0, 100]."
        if kind == "screen"
        else "Test split, 500 problems × 4 samples at T = 1 per run (2000), fresh seeds 100-109; differences "
        "paired by seed against the arm's GRPO baseline."
    )
    if kind == "screen":
        try:
            record["winners"] = winners(summarize(runs, list(ARMS)))
            note += f" **Winners (pre-registered rule): {', '.join(record['winners'])}.**"
        except ValueError as e:
            record["winners"] = None
            note += f" Winners not decided yet: {e}."
    text = markdown(rows, f"Credit {kind}", note)
    record["contrasts"] = contrasts(runs)  # the confirmation's: those between its two winners
    if record["contrasts"]:
        text += "\n" + contrasts_markdown(record["contrasts"])
    record["diagnostics"] = diagnostics(runs, arms)
    text += "\n" + diagnostics_markdown(record["diagnostics"])
    write_text_atomic(out / kind / "study.json", json.dumps(record, indent=1, sort_keys=True))
    write_text_atomic(out / f"{kind}.md", text)
    return record


def _confirm_arms(out: Path) -> list[Arm]:
    path = out / "screen" / "study.json"
    if not path.exists():
        raise ValueError(f"{path} does not exist: run the screen and `report` first")
    screen = json.loads(path.read_text())
    chosen = screen.get("winners")
    if not chosen:
        raise ValueError(f"{path} names no winners yet: finish the screen first")
    arms: list[Arm] = []
    for name in chosen:
        arm = ARM_BY_NAME[name]
        base = ARM_BY_NAME[arm.baseline]
        arms += [a for a in (base, arm) if a not in arms]
    return arms


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m oar_rl.study.screen", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("run", "report", "confirm"))
    p.add_argument("--out", default="results/credit-screen")
    p.add_argument("--stages", default="1,2", help="screen stages to train (default 1,2)")
    p.add_argument("--cache-dir", "--cache_dir", dest="cache_dir", default=None)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    out = Path(a.out)
    t0 = time.perf_counter()
    if a.action == "run":
        stages = {int(x) for x in a.stages.split(",")}
        train_arms(out, [x for x in ARMS if x.stage in stages], SCREEN_SEEDS, "screen", a.cache_dir)
    if a.action == "confirm":
        write_report(out, "screen")
        train_arms(out, _confirm_arms(out), CONFIRM_SEEDS, "confirm", a.cache_dir)
    kinds = ["confirm"] if a.action == "confirm" else ["screen"]
    if a.action == "report" and any((out / "confirm" / "runs").glob("*.json")):
        kinds.append("confirm")  # the confirmation so far (it resumes where it stopped)
    for kind in kinds:
        rec = write_report(out, kind)
        print(markdown(rec["rows"], f"Credit {kind}", ""), file=sys.stderr)
        print(f"{kind}: {time.perf_counter() - t0:.0f} s; wrote {out}/{kind}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
