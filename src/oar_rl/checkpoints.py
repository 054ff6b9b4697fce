"""`oar-rl train`'s output directory and checkpoints: which checkpoint a resume starts from, and the
settings it must share with the run that saved it.

Transformers' Trainer accepts any directory as `resume_from_checkpoint` and restores the optimizer and
scheduler from it whatever the new arguments say, so a resume under other settings (another credit mode,
τ, learning rate, ...) runs silently as a mixture of two runs; a fresh run into a directory that holds
another run's checkpoints appends to its `logs.jsonl`, and `latest` would later pick the other run's
checkpoint. Both are refused here, naming what differs. A checkpoint whose save was cut short (no
`trainer_state.json` or no weights) is skipped by `latest`, with a warning, and refused when named.

The model is pinned too (`pin_model`, `check_model`, `record_model`): a Hub id's revision is resolved to
one commit before the model loads, and the run's model identity (the commit, or a local directory's
fingerprint) is recorded in the output directory; a resume that would load another model than the one
its checkpoint's run recorded is refused (a LoRA adapter, or the KL reference model, would sit on another
base). What this does not pin (TRL's config read by name, vLLM, each process resolving for itself):
docs/guides/train.md.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
SHARDED_WEIGHTS = ("pytorch_model_fsdp_*", "global_step*")
"""Directories of sharded states Trainer resumes from: FSDP's SHARDED_STATE_DICT, DeepSpeed's ZeRO."""
RESULT_FIELDS = (
    "learning_rate", "lr_scheduler_type", "warmup_ratio", "warmup_steps", "weight_decay", "seed",
    "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "steps_per_generation",
    "num_iterations", "max_completion_length", "temperature", "top_p", "top_k", "beta", "epsilon",
    "epsilon_high", "loss_type", "scale_rewards", "importance_sampling_level", "top_entropy_quantile",
    "mask_truncated_completions", "reward_weights",
)  # fmt: skip
"""TRL/transformers fields a resume must keep (besides every field oar-rl adds, `OARConfig`'s own);
`max_steps`, `num_train_epochs`, logging and saving may change (extending a run is what resume is for)."""
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def missing_parts(path: str | os.PathLike) -> list[str]:
    """What a complete checkpoint has and `path` lacks: trainer_state.json, and any of the weight files."""
    root = Path(path)
    missing = [] if (root / STATE_FILE).is_file() else [STATE_FILE]
    sharded = any(p.is_dir() for pattern in SHARDED_WEIGHTS for p in root.glob(pattern))
    if not sharded and not any((root / name).is_file() for name in WEIGHT_FILES):
        missing.append("weights (" + " or ".join(WEIGHT_FILES[::2]) + ", or a sharded state)")
    return missing


def checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """The `checkpoint-N` directories of `output_dir`, newest (largest N) first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    return [p for _, p in sorted(found, key=lambda t: t[0], reverse=True)]


def resolve_checkpoint(value: str | None, output_dir: str) -> str | None:
    """None | 'true'/'latest' (the newest complete checkpoint in output_dir) | 'false' | a checkpoint path.

    ValueError naming the problem: no checkpoint, or a named directory that is not a complete one."""
    if value is None or str(value).lower() in ("", "false", "none"):
        return None
    if str(value).lower() in ("true", "latest"):
        found = checkpoints(output_dir) if os.path.isdir(output_dir) else []
        for path in found:
            missing = missing_parts(path)
            if not missing:
                return str(path)
            warnings.warn(
                f"--resume_from_checkpoint {value}: skipping {path}, an incomplete checkpoint (no "
                f"{', '.join(missing)}; a save cut short?)",
                stacklevel=2,
            )
        what = "no complete checkpoint-* directory" if found else "no checkpoint-* directory"
        raise ValueError(f"--resume_from_checkpoint {value}: {what} in {output_dir}")
    if not os.path.isdir(value):
        raise ValueError(f"--resume_from_checkpoint {value}: not a directory")
    missing = missing_parts(value)
    if missing:
        raise ValueError(
            f"--resume_from_checkpoint {value}: not a complete checkpoint (no {', '.join(missing)}); give a "
            "checkpoint-N directory that `oar-rl train` saved, or 'latest'"
        )
    return value


SPEED_ONLY = ("perturbation_batch_size", "perturbation_prefix_reuse")
"""OARConfig fields that change how fast, not what, the scorers compute: free to change on resume."""


def _compared(args: Any) -> dict[str, Any]:
    from dataclasses import fields

    from trl import GRPOConfig

    from oar_rl.config import OARConfig

    names = list(RESULT_FIELDS)
    if isinstance(args, OARConfig):
        inherited = {f.name for f in fields(GRPOConfig)}
        names += [f.name for f in fields(OARConfig) if f.name not in inherited and f.name not in SPEED_ONLY]
    out = {n: getattr(args, n) for n in names if hasattr(args, n)}
    if out.get("credit_module"):  # the same file given by another relative path is the same module
        from oar_rl.credit_modules import _is_path

        out["credit_module"] = [str(Path(m).resolve()) if _is_path(m) else m for m in out["credit_module"]]
    return out


def check_resume(checkpoint: str, args: Any) -> None:
    """ValueError listing the settings that differ between `args` and those saved with `checkpoint`
    (its training_args.bin); silent when the checkpoint has none (not saved by a Trainer)."""
    saved_path = Path(checkpoint) / "training_args.bin"
    if not saved_path.is_file():
        return
    import torch

    try:  # the user's own checkpoint, written by Trainer; another version's classes may not unpickle
        saved = torch.load(saved_path, weights_only=False)
    except Exception as err:
        warnings.warn(
            f"--resume_from_checkpoint {checkpoint}: cannot read its training_args.bin "
            f"({type(err).__name__}: {err}), so the settings it was saved under are not compared with these",
            stacklevel=2,
        )
        return
    old, new = _compared(saved), _compared(args)
    diff = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in new if k in old and old[k] != new[k]]
    if diff:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint} was saved under other settings ({'; '.join(diff)}); a "
            "resumed run keeps the checkpoint's optimizer and scheduler, so it would mix two runs. Resume "
            "with the same settings, or start a fresh run in a new --output_dir"
        )


def check_fresh_output_dir(output_dir: str) -> None:
    """ValueError when a run that does not resume would write into a directory holding another run's
    checkpoints or log (its logs.jsonl would mix, and `latest` would pick the other run's checkpoint)."""
    root = Path(output_dir)
    if not root.is_dir():
        return
    held = [p.name for p in checkpoints(root)[:3]] + (
        ["logs.jsonl"] if (root / "logs.jsonl").exists() else []
    )
    if held:
        raise ValueError(
            f"--output_dir {output_dir} holds another run ({', '.join(held)}): resume it with "
            "--resume_from_checkpoint latest, or choose a new --output_dir (or delete that one)"
        )


MODEL_FILE = "oar_rl_model.json"
"""The run's model identity, in its output directory: what a resume must load again."""


def pin_model(model_args: Any, model_init_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The model a run trains: a Hub id's revision (`model_revision`, or a ``revision`` of the recipe's
    `model_init_kwargs`) resolved to one commit and set back on `model_args`, so that TRL loads the policy,
    the KL reference model and the tokenizer at that commit; a local directory's fingerprint
    (`oar_rl.model_identity`). ValueError when a Hub id cannot be resolved or the revisions conflict."""
    from oar_rl.model_identity import model_fingerprint, resolve_hub_commit

    name, given = model_args.model_name_or_path, (model_init_kwargs or {}).get("revision")
    if given is not None and model_args.model_revision not in (None, "main", given):
        raise ValueError(
            f"--model_revision {model_args.model_revision!r} and model_init_kwargs' revision {given!r} "
            "disagree; give one"
        )
    revision = given if given is not None else model_args.model_revision
    if Path(name).expanduser().exists():
        if revision not in (None, "main"):
            raise ValueError(f"--model_revision {revision!r} is for a Hub id; {name!r} is a local directory")
        return {"model": str(Path(name).expanduser().resolve()), "fingerprint": model_fingerprint(name)}
    model_args.model_revision = resolve_hub_commit(name, revision)
    return {"model": name, "fingerprint": model_fingerprint(name, model_args.model_revision)}


def check_model(checkpoint: str | None, identity: dict[str, Any]) -> None:
    """A resumed run must load the model its checkpoint was trained from (recorded beside the checkpoint,
    in its run's directory): a LoRA adapter or a KL reference model would otherwise sit on another base
    model (a moved Hub branch, a retrained local directory), silently. ValueError naming both; a warning
    for a run that recorded none. The same model at another path is accepted, with a warning."""
    import json

    if checkpoint is None:
        return
    path = Path(checkpoint).resolve().parent / MODEL_FILE
    if not path.is_file():
        warnings.warn(
            f"--resume_from_checkpoint {checkpoint}: its run has no {MODEL_FILE} (started before oar-rl "
            "recorded its model), so the model cannot be checked against the one it was trained from",
            stacklevel=2,
        )
        return
    saved = json.loads(path.read_text())
    if saved.get("fingerprint") != identity["fingerprint"]:
        pin = str(saved.get("fingerprint", ""))
        how = f"--model_revision {pin.removeprefix('hub:')}" if pin.startswith("hub:") else "that model"
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint} was trained from {saved.get('model')} (fingerprint "
            f"{saved.get('fingerprint')}); this run loads {identity['model']} (fingerprint "
            f"{identity['fingerprint']}). Resume with {how}, or start a fresh run"
        )
    if saved.get("model") != identity["model"]:
        warnings.warn(
            f"--resume_from_checkpoint {checkpoint}: the model moved ({saved.get('model')} -> "
            f"{identity['model']}), same fingerprint",
            stacklevel=2,
        )


def record_model(output_dir: str, identity: dict[str, Any], should_save: bool) -> None:
    """Write the run's model identity into `output_dir` (the process that saves: `args.should_save`),
    once the trainer is built, for later resumes to check."""
    import json

    from oar_rl.io import write_text_atomic

    if should_save:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(output_dir) / MODEL_FILE, json.dumps(identity, indent=2) + "\n")
