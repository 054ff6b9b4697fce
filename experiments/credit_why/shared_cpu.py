"""Which confirmation runs shared the CPU with other work: `results/credit-why/confirm/shared-cpu.json`.

The pre-registration reads cost ratios "from runs that ran under the same load, and said so": every run
shares the 2-core machine with the other confirmation process, but some also ran beside a test suite or
a fresh-clone CI run, and their `train_seconds` are inflated (their accuracies are not). A run file does
not hold its own clock times, and git does not keep modification times, so this record is made on the
machine that wrote the runs, as they land: a run's end is its file's modification time, its start that
minus its `wall_seconds`. The windows of other work are the run log's (`experiments/credit_why/README.md`),
entered by hand. A run is *shared* when its [start, end] overlaps a window.

    python -m experiments.credit_why shared-cpu   # records the runs landed since the last call

`answers.py` reports the seconds ratios over every run (pre-registered) and over the runs no window
touched, with their counts; the token ratios are not affected by load.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
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
)


def _t(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def overlapping(start: datetime, end: datetime, windows=WINDOWS) -> list[str]:
    """The windows (their start times) that [start, end] overlaps."""
    return [w[0] for w in windows if start < _t(w[1]) and _t(w[0]) < end]


def update(confirm_dir: Path) -> dict[str, Any]:
    """Record the times of the run files under `confirm_dir/runs` not yet in `confirm_dir/shared-cpu.json`
    (a recorded run keeps its times: a later checkout's modification times are not the runs' ends), then
    mark every recorded run against the windows. Returns the record."""
    path = confirm_dir / FILE
    rec = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    for f in sorted((confirm_dir / "runs").glob("*.json")):
        if f.stem in rec["runs"]:
            continue
        end = datetime.fromtimestamp(f.stat().st_mtime, UTC)
        wall = float(json.loads(f.read_text())["wall_seconds"])
        start = datetime.fromtimestamp(end.timestamp() - wall, UTC)
        rec["runs"][f.stem] = {
            "start": start.isoformat(timespec="seconds"),
            "end": end.isoformat(timespec="seconds"),
        }
    for times in rec["runs"].values():
        times["shared_with"] = overlapping(_t(times["start"]), _t(times["end"]))
    rec["windows"] = [list(w) for w in WINDOWS]
    write_text_atomic(path, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def unshared(rec: dict[str, Any] | None) -> set[str] | None:
    """The run keys ("arm.seedN") that no window touched; None without a record."""
    if rec is None:
        return None
    return {key for key, t in rec["runs"].items() if not t["shared_with"]}
