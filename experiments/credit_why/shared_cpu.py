"""Which confirmation runs shared the CPU with other work: `results/credit-why/confirm/shared-cpu.json`.

The pre-registration reads cost ratios "from runs that ran under the same load, and said so": every run
shares the 2-core machine with the other confirmation process, but some also ran beside a test suite or
a fresh-clone CI run, and their `train_seconds` are inflated (their accuracies are not). A run file does
not hold its own clock times, and git does not keep modification times, so this record is made on the
machine that wrote the runs, as they land: a run's end is its file's modification time, its start that
minus its `wall_seconds`. The windows of other work are the run log's (`experiments/credit_why/README.md`),
entered by hand. A run is under the *same load* when its [start, end] overlaps no window and the other
confirmation process trained beside it throughout (the last runs, and a run beside a lost one's gap, may
train alone, which is faster).

    python -m experiments.credit_why shared-cpu   # records the runs landed since the last call

`answers.py` reports the seconds ratios over every run (pre-registered) and over the runs under the same
load, with their counts; the token ratios are not affected by load.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from oar_rl.io import write_text_atomic

FILE = "shared-cpu.json"

WINDOWS = (  # (start, end, what ran beside the two confirmation processes), UTC; the run log's
    ("2026-11-28T10:47", "2026-11-28T10:48", "a docs build and 23 tests"),
    ("2026-11-28T11:15", "2026-11-28T11:24", "the whole test suite (make test)"),
    ("2026-11-28T11:59", "2026-11-28T12:11", "a fresh clone's .ci/run"),
    ("2026-11-28T12:28", "2026-11-28T12:39", "a fresh clone's .ci/run"),
    ("2026-11-28T13:16", "2026-11-28T13:24", "a fresh clone's .ci/run, cut by the end of the session"),
    ("2026-11-28T13:34", "2026-11-28T13:40", "tests/test_credit_why.py, twice"),
    ("2026-11-28T13:42:20", "2026-11-28T13:42:49", "tests/test_credit_why.py (a reviewer)"),
    ("2026-11-28T13:44", "2026-11-28T13:46", "tests/test_credit_why.py"),
    ("2026-11-28T14:48:24", "2026-11-28T15:02:42", "tests/test_layout.py and tests/test_docs.py (niced)"),
    # Amendment 3's runs (one process from 23:20): the other work beside them, to the window's end
    ("2026-11-28T23:20", "2026-11-28T23:40", "the SmolLM2 regime's LoRA warm-start build (1 thread)"),
    ("2026-11-28T23:40", "2026-11-29T00:34", "oar-rl study on the SmolLM2 regime (2 threads), tests"),
    # from 00:29:41 two processes again (Amendment 3, the remaining 36 runs)
    (
        "2026-11-29T00:31",
        "2026-11-29T00:53",
        "2-step GRPO pilots on the SmolLM2 regime (1 thread; the first "
        "OOM-killed at 20 GB with the machine swapping), tests",
    ),
    (
        "2026-11-29T00:53",
        "2026-11-29T01:06",
        "both processes stopped (SIGSTOP) while oar-rl bench timed the "
        "SmolLM2 regime: the runs in flight count the pause in their seconds",
    ),
    ("2026-11-29T01:06", "2026-11-29T01:20", "tests and docs builds"),
    (
        "2026-11-29T01:20",
        "2026-11-29T02:02",
        "oar-rl blame on the SmolLM2 regime (1 thread, nice 5); from "
        "01:34 to 01:53 also a fresh clone's .ci/run; tests",
    ),
    ("2026-11-29T02:02", "2026-11-29T02:12", "tests and docs builds"),
    ("2026-11-29T02:14", "2026-11-29T02:33", "a fresh clone's .ci/run"),
    ("2026-11-29T03:30", "2026-11-29T03:37", "two study plans (--dry-run) and 4 tests, at nice 19"),
    ("2026-11-29T03:38", "2026-11-29T03:47", "a fresh clone's .ci/run"),
    ("2026-11-29T03:50", "2026-11-29T04:21", "the leaderboard, the docs build and tests"),
    ("2026-11-29T04:20", "2026-11-29T04:40", "a recall command on SmolLM2 at nice 19 (stopped), a test"),
    ("2026-11-29T05:06", "2026-11-29T05:30", "the run files' pages regenerated, a fresh clone's .ci/run"),
)
"""A time given to the minute covers that whole minute at the end of a window."""

LOST = (  # runs cut by the end of a session (no file): they shared the CPU with the runs beside them
    ("grpo.seed404", "2026-11-28T13:17:01", "2026-11-28T13:24:05"),
    ("grpo-compute.seed404", "2026-11-28T13:19:59", "2026-11-28T13:24:05"),
    ("grpo.seed409", "2026-11-28T16:22:13", "2026-11-28T16:30:00"),  # the session's end: 16:28–16:31
    ("grpo-compute.seed409", "2026-11-28T16:23:24", "2026-11-28T16:30:00"),
    # Amendment 3: both processes stopped at the end of the 2026-11-29 working window, 19 of 40 runs in
    ("grpo-samples.seed404", "2026-11-29T02:51:38", "2026-11-29T03:00:29"),
    ("first-error[lr=2e-4].seed405", "2026-11-29T02:58:14", "2026-11-29T03:00:29"),
)

ALONE = 60.0
"""Seconds a run may train with no other confirmation run beside it and still count as under the same load
(the processes start ~20 s apart; a process claims its next run at once)."""


def _t(text: str, end: bool = False) -> datetime:
    t = datetime.fromisoformat(text)
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    return t + timedelta(seconds=59) if end and len(text) == 16 else t  # "YYYY-MM-DDTHH:MM"


def overlapping(start: datetime, end: datetime, windows=WINDOWS) -> list[str]:
    """The windows (their start times) that [start, end] overlaps."""
    return [w[0] for w in windows if start < _t(w[1], end=True) and _t(w[0]) < end]


def alone_seconds(span: tuple[datetime, datetime], others: list[tuple[datetime, datetime]]) -> float:
    """Seconds of `span` that no span of `others` covers."""
    start, end = span
    cuts = sorted((max(a, start), min(b, end)) for a, b in others if a < end and start < b)
    alone, at = 0.0, start
    for a, b in cuts:
        alone += max(0.0, (a - at).total_seconds())
        at = max(at, b)
    return alone + max(0.0, (end - at).total_seconds())


def update(confirm_dir: Path) -> dict[str, Any]:
    """Record the times of the run files under `confirm_dir/runs` not yet in `confirm_dir/shared-cpu.json`
    (a recorded run keeps its times: a later checkout's modification times are not the runs' ends), then
    mark every recorded run against the windows and with its seconds alone (no other confirmation run,
    lost ones included, beside it; recomputed at every call, since a run still training is not in the
    record yet: the figures are final once the last run has landed). Returns the record."""
    path = confirm_dir / FILE
    rec = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    for f in sorted((confirm_dir / "runs").glob("*.json")):
        run = json.loads(f.read_text())
        key = run["key"].replace("/", ".")  # "arm.seedN" by the arm's name ("grpo[lr=1e-4]"), not the file's
        if key in rec["runs"]:
            continue
        end = datetime.fromtimestamp(f.stat().st_mtime, UTC)
        wall = float(run["wall_seconds"])
        start = datetime.fromtimestamp(end.timestamp() - wall, UTC)
        rec["runs"][key] = {
            "start": start.isoformat(timespec="seconds"),
            "end": end.isoformat(timespec="seconds"),
        }
    spans = {k: (_t(t["start"]), _t(t["end"])) for k, t in rec["runs"].items()}
    lost = [(_t(a), _t(b)) for _, a, b in LOST]
    for key, times in rec["runs"].items():
        times["shared_with"] = overlapping(*spans[key])
        others = [v for k, v in spans.items() if k != key] + lost
        times["alone_seconds"] = round(alone_seconds(spans[key], others), 1)
    rec["windows"], rec["lost"] = [list(w) for w in WINDOWS], [list(x) for x in LOST]
    write_text_atomic(path, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def same_load(rec: dict[str, Any] | None, keys: set[str] | None = None) -> set[str] | None:
    """The run keys ("arm.seedN") under the same load: the other confirmation process beside them
    throughout (at most `ALONE` seconds alone) and no window of other work; None without a record. With
    `keys`, a key the record lacks is an error (record it with `shared-cpu` on the machine that wrote
    it): an unrecorded run must not drop silently out of the ratio."""
    if rec is None:
        return None
    want = set(rec["runs"]) if keys is None else set(keys)
    missing = sorted(want - set(rec["runs"]))
    if missing:
        raise ValueError(f"{FILE} lacks {missing}: run `shared-cpu` where the runs were written")
    runs = rec["runs"]
    return {k for k in want if not runs[k]["shared_with"] and runs[k]["alone_seconds"] <= ALONE}
