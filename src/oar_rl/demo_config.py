"""`oar-rl demo`'s configuration: the methods, `DemoSettings` and its presets, and the command line.

What the demo does with them, and why the settings are what they are, is in :mod:`oar_rl.demo`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

METHODS: dict[str, str] = {
    "grpo": "none",
    "random": "random",
    "entropy": "entropy",
    "oar-g": "oar-g",
    "oar-p": "oar-p",
}
"""Demo method name -> `OARConfig.credit`."""
SUMMARY_FORMAT = 1


@dataclass(frozen=True)
class DemoSettings:
    """One demo configuration; its hash (with the warm-start recipe's) keys resumable results."""

    recipe: str = "default"
    """Warm-start recipe: 'default' or 'test' (the seconds-to-build one used by the tests)."""
    methods: tuple[str, ...] = ("grpo", "oar-g", "oar-p")
    seeds: int = 2
    steps: int = 40
    """Optimizer steps per run."""
    prompts_per_step: int = 16
    num_generations: int = 8
    """G: completions per prompt (the batch is prompts_per_step * G completions)."""
    learning_rate: float = 5e-5
    max_completion_length: int = 72
    temperature: float = 1.0
    probe: str = "as-mean"
    """Outcome probe of OAR-G/OAR-P (see the module docstring for why not LT-Logits here)."""
    tau: float = 0.4
    oar_beta: float = 2.0
    eval_split: str = "eval"
    eval_problems: int = 300
    eval_samples: int = 4
    """Samples per problem for the temperature-1.0 accuracy (its mean over samples)."""
    eval_seed: int = 1234
    task: str = "arithmetic"
    """Embedded task (`oar_rl.tasks`): 'arithmetic' or 'wordproblems' (shipped warm start, token roles)."""

    def __post_init__(self) -> None:
        from oar_rl.tasks import TASKS

        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r}; valid tasks: {', '.join(TASKS)}")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"unknown methods {bad or '(none given)'}; valid methods: {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods {list(self.methods)} contain duplicates")
        if self.recipe not in ("default", "test"):
            raise ValueError(f"recipe={self.recipe!r}; valid recipes: default, test")
        for name in ("seeds", "steps", "prompts_per_step", "eval_problems", "eval_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.num_generations < 2:
            raise ValueError(f"num_generations={self.num_generations} must be >= 2 (GRPO needs a group)")
        valid_splits = ("eval", "hard") if self.task == "arithmetic" else ("eval", "validation")
        if self.eval_split not in valid_splits:
            raise ValueError(f"eval_split={self.eval_split!r}; valid: {', '.join(valid_splits)}")

    def recipe_obj(self):
        from oar_rl.shipped import WORDPROBLEMS_RECIPE
        from oar_rl.tiny import DEFAULT_RECIPE, TEST_RECIPE

        if self.task == "wordproblems":  # one shipped warm start, whatever the preset
            return WORDPROBLEMS_RECIPE
        return DEFAULT_RECIPE if self.recipe == "default" else TEST_RECIPE

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["methods"] = list(self.methods)
        return d

    def config_hash(self) -> str:
        """Hash of everything that determines the results except the list of methods and seeds.

        Methods and seed count are left out so that `--methods grpo` then `--methods grpo,oar-g` (or more
        seeds) reuse finished runs; each run additionally records its own method and seed.
        """
        d = self.to_dict()
        del d["methods"], d["seeds"]
        d["recipe_hash"] = self.recipe_obj().hash()
        d["summary_format"] = SUMMARY_FORMAT
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


PRESETS: dict[str, DemoSettings] = {
    "default": DemoSettings(),
    "quick": DemoSettings(seeds=1, steps=15, prompts_per_step=8, eval_problems=150, eval_samples=2),
    # Hidden, for the tests: a barely trained model, a few seconds per run.
    "tiny": DemoSettings(
        recipe="test",
        seeds=1,
        steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        eval_problems=4,
        eval_samples=1,
    ),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    from oar_rl.argparsing import add, new_parser

    p = new_parser(
        "oar-rl demo",
        "Train GRPO, OAR-G and OAR-P from the same warm-started tiny model on synthetic "
        "arithmetic, evaluate before/after on held-out problems, and write summary.json, plots and "
        "report.html.",
    )
    add(p, "--out", default="demo_out", help="output directory")
    add(p, "--seeds", type=int, default=None, help="number of seeds per method (default: 2; --quick: 1)")
    add(p, "--quick", action="store_true", help="a shorter version: 1 seed, fewer steps and problems")
    add(p, "--tiny", action="store_true", help=argparse.SUPPRESS)  # tests: test recipe, 2 steps
    add(
        p,
        "--methods",
        default=None,
        help=f"comma-separated methods (default: grpo,oar-g,oar-p); valid: {','.join(METHODS)}",
    )
    add(p, "--steps", type=int, default=None, help="optimizer steps per run (overrides the preset)")
    add(
        p,
        "--cache-dir",
        default=None,
        help="warm-start model cache (default: $OAR_RL_CACHE/models or ~/.cache/oar-rl/models)",
    )
    add(
        p,
        "--task",
        choices=("arithmetic", "wordproblems"),
        default="arithmetic",
        help="embedded task (default: arithmetic); wordproblems uses the shipped warm start and logs "
        "ground-truth credit metrics",
    )
    add(p, "--fresh", action="store_true", help="discard results in --out instead of resuming")
    add(p, "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    add(
        p,
        "--report-to",
        default="none",
        help="trackers for the training logs, as TRL's report_to: none, tensorboard, trackio, wandb, ... "
        "(comma-separated; install with pip install 'oar-rl[trackers]'); logs go under --out/runs",
    )
    add(p, "--verbose", action="store_true", help="print TRL's full log dict every step (default: a bar)")
    return p.parse_args(argv)


def settings_from_args(args: argparse.Namespace) -> DemoSettings:
    if args.quick and args.tiny:
        raise ValueError("--quick and --tiny are exclusive")
    s = PRESETS["tiny" if args.tiny else "quick" if args.quick else "default"]
    changes: dict[str, Any] = {}
    if args.seeds is not None:
        changes["seeds"] = args.seeds
    if args.steps is not None:
        changes["steps"] = args.steps
    if getattr(args, "task", "arithmetic") != "arithmetic":
        from oar_rl.tasks import get_task

        changes["task"] = args.task
        if not args.tiny:
            changes["max_completion_length"] = get_task(args.task).max_completion_length
    if args.methods is not None:
        changes["methods"] = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    return replace(s, **changes)
