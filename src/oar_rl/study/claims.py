"""Several processes sharing one run store: each (name, seed) is claimed before it is trained.

A claim is a file under `.claims/<store folder>/` beside the store, created exclusively and holding the
claiming process's pid, host and start time. A claim whose process died on this machine is taken over;
one from another machine never is (its process cannot be checked from here), nor one still being written
(empty or unreadable and under a minute old). :func:`run_claimed` trains whatever no file holds and no
live claim covers, and waits for the rest, doing other work meanwhile if it is given some.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class RunStore(Protocol):
    """What claiming needs of a run store (`oar_rl.study.runner.RunStore`): its folder, its file names,
    and reading and writing one run."""

    root: Path

    def filename(self, name: str, seed: int) -> str: ...
    def get(self, name: str, seed: int) -> dict[str, Any] | None: ...
    def put(self, name: str, seed: int, record: dict[str, Any]) -> dict[str, Any]: ...


CLAIM_POLL_SECONDS = 15.0


def _wait() -> None:
    time.sleep(CLAIM_POLL_SECONDS)


def _pid_alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - alive, owned by someone else
        return True
    return True


def _claim_path(store: RunStore, name: str, seed: int) -> Path:
    return store.root.parent / ".claims" / store.root.name / (store.filename(name, seed) + ".claim")


def _held_elsewhere(path: Path) -> bool:
    """Whether the claim at `path` belongs to a live process on this machine or to another machine (whose
    claims are never taken over from here); False if there is none, or its process died."""
    import os
    import socket

    try:
        other = json.loads(path.read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):  # being written (created empty, then filled) or left half-written
        try:
            return time.time() - path.stat().st_mtime < 60.0
        except FileNotFoundError:
            return False
    host = other.get("host")
    if host not in (None, socket.gethostname()):
        return True
    pid = other.get("pid")
    return host is not None and isinstance(pid, int) and pid != os.getpid() and _pid_alive(pid)


def claimable(store: RunStore, name: str, seed: int) -> bool:
    """Whether (name, seed) is neither stored nor held by another live process (a look, not a claim)."""
    return not (store.root / store.filename(name, seed)).exists() and not _held_elsewhere(
        _claim_path(store, name, seed)
    )


def _try_claim(store: RunStore, name: str, seed: int) -> Path | None:
    """Claim (name, seed) for this process: a claim file created exclusively; a claim left by a dead
    process on this machine is taken over. Returns the claim's path, or None if another live process
    (or another machine) holds it."""
    import os
    import socket

    path = _claim_path(store, name, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _held_elsewhere(path):
                return None
            path.unlink(missing_ok=True)  # its process died: take the run over
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        return path
    return None


def run_claimed(
    store: RunStore,
    items,
    train,
    progress: Any,
    steps: int,
    *,
    idle: Callable[[], bool] | None = None,
    wait: bool = True,
    check: Callable[[dict, Any], None] | None = None,
) -> dict[str, dict]:
    """Train every (name, seed, payload) of `items` that `store` lacks, several processes sharing the work.

    Each run is claimed before training (a claim file under `.claims/` beside the store), so N processes
    started on the same output directory split the runs between them; a process that finds nothing left
    to claim waits for the others' runs, first calling `idle()` (other work; True if it did some) and
    sleeping only when that did nothing. With `wait=False` it returns at once instead (the records of
    the runs still held by others are then missing). `progress`: a `runner.Progress` or None. Returns
    {key: record} for every item it has; `train(payload)` returns one record. `check(record, payload)`
    raises when a stored record cannot stand for the item (e.g. it was trained at another learning rate,
    which a run's name does not carry).
    """
    pending = list(items)
    done: dict[str, dict] = {}
    while pending:
        waiting = []
        for name, seed, payload in pending:
            rec = store.get(name, seed)
            if rec is not None and check is not None:
                check(rec, payload)
            if rec is None:
                claim = _try_claim(store, name, seed)
                if claim is None:
                    waiting.append((name, seed, payload))
                    continue
                try:
                    rec = store.get(name, seed)  # finished between our look and our claim
                    if rec is None:
                        rec = store.put(name, seed, train(payload))
                finally:
                    claim.unlink(missing_ok=True)
            elif progress is not None:
                progress.bar.update(steps)
            done[f"{name}/seed{seed}"] = rec
        if waiting and len(waiting) == len(pending):
            if not wait:
                break
            if idle is None or not idle():
                if progress is not None:
                    progress.describe(f"waiting for {len(waiting)} run(s) of other processes")
                _wait()
        pending = waiting
    return done
