"""Warm starts shipped with the package: the word-problem task's weights, verified on load.

A recipe built on two machines of the same kind gave different warm starts (floating point; issue 8), so
the word-problem warm start is built once and its weights ship in the package
(`oar_rl/models/wordproblems/`, 0.8 MB). `load_task_model("wordproblems")` loads those files after
checking them against `WORDPROBLEMS_RECIPE` and the sha256 manifest written at build time; it never
rebuilds silently. `python -m oar_rl.shipped build --task wordproblems` rebuilds them from the recipe
(`oar_rl.tiny.build_model`; commit the result).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from oar_rl.cache_check import MANIFEST_FILE
from oar_rl.data.wordproblems import LONG_CONFIG, WordProblemConfig, build_tokenizer
from oar_rl.tiny import (
    _RECIPE_FILE,
    DEFAULT_RECIPE,
    ModelSpec,
    Recipe,
    SFTSpec,
    _umask,
    build_model,
    load_default_model,
    load_model_dir,
)

# ----------------------------------------------------------------------------------------------------
# The shipped build ran with one torch thread on the 2-core CPU machine.
#
# WORDPROBLEMS_RECIPE (recipe 24cc7917ecfa2133, issue 16): 187k parameters, 3000 SFT steps of 32
# demonstrations from a fallible teacher (each computed result off by 1-2 with probability 0.2, carried to
# the answer: `wordproblems.teacher_slips`), 20,000 problems; 24.6 min on the 2-core CPU shared with 2-3
# other jobs. Validation accuracy (100 problems, sampled at T=1 / greedy) along the build: 4%/2% at step
# 250, 4%/12% at 500, 17%/48% at 1000, 46%/91% at 1500, 55%/98% at 2000, 57%/99% at 3000: the model
# learns the arithmetic (greedy ~99%) and samples the teacher's slips (a converged policy, not one caught
# half-way through learning, as the first recipe was).
#
# The first shipped recipe (d30225c1cf6e2256: 1000 steps, clean demonstrations, 8,000 problems; the
# first study) stopped while the model was still learning arithmetic (validation 38%/52% at step
# 800, 50%/85% at 1000); 74% of its sampled errors were miscomputed results, and GRPO gained only 6-8
# points on it whatever the step size or budget (docs: History, "Why RL barely moved ...").
# ----------------------------------------------------------------------------------------------------

WORDPROBLEMS_RECIPE = Recipe(
    task=WordProblemConfig(),
    model=ModelSpec(
        hidden_size=64,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=192,
        max_position_embeddings=320,
    ),
    sft=SFTSpec(
        steps=3000, batch_size=32, learning_rate=3e-3, warmup_steps=30, num_problems=20_000, slip_prob=0.2
    ),
)
FIRST_WORDPROBLEMS_RECIPE = Recipe(
    task=WordProblemConfig(),
    model=WORDPROBLEMS_RECIPE.model,
    sft=SFTSpec(steps=1000, batch_size=32, learning_rate=3e-3, warmup_steps=30, num_problems=8_000),
)
"""The first shipped warm start (recipe d30225c1cf6e2256, docs: History), kept for the record:
its files are in the git history (commit 9902b88, `src/oar_rl/models/wordproblems/`)."""
LONG_WORDPROBLEMS_RECIPE = Recipe(
    task=LONG_CONFIG,
    model=ModelSpec(
        hidden_size=64,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=192,
        max_position_embeddings=512,
    ),
    sft=SFTSpec(
        steps=2000,
        batch_size=32,
        learning_rate=3e-3,
        warmup_steps=30,
        num_problems=20_000,
        slip_prob=0.08,
        misread_prob=0.6,
    ),
)
"""The long regime's warm start (issue 33): a fallible teacher that slips (0.08 per result) and misreads
trap events (0.6), so the greedy policy fails on most trap problems -- failures that are reasoning
errors, not only sampling slips."""
TASK_RECIPES: dict[str, Recipe] = {
    "arithmetic": DEFAULT_RECIPE,
    "wordproblems": WORDPROBLEMS_RECIPE,
    "wordproblems-long": LONG_WORDPROBLEMS_RECIPE,
}
SHIPPED_DIR = Path(__file__).parent / "models"
_MANIFEST = MANIFEST_FILE


def shipped_path(task: str) -> Path:
    return SHIPPED_DIR / task


def shipped_recipe_hash(task: str) -> str | None:
    """The recipe hash in the manifest of the warm start the package ships for `task` (a full model or a
    LoRA adapter); None when it ships none. A look, not a check: `verify_shipped` checks the files."""
    manifest = shipped_path(task) / _MANIFEST
    if not manifest.is_file():
        return None
    return json.loads(manifest.read_text()).get("recipe_hash")


def _file_digests(path: Path) -> dict[str, str]:
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.iterdir())
        if f.is_file() and f.name != _MANIFEST
    }


def verify_shipped(task: str = "wordproblems") -> Path:
    """The shipped directory of `task`, after checking its recipe and every file's sha256; else raise."""
    if task not in TASK_RECIPES:
        raise ValueError(f"unknown task {task!r}; valid: {', '.join(TASK_RECIPES)}")
    path = shipped_path(task)
    rebuild = f"rebuild with `python -m oar_rl.shipped build --task {task}`"
    try:
        manifest = json.loads((path / _MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"no valid shipped warm start for {task!r} at {path} ({e}); {rebuild}") from e
    recipe = TASK_RECIPES[task]
    if manifest.get("recipe_hash") != recipe.hash() or manifest.get("recipe") != recipe.to_dict():
        raise ValueError(
            f"the shipped warm start at {path} was built from recipe {manifest.get('recipe_hash')}, but the "
            f"code's recipe for {task!r} is {recipe.hash()}; {rebuild}"
        )
    digests = _file_digests(path)
    if digests != manifest.get("files"):
        raise ValueError(f"the files at {path} do not match their manifest (corrupt or edited); {rebuild}")
    return path


def load_task_model(task: str = "wordproblems") -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast, Path]:
    """The shipped warm start of `task` (model in eval mode, tokenizer, directory), verified first.

    'arithmetic' has no shipped weights: it goes through the cache (`load_default_model`).
    """
    if task == "arithmetic":
        return load_default_model(DEFAULT_RECIPE)
    path = verify_shipped(task)
    model, tok = load_model_dir(path)
    return model, tok, path


def write_shipped(
    task: str, out: Path | None = None, *, progress: bool = True, callback=None, built: Path | None = None
) -> Path:
    """Build `task`'s recipe from scratch and write it (weights, tokenizer, recipe, manifest) atomically.

    `built`: a directory where `build_model(recipe)` already saved its result (with the recipe file beside
    it, as `python -m oar_rl.shipped build --out DIR` writes it); its recipe must be `task`'s, and the
    weights are shipped as they are instead of training again."""
    if task not in TASK_RECIPES:
        raise ValueError(f"unknown task {task!r}; valid: {', '.join(TASK_RECIPES)}")
    recipe = TASK_RECIPES[task]
    out = Path(out) if out is not None else shipped_path(task)
    out.parent.mkdir(parents=True, exist_ok=True)
    if built is None:
        model, tok = build_model(recipe, progress=progress, callback=callback)
    else:
        found = json.loads((Path(built) / _RECIPE_FILE).read_text())
        if found != recipe.to_dict():
            raise ValueError(f"{built} was built from another recipe than {task!r}'s ({recipe.hash()})")
        model, _ = load_model_dir(Path(built))
        tok = build_tokenizer(recipe.task)  # a pure function of the source: saved fresh, as a build saves it
    tmp = Path(tempfile.mkdtemp(prefix=f".{task}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / _RECIPE_FILE).write_text(json.dumps(recipe.to_dict(), indent=2, sort_keys=True))
        manifest = {"task": task, "recipe_hash": recipe.hash(), "recipe": recipe.to_dict()}
        for f in tmp.iterdir():
            f.chmod(0o644)  # package data: readable by everyone (save_pretrained may write 0o600)
        manifest["files"] = _file_digests(tmp)
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        tmp.chmod(0o777 & ~_umask())
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m oar_rl.shipped build --task wordproblems [--out DIR]`: (re)build a shipped warm start."""
    import argparse

    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m oar_rl.shipped", description=main.__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", allow_abbrev=False, help="build a task's warm start from its recipe")
    b.add_argument("--task", choices=[t for t in TASK_RECIPES if t != "arithmetic"], default="wordproblems")
    b.add_argument("--out", default=None, help="output directory (default: the package's models/<task>)")
    b.add_argument(
        "--from",
        dest="built",
        default=None,
        help="ship the weights a previous `build --out DIR` wrote there instead of training again",
    )
    args = p.parse_args(argv)
    path = write_shipped(
        args.task, Path(args.out) if args.out else None, built=Path(args.built) if args.built else None
    )
    print(f"wrote {path} (recipe {TASK_RECIPES[args.task].hash()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
