"""Mid-run checkpoints of a study run, so that a run of hours outlives its process.

A study run is otherwise all or nothing: its run file is written when it ends, and a process stopped an
hour into a run (the end of a working session, a reboot, a kill) loses that hour. With
`StudySettings.checkpoint_every` = N, each run saves TRL's full checkpoint (weights, optimizer,
scheduler, RNG states, trainer state: `save_only_model=False`) every N steps and at its last step, into
a folder beside the study's output that outlives the process (`<out>/.checkpoints/<store>/<run>/`);
the same command, run again, resumes each unfinished run from its newest complete checkpoint and
writes the same run file the uninterrupted run would have (tested: `tests/test_study_checkpoints.py`).

What TRL's checkpoint does not hold is kept beside it, in `checkpoint-<step>/study_state.json`
(written, then renamed, after TRL's files: a checkpoint without it is incomplete and is not resumed
from): the held-out curve measured so far, the seconds of training and evaluation spent so far, and
the steps this run resumed at. The run file records those steps (`resumed_at`); its `train_seconds`
sum the seconds of every process up to the checkpoint each resumed from, so the steps a stopped process
made after its last checkpoint, and made again, are not counted. Two checkpoints are kept
(`save_total_limit=2`), so a process stopped while saving leaves the previous one complete. The folder
is removed when the run's record is made, and by `--fresh`. Each state names its run (protocol hash,
variant, learning rate, seed): a checkpoint of another run in the same folder is refused, never resumed.

Not protocol: checkpoints change where a run's state is kept, not what it computes.

On resuming a model whose output head is tied to its input embedding (SmolLM2: `tie_word_embeddings`),
transformers reports "missing keys in the checkpoint model loaded: ['lm_head.weight']": the checkpoint
stores the shared tensor once, under the embedding, and loading it restores the head with it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Protocol

from transformers import TrainerCallback

from oar_rl.io import write_text_atomic

STATE_FILE = "study_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class Stateful(Protocol):
    """A callback whose state a checkpoint keeps: `export_state()` -> JSON, `restore_state(state, step)`."""

    def export_state(self) -> dict[str, Any]: ...
    def restore_state(self, state: dict[str, Any], step: int) -> None: ...


def run_folder(root: Path, run_file: str) -> Path:
    """Where the run whose file is `root / run_file` (a run store's folder and its
    `oar_rl.study.runner.RunStore.filename`) keeps its checkpoints: beside the store, outliving the
    process, as its claims do (`<out>/.checkpoints/<store folder>/<run>`)."""
    return root.parent / ".checkpoints" / root.name / run_file.removesuffix(".json")


def latest_checkpoint(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint under `directory` (one holding `study_state.json`) and its state;
    None if there is none. A checkpoint folder without the file (a process stopped while saving) is
    skipped."""
    if not directory.is_dir():
        return None
    found = []
    for path in directory.iterdir():
        m = _CHECKPOINT.match(path.name)
        if m and path.is_dir() and (path / STATE_FILE).is_file():
            found.append((int(m.group(1)), path))
    if not found:
        return None
    step, path = max(found)
    state = json.loads((path / STATE_FILE).read_text())
    if state.get("step") != step:
        raise ValueError(f"{path / STATE_FILE}: step {state.get('step')!r} is not the checkpoint's {step}")
    return path, state


class RunCheckpoints(TrainerCallback):
    """TRL checkpoints every `every` optimizer steps into `directory`, with the study's own state beside
    each (see the module docstring); `resume()` restores the newest and says where TRL resumes from."""

    def __init__(
        self, directory: Path, every: int, stateful: list[Stateful], run: dict[str, Any] | None = None
    ):
        if every < 1:
            raise ValueError(f"checkpoint every={every} steps must be >= 1")
        # what the run is (protocol hash, variant, rate, seed): a checkpoint of another is refused
        self.run = run or {}
        self.directory = Path(directory)
        self.every = every
        self.stateful = list(stateful)
        self.prior_seconds = 0.0  # seconds of the processes before this one, up to the resumed checkpoint
        self.resumed_at: list[int] = []
        self.t0: float | None = None  # set when this process's training starts

    def resume(self) -> str | None:
        """Restore the newest complete checkpoint's state into the callbacks; its path (for
        `Trainer.train(resume_from_checkpoint=...)`), or None to start afresh."""
        found = latest_checkpoint(self.directory)
        if found is None:
            return None
        path, state = found
        if state.get("run", {}) != self.run:
            raise ValueError(
                f"{path} holds run {state.get('run')!r}, not this run {self.run!r} (another protocol, "
                f"rate or seed): delete {self.directory} to train this run afresh"
            )
        self.prior_seconds = float(state["seconds"])
        self.resumed_at = [*state.get("resumed_at", []), int(state["step"])]
        for cb, cb_state in zip(self.stateful, state["callbacks"], strict=True):
            cb.restore_state(cb_state, int(state["step"]))
        return str(path)

    def seconds(self) -> float:
        """Training seconds so far, over every process (the held-out evaluations inside included)."""
        return self.prior_seconds + (time.perf_counter() - self.t0 if self.t0 is not None else 0.0)

    def on_train_begin(self, args, state, control, **kwargs):
        if self.t0 is None:
            self.t0 = time.perf_counter()
        return control

    def on_save(self, args, state, control, **kwargs):
        step = int(state.global_step)
        record = {
            "step": step,
            "run": self.run,
            "seconds": self.seconds(),
            "resumed_at": self.resumed_at,
            "callbacks": [cb.export_state() for cb in self.stateful],
        }
        write_text_atomic(
            Path(args.output_dir) / f"checkpoint-{step}" / STATE_FILE, json.dumps(record) + "\n"
        )
        return control

    def trainer_config(self, steps_per_generation: int = 1) -> dict[str, Any]:
        """The `OARConfig` keys that make TRL save these checkpoints (`every` generation batches, each
        `steps_per_generation` optimizer steps)."""
        return {
            "output_dir": str(self.directory),
            "save_strategy": "steps",
            "save_steps": self.every * steps_per_generation,
            "save_total_limit": 2,
            "save_only_model": False,
        }
