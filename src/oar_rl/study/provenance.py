"""What a run file says about what ran: its effective settings and the code that made it (issue 56).

A study's runs share one **study protocol** (`StudySettings.protocol`, `oar_rl.study.screen_plan.protocol`):
what every run of a folder has in common. Its hash, each file's `protocol_hash`, is one per folder: a
resumed study compares it and the leaderboard checks it. An arm may override part of it (its learning
rate, prompts per step, completions per prompt, ...), and the study may train a method at its own rate.

- **Files written since issue 56**: `protocol` is the run's **effective** protocol, the study protocol
  with the arm's overrides and the learning rate it trained at put in (:func:`effective_protocol`);
  `protocol_changes` lists each key the run changed, {"study": the study's value, "run": the run's}
  ("study" absent: a key the study protocol lacks), so the study protocol, and `protocol_hash`, are
  recovered from the file alone (:func:`study_protocol`). `code` records the commit of the code that ran and
  whether its tracked files were modified (:func:`code_version`); like `machine`, it is descriptive,
  not protocol: the runs of one study may come from several commits (a later amendment's arms).
- **Files written before** (no `protocol_changes`): `protocol` is the study protocol itself, whatever the
  arm overrode, so its `learning_rate` and `prompts_per_step` are the study's defaults, not
  necessarily the run's; the run's own are its top-level `learning_rate` (the rate it trained at) and
  `overrides`. Those files are kept as written; :func:`run_settings` reads either kind.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def effective_protocol(
    study: Mapping[str, Any], overrides: Mapping[str, Any] | None, learning_rate: float | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the run's effective protocol, its changes): `study` with every override put in, then
    `learning_rate` (the rate the run trained at, when given); the changes {key: {"study": the study's
    value (absent where the study lacks the key), "run": the run's}} of every key that differs."""
    eff = {**study, **dict(overrides or {})}
    if learning_rate is not None:
        eff["learning_rate"] = learning_rate
    changes = {
        k: ({"study": study[k]} if k in study else {}) | {"run": v}
        for k, v in eff.items()
        if k not in study or v != study[k]
    }
    return eff, changes


def study_protocol(record: Mapping[str, Any]) -> dict[str, Any]:
    """The study protocol a run file was made under: its `protocol` as written before issue 56; since, its
    effective protocol with each of its `protocol_changes` set back to the study's value (dropped where
    the study lacks the key). `protocol_hash` is this protocol's hash either way."""
    proto = dict(record.get("protocol") or {})
    for key, change in (record.get("protocol_changes") or {}).items():
        if "study" in change:
            proto[key] = change["study"]
        else:
            proto.pop(key, None)
    return proto


def run_settings(record: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a run trained under, from a run file of either kind: its effective protocol (a file
    written before issue 56: the study protocol with its `overrides` and top-level `learning_rate` put
    in, as `train_variant` applied them)."""
    if "protocol_changes" in record:
        return dict(record["protocol"])
    eff, _ = effective_protocol(
        record.get("protocol") or {}, record.get("overrides"), record.get("learning_rate")
    )
    return eff


def _git(where: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def code_version() -> dict[str, Any]:
    """{"commit", "dirty"} of the git checkout this package is imported from, read once per process (the
    code a process runs is what it imported): `dirty` when a tracked file outside `results/` differs
    from the commit (run files landing there are data, not code). Both None when the package is not a
    tracked file of a git checkout (an installed wheel)."""
    here = Path(__file__).resolve().parent
    tracked = _git(here, "ls-files", "--error-unmatch", "__init__.py")
    head = _git(here, "rev-parse", "HEAD")
    if tracked is None or head is None or tracked.returncode or head.returncode:
        return {"commit": None, "dirty": None}
    top = _git(here, "rev-parse", "--show-toplevel")
    status = _git(
        Path(top.stdout.strip()) if top and not top.returncode else here,
        "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results",
    )  # fmt: skip
    dirty = None if status is None or status.returncode else bool(status.stdout.strip())
    return {"commit": head.stdout.strip(), "dirty": dirty}
