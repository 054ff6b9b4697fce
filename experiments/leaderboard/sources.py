"""A user's own study on the leaderboard (`python -m experiments.leaderboard --source NAME=DIR --out
PAGE.md`).

`--source NAME=DIR` (repeatable) adds a column group NAME read from an `oar-rl study --out DIR` folder
(its runs/*.json, and study.json for the seeds it plans), beside the committed regimes, on a page of
your own (`--out`; the committed page is never written with `--source`). Its Δ vs GRPO is read from
whatever seeds both arms have, its *seeds* cell saying how far they carry (`study_seeds_label`:
exploratory, screen-size or confirmation-size), its blame and recall from `--blame` / `--recall` (default
recall: the study's own recall.json).

This module checks those values and makes each study a `Regime` (`study_regimes`; `SourceError` names a
bad value and what is valid), and gives the page (`leaderboard.py`) a study's cells (`study_cells`), its
line in the source list (`study_line`: where it is, its protocol, its credit modules and their rules) and
the paragraph that says what the studies' column groups are (`studies_note`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.leaderboard.regimes import (
    CONFIRM_SEEDS,
    REGIMES,
    SCREEN_SEEDS,
    TUNED,
    Regime,
    Source,
    default_variant,
    ground_truth,
    load_runs,
    pp_cell,
    shown_path,
    train_ratio,
    tuned,
)
from oar_rl.study.provenance import study_protocol


def study_seeds_label(n: int, planned: int | None = None) -> str:
    """The seeds cell of a user's study (`--source`): how far `n` paired seeds carry, against the committed
    sources' sizes. Fewer than `SCREEN_SEEDS`: *exploratory*; fewer than `CONFIRM_SEEDS`: *screen-size*;
    else *confirmation-size* (its size only: a study not registered before its seeds ran is still no
    confirmation). `planned`: the seeds its study.json plans for the arm, said when more than `n`."""
    kind = "exploratory" if n < SCREEN_SEEDS else "screen-size" if n < CONFIRM_SEEDS else "confirmation-size"
    of = f" of {planned} planned" if planned is not None and planned > n else ""
    return f"{kind}, {n}{of} seed{'' if n == 1 and not of else 's'}"


def _planned(root: Path, source: Source, rule: str) -> int | None:
    """The seeds the study's study.json plans for `rule` (an `oar-rl study`'s scope, a screen's seed
    list); None without one."""
    path = root / Path(source.runs).parent / "study.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    scope = rec.get("scope")
    if isinstance(scope, dict) and isinstance(scope.get("seeds"), int):
        return int((scope.get("method_seeds") or {}).get(rule, scope["seeds"]))
    return len(rec["seeds"]) if isinstance(rec.get("seeds"), list) else None


def study_cells(root: Path, source: Source, rule: str) -> list[str] | None:
    """Δ vs GRPO, seeds, evidence and the train-time ratio of `rule` in a user's study (None: not in it):
    read on whatever seeds both arms have, the seeds cell saying how far they carry."""
    from oar_rl.study.stats import paired_difference

    runs = load_runs(root, source.runs)
    mine, grpo = default_variant(runs, rule, TUNED), default_variant(runs, "grpo", TUNED)
    if not mine or not grpo:
        return None
    ratio, planned = train_ratio(mine, grpo), _planned(root, source, rule)
    label = source.label + (", each at its tuned learning rate" if tuned(mine) or tuned(grpo) else "")
    if rule == "grpo":
        return ["(reference)", study_seeds_label(len(mine), planned), label, ratio]
    acc = {s: 100 * r["final"]["sampled"] for s, r in mine.items()}
    ref = {s: 100 * r["final"]["sampled"] for s, r in grpo.items()}
    d = paired_difference(acc, ref)
    if not d["seeds"]:  # no seed in common yet
        return None
    return [pp_cell(d), study_seeds_label(len(d["seeds"]), planned), label, ratio]


def _modules(recs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """{(credit module as given, sha256 of its code): the rules of it with runs} of a study's run files:
    each rule's runs record their module (`credit_module`); earlier studies recorded every module in
    the shared protocol (`credit_modules`, without the rules)."""
    out: dict[tuple[str, str], set[str]] = {}
    for r in recs:
        m = r.get("credit_module")
        if isinstance(m, dict) and m.get("module"):
            out.setdefault((str(m["module"]), str(m.get("sha256", ""))), set()).add(r["variant"])
        for entry in (r.get("protocol") or {}).get("credit_modules") or ():
            out.setdefault((str(entry[0]), str(entry[1])), set()).update(entry[2] if len(entry) > 2 else ())
    return out


def study_line(root: Path, regime: Regime, s: Source, runs: Mapping[str, Mapping[int, Any]]) -> str:
    """A user's study in the source list: where it is, its protocol, its credit modules (and the rules
    of each), its state."""
    recs = [r for v in runs.values() for r in v.values()]
    given = f"`--source {regime.name}={s.study}`"
    line = f"- *{s.label}* ({given}): `{shown_path(s.runs)}/`, {len(recs)} run files"
    line += f", protocol `{recs[0].get('protocol_hash')}`"
    for (spec, sha), rules in sorted(_modules(recs).items()):
        line += f"; credit module `{spec}` (sha256 `{sha[:12]}`)"
        line += f": {', '.join(f'`{r}`' for r in sorted(rules))}" if rules else ""
    try:
        complete = json.loads((root / Path(s.runs).parent / "study.json").read_text()).get("complete")
    except (OSError, ValueError):
        return line + "; no study.json yet (the study writes it when it ends)"
    return line + {True: "; study.json: complete", False: "; study.json: not complete"}.get(complete, "")


def studies_note(regimes: Sequence[Regime]) -> list[str]:
    """The paragraph that says what the column groups of `--source` are, and how far their seeds carry."""
    names = [r.name for r in regimes if r.studies]
    if not names:
        return []
    return [
        f"**Your studies** (`--source`): the column group{'s' if len(names) > 1 else ''} "
        + ", ".join(f"**{n}**" for n in names) + f" {'come' if len(names) > 1 else 'comes'} from `oar-rl "
        "study` output outside the committed record (listed under Sources). Their Δ is read on whatever "
        "seeds both arms have, and their *seeds* "
        f"cell says how far that carries: *exploratory* (fewer than {SCREEN_SEEDS} seeds: a lead to "
        f"follow, not a result), *screen-size* ({SCREEN_SEEDS} to {CONFIRM_SEEDS - 1}, like the committed "
        f"screens) or *confirmation-size* ({CONFIRM_SEEDS} or more, like the committed confirmations; its "
        "size only: a confirmation fixes its arms and criterion before its seeds run). Their blame and "
        "recall are those of `--blame` / `--recall` (default recall: the study's own `recall.json`), n/a "
        "where a record has no figure for the rule.",
        "",
    ]  # fmt: skip


class SourceError(ValueError):
    """A bad `--source`, `--blame` or `--recall` value; the message names it and what is valid."""


STUDY_LAYOUT = "an `oar-rl study --out DIR` folder: DIR/runs/*.json, one file per run, and DIR/study.json"
RUN_KEYS = ("variant", "seed", "final", "protocol_hash")


def _not_a_study(value: str, folder: Path) -> str:
    """Why `folder` is not a study folder, with the likely fix."""
    why = f"--source {value!r}: {folder} is not {STUDY_LAYOUT} (it has no runs/ folder)"
    if any(folder.glob("*.seed*.json")):
        return why + f"; it holds run files itself: pass the study folder above it, {folder.parent}"
    inner = sorted(d.name for d in folder.iterdir() if (d / "runs").is_dir())
    if inner:
        return why + f"; these folders in it are: {', '.join(inner)} (pass one, e.g. {folder / inner[0]})"
    return why


def study_regime(root: Path, value: str, taken: Sequence[str], blame: str | None = None,
                 recall: str | None = None) -> Regime:  # fmt: skip
    """The column group of `--source NAME=DIR` (`value`): DIR's runs, labelled by their seeds, and the
    blame and recall records given (default recall: DIR/recall.json when it has ground truth).
    SourceError naming the value and what is valid: not NAME=DIR, a NAME in `taken` (the committed
    regimes' and the other --source names), DIR missing or not a study folder, no run file, a file that is
    not a run file, run files of two protocols, no GRPO run to pair to."""
    name, sep, folder = (x.strip() for x in value.partition("="))
    if not sep or not name or not folder:
        raise SourceError(f"--source {value!r}: expected NAME=DIR, a column label and {STUDY_LAYOUT} "
                          "(e.g. --source mine=my_study)")  # fmt: skip
    if name in taken:
        raise SourceError(f"--source {value!r}: the name {name!r} is taken; names in use: "
                          f"{', '.join(taken)} (pick another NAME)")  # fmt: skip
    d = Path(folder)
    if not d.is_dir():
        raise SourceError(f"--source {value!r}: {folder} is not a directory; pass {STUDY_LAYOUT}")
    if not (d / "runs").is_dir():
        raise SourceError(_not_a_study(value, d))
    runs_dir = str((d / "runs").resolve())
    for regime in REGIMES:  # a blinded confirmation: refused by its path, before any of its files is read
        for src in regime.confirmed:
            if src.blinded and (root / src.runs).resolve() == Path(runs_dir):
                raise SourceError(
                    f"--source {value!r}: {d / 'runs'} is a pre-registered confirmation of the committed "
                    f"regime {regime.name} ({src.label}), blinded until every arm has its seeds and then "
                    "shown on the committed page; pass a study of your own"
                )
    files = sorted((d / "runs").glob("*.json"))
    if not files:
        raise SourceError(f"--source {value!r}: {d / 'runs'} has no run files yet (an `oar-rl study` "
                          "writes one as each run finishes)")  # fmt: skip
    for f in files:
        try:
            rec = json.loads(f.read_text())
        except ValueError as e:
            raise SourceError(f"--source {value!r}: {f} is not JSON ({e})") from None
        missing = [k for k in RUN_KEYS if not isinstance(rec, dict) or k not in rec]
        if missing or "sampled" not in (rec["final"] or {}):
            raise SourceError(f"--source {value!r}: {f} is not an `oar-rl study` run file (it lacks "
                              f"{', '.join(missing) or 'final.sampled'}; {STUDY_LAYOUT})")  # fmt: skip
    try:
        runs = load_runs(root, runs_dir)
    except ValueError as e:
        raise SourceError(f"--source {value!r}: {e}") from None
    if not default_variant(runs, "grpo", TUNED):
        raise SourceError(f"--source {value!r}: {d / 'runs'} has no grpo run; every Δ is paired to GRPO's "
                          f"run on the same seed (its rules: {', '.join(sorted(runs))}; the study's "
                          "--credits must include grpo)")  # fmt: skip
    protocol = study_protocol(next(iter(next(iter(runs.values())).values())))  # not one arm's overrides
    split, scored = protocol.get("split", "test"), protocol.get("scored_tokens", "reasoning")
    own = d / "recall.json"  # the study's recall analysis, when it ran with ground truth
    if recall is None and own.is_file() and ground_truth(json.loads(own.read_text())):
        recall = str(own)
    checked = {flag: _record(flag, path, key) for flag, path, key in
               (("--blame", blame, "signals"), ("--recall", recall, "ground_truth")) if path}  # fmt: skip
    return Regime(
        name,
        f"your study {folder}",
        confirmed=(),
        studies=(Source(runs_dir, f"study {folder}, {split} split", "", study=folder, scored=scored),),
        blame=checked.get("--blame"),
        recall=checked.get("--recall"),
    )


def _record(flag: str, path: str, key: str) -> str:
    """`path` resolved, after checking it is a blame (`signals`) or recall (`ground_truth`) record."""
    what = {"signals": "an `oar-rl blame --out DIR` record (DIR/blame.json)",
            "ground_truth": "a `python -m oar_rl.study.recall --out DIR` record (DIR/recall.json) or a "
                            "study's recall.json"}[key]  # fmt: skip
    f = Path(path)
    if not f.is_file():
        raise SourceError(f"{flag} {path!r}: no such file; pass {what}")
    try:
        rec = json.loads(f.read_text())
    except ValueError as e:
        raise SourceError(f"{flag} {path!r}: not JSON ({e}); pass {what}") from None
    if not isinstance(rec, dict) or not (
        isinstance(rec.get("signals"), dict) if key == "signals" else ground_truth(rec)
    ):
        raise SourceError(f"{flag} {path!r}: has no {key!r} section; pass {what}")
    return str(f.resolve())


def _per_source(flag: str, values: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """{source NAME: FILE} of `--blame` / `--recall` values, each `NAME=FILE`, or `FILE` with one --source."""
    out: dict[str, str] = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not (sep and name in names):
            if len(names) != 1:
                raise SourceError(f"{flag} {v!r}: with several --source, name the study it belongs to: "
                                  f"{flag} NAME=FILE, NAME one of {', '.join(names)}")  # fmt: skip
            name, path = names[0], v
        if name in out:
            raise SourceError(f"{flag} {v!r}: the study {name!r} has a {flag} already ({out[name]!r})")
        out[name] = path
    return out


def study_regimes(root: Path, sources: Sequence[str], blame: Sequence[str] = (),
                  recall: Sequence[str] = ()) -> list[Regime]:  # fmt: skip
    """The column groups of every `--source`, in order (`study_regime`); SourceError on a bad value."""
    names = [v.partition("=")[0].strip() for v in sources]
    blames, recalls = _per_source("--blame", blame, names), _per_source("--recall", recall, names)
    out: list[Regime] = []
    for v, name in zip(sources, names, strict=True):
        taken = [r.name for r in (*REGIMES, *out)]
        out.append(study_regime(root, v, taken, blames.get(name), recalls.get(name)))
    return out
