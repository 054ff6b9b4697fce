"""The learning rate a study's runs train at, once no sweep runs in this call: the sweep's frozen choice
(`lr_tuning.json`), one given with `--lr`, or the task's default; and each method's own choice from a
per-method sweep. Split from `oar_rl.study.runner`, whose run store and records it reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oar_rl.study.config import StudySettings
from oar_rl.study.runner import StudyError, _check_same, _module_text, _read_json
from oar_rl.tasks import Task


def resolve_learning_rate(
    settings: StudySettings, task: Task, out: Path, *, lr: float | None
) -> tuple[float, str, dict[str, Any] | None]:
    """(learning rate, how it was chosen, lr_tuning record or None) when no sweep runs in this call."""
    tuning = _read_json(out / "lr_tuning.json")
    if tuning is not None:
        _check_same(out / "lr_tuning.json", tuning, settings.tuning_protocol())
        if lr is not None and lr != tuning["chosen"]:
            raise StudyError(
                f"--lr {lr:g} conflicts with the learning rate {tuning['chosen']:g} chosen by --tune-lr in "
                f"{out}; the learning rate is frozen once chosen (use a new --out to study another)"
            )
        return float(tuning["chosen"]), "tuned on the validation split (--tune-lr, lr_tuning.json)", tuning
    if lr is not None:
        return lr, "given on the command line (--lr), not tuned by this study", None
    note = task.learning_rate_note or "the task's default"
    return task.learning_rate, f"task default, not tuned by this study ({note})", None


def method_lrs(settings: StudySettings, tuning: dict[str, Any] | None) -> tuple[tuple[str, float], ...]:
    """Each method's own learning rate from a per-method sweep record (empty for a GRPO-only sweep, an
    untuned study or one given --lr). A method in scope that the sweep did not cover is refused: it would
    otherwise silently train at another method's rate."""
    chosen = (tuning or {}).get("chosen_per_method")
    if not chosen:
        return ()
    missing = [m for m in settings.method_list if m not in chosen]
    if missing:
        raise StudyError(
            f"no learning rate was chosen for {', '.join(missing)} (the sweep in lr_tuning.json covered "
            f"{', '.join(chosen)}); rerun with --tune-lr to sweep them too"
        )
    swept = (tuning or {}).get("credit_modules") or {}
    for m in settings.method_list:
        want, got = settings.module_record(m), swept.get(m)
        if (want or {}).get("sha256") != (got or {}).get("sha256"):
            raise StudyError(
                f"the learning rate of {m!r} in lr_tuning.json was chosen with {_module_text(got)}, but this "
                f"study loads {_module_text(want)}: the rule's code changed since. Restore the module, or "
                f"delete the lr/ sweep runs of {m!r} and rerun with --tune-lr."
            )
    return tuple((m, float(chosen[m])) for m in settings.method_list)
