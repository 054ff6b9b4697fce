"""Terminal output of training runs: one progress bar and a few summary lines, not TRL's log dicts.

TRL/transformers print the whole log dict (~30 keys) every logging step. `quiet_training(trainer,
log_file=...)` swaps transformers' `ProgressCallback` (and `PrinterCallback`) for `StepProgress`, a
tqdm bar over the optimizer steps with the reward and loss in its postfix; every log dict still goes
to the trainers' trackers (`report_to`) and, when a log file is given, to that file as one JSON line
per log. `summary(history)` turns a log history into a few lines for the end of a run;
`print_settings(command, settings)` prints a run's resolved settings in one block at its start.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

POSTFIX_KEYS: tuple[tuple[str, str], ...] = (("reward", "reward"), ("loss", "loss"), ("entropy", "entropy"))
"""(log key, label) shown in the bar's postfix when present."""


def _number(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class StepProgress(TrainerCallback):
    """A tqdm bar over optimizer steps; each log updates its postfix instead of printing a dict."""

    def __init__(self, desc: str = "train") -> None:
        self.desc = desc
        self.bar = None

    def on_train_begin(self, args, state, control, **kwargs):
        from tqdm.auto import tqdm

        if state.is_world_process_zero:
            self.bar = tqdm(
                total=state.max_steps, desc=self.desc, initial=state.global_step, dynamic_ncols=True
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs:
            return
        shown = {}
        for key, label in POSTFIX_KEYS:
            value = _number(logs.get(key))
            if value is not None:
                shown[label] = f"{value:.3g}"
        if shown:
            self.bar.set_postfix(shown, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class JsonlLog(TrainerCallback):
    """Appends every log dict (with its step) to a JSON-lines file: the run's full logs, off the terminal."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = {"step": state.global_step, **{k: v for k, v in logs.items() if _jsonable(v)}}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


class ClippingWarning(TrainerCallback):
    """Warns (once) when every completion of a logged step hit `max_completion_length`.

    Clipped completions have no answer, so every reward is 0, every advantage is 0 and the run learns
    nothing (loss 0, grad_norm 0) without any error: e.g. `configs/tiny-cpu.yaml` (16 tokens) with the
    embedded model, whose solutions are ~60 tokens.
    """

    def __init__(self) -> None:
        self.warned = False

    def on_log(self, args, state, control, logs=None, **kwargs):
        ratio = _number((logs or {}).get("completions/clipped_ratio"))
        if self.warned or ratio is None or ratio < 1.0 or not state.is_world_process_zero:
            return
        self.warned = True
        import warnings

        warnings.warn(
            f"every completion at step {state.global_step} was clipped at max_completion_length="
            f"{args.max_completion_length} tokens: no completion can finish its answer, so rewards, "
            "advantages and gradients are all 0; raise --max_completion_length",
            UserWarning,
            stacklevel=1,
        )


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool) or v is None


def quiet_training(trainer: Any, *, log_file: str | Path | None = None, desc: str = "train") -> None:
    """Replace the trainer's printed log dicts with `StepProgress`; log to `log_file` if given."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cls in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(cls)
    trainer.add_callback(StepProgress(desc))
    if log_file is not None:
        trainer.add_callback(JsonlLog(log_file))


def attach(
    trainer: Any, *, desc: str = "train", log_dir: str | Path | None = None, verbose: bool = False
) -> None:
    """Everything a command's training run needs for its output, in one call after building the trainer.

    A progress bar instead of TRL's printed log dicts (unless `verbose`); with `log_dir`, every log dict
    in `log_dir/logs.jsonl` and TensorBoard (when in `report_to`) under `log_dir/tensorboard`; a warning
    when every completion is clipped; the known harmless warnings silenced.
    """
    silence_known_warnings()
    trainer.add_callback(ClippingWarning())
    if not verbose:
        quiet_training(trainer, desc=desc)
    if log_dir is not None:
        trainer.add_callback(JsonlLog(Path(log_dir) / "logs.jsonl"))
        set_tensorboard_dir(trainer, Path(log_dir) / "tensorboard")


def set_tensorboard_dir(trainer: Any, path: str | Path) -> bool:
    """Point the trainer's TensorBoard callback (if `report_to` has one) at `path`; whether there was one."""
    found = False
    for cb in trainer.callback_handler.callbacks:
        if type(cb).__name__ == "TensorBoardCallback":
            cb.logging_dir = str(path)
            found = True
    return found


def settings_block(command: str, settings: Mapping[str, Any]) -> str:
    """A run's resolved settings as one block: a title line, then one `name  value` line each."""
    width = max(map(len, settings), default=0)
    lines = [f"oar-rl {command}: resolved settings"]
    lines += [f"  {name:<{width}}  {value}" for name, value in settings.items()]
    return "\n".join(lines)


def print_settings(command: str, settings: Mapping[str, Any]) -> None:
    """`settings_block` on stderr (stdout stays the command's results)."""
    import sys

    print(settings_block(command, settings), file=sys.stderr, flush=True)


def summary(history: Sequence[Mapping[str, Any]], keys: Sequence[str] = ("reward", "loss")) -> list[str]:
    """A few lines about a run's log history: steps, then first -> last (mean) of each key present."""
    rows = [h for h in history if "step" in h]
    if not rows:
        return ["no logged steps"]
    lines = [f"{int(rows[-1]['step'])} steps logged"]
    for key in keys:
        values = [v for v in (_number(h.get(key)) for h in rows) if v is not None]
        if values:
            mean = sum(values) / len(values)
            lines.append(f"{key}: {values[0]:.3g} -> {values[-1]:.3g} (mean {mean:.3g})")
    return lines


TRACKER_MODULES: dict[str, str] = {
    "tensorboard": "tensorboard",
    "trackio": "trackio",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "comet_ml": "comet_ml",
    "clearml": "clearml",
    "dvclive": "dvclive",
    "swanlab": "swanlab",
}


def check_trackers(report_to: str | Sequence[str] | None) -> list[str]:
    """The tracker names of a `report_to` value; ValueError naming the install when one is missing.

    transformers only finds out when the trainer is built, after the model has loaded; this checks
    first. 'none' (or empty) means no tracker; 'all' is left to transformers.
    """
    import importlib.util

    if report_to is None:
        return []
    names = [n.strip() for n in (report_to.split(",") if isinstance(report_to, str) else report_to)]
    names = [n for n in names if n and n != "none"]
    missing = [
        n for n in names if n in TRACKER_MODULES and importlib.util.find_spec(TRACKER_MODULES[n]) is None
    ]
    if missing:
        raise ValueError(
            f"report_to {','.join(missing)}: not installed; pip install 'oar-rl[trackers]' (tensorboard, "
            f"trackio) or pip install {' '.join(TRACKER_MODULES[n] for n in missing)}"
        )
    return names


KNOWN_HARMLESS_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    # TRL 1.16 reads the deprecated `model.is_gradient_checkpointing` on every generation; the user can do
    # nothing about it and it changes nothing until transformers v6.
    (r"`is_gradient_checkpointing` is deprecated", FutureWarning),
    # TRL 1.16's GRPOConfig turns `gradient_checkpointing` on by default, and transformers then warns of
    # its new name whenever `oar-rl train` parses its command line (before any of the user's flags).
    (r"`gradient_checkpointing` is deprecated", FutureWarning),
)


def silence_known_warnings() -> None:
    """Ignore exactly the warnings in `KNOWN_HARMLESS_WARNINGS` (by message), nothing else."""
    import warnings

    for message, category in KNOWN_HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


@contextlib.contextmanager
def no_load_bars():
    """transformers' "Loading weights" / "Writing model shards" bars off for the block (then restored)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
