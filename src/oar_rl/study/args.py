"""`oar-rl study`'s command line: the parser, and the settings it gives (`settings_from_args`).

Help states the real defaults: they are read from the presets (`oar_rl.study.config.PRESETS`), never
written twice. A plan estimated over 30 CPU-minutes starts only when asked: the full protocol with
`--full`, any other large plan with `--yes` (`oar_rl.study.plan.refusal`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from oar_rl.credit_names import spelled, study_name
from oar_rl.study.config import ABLATIONS, PRESETS, SCORED_TOKENS, StudySettings, all_methods

FULL, QUICK, PRETRAINED = PRESETS["full"], PRESETS["quick"], PRESETS["pretrained"]


def _grid(s: StudySettings) -> str:
    return ",".join(f"{v:g}" for v in s.lr_grid)


def _seeds(s: StudySettings) -> str:
    return f"{s.seeds}" + "".join(f", {m} {n}" for m, n in s.method_seeds)


def build_parser() -> argparse.ArgumentParser:
    """The `oar-rl study` parser."""
    from oar_rl.argparsing import add, add_renaming, new_parser
    from oar_rl.credit_modules import add_flag
    from oar_rl.options import shared_parser
    from oar_rl.study.plan import duration, estimate_seconds

    full = estimate_seconds(FULL, tune_lr=True)

    shared = shared_parser(
        "task", "out", "threads", "cache-dir", "probe",
        task={"default": None, "help": "task (default: wordproblems, the testbed)"},
        out={"default": "study_out", "help": "output directory (resumable: rerun the same command)"},
        cache_dir={"help": "model cache of the arithmetic warm start (default: $OAR_RL_CACHE/models, else "
                   "~/.cache/oar-rl/models)"},
        probe={"default": None, "help": "outcome probe of oar-g/oar-p (protocol; default: the task's, "
               "as-mean for both built-in tasks, the default of every oar-rl command)"},
    )  # fmt: skip
    p = new_parser(
        "oar-rl study",
        "Compare credit-assignment methods under one fixed protocol (same warm start, prompts, budget and "
        "hyperparameters; with --tune-lr every method's learning rate is swept on a validation split "
        "first, then frozen), over several seeds, with confidence intervals, accuracy-vs-step curves, "
        "credit metrics, recall@K% and optional tau/probe ablations. Resumable: rerun the same command to "
        "continue. A plan estimated under 30 CPU-minutes starts at once; a larger one prints its plan and "
        "estimate and starts only when asked: the full protocol (hours of CPU) with --full, any other with "
        "--yes (--dry-run: the plan only).",
        parents=[shared],
    )
    scope = p.add_mutually_exclusive_group()
    add(
        scope,
        "--quick",
        action="store_true",
        help=f"the small version `make demo` runs: {','.join(QUICK.methods)} x {QUICK.seeds} seeds, "
        f"{QUICK.steps} steps of {QUICK.prompts_per_step}x{QUICK.num_generations} completions, "
        f"{QUICK.test_problems} test problems, the task's default learning rate (no sweep); starts at once",
    )
    add(
        scope,
        "--pretrained",
        action="store_true",
        help=f"the pretrained regime's protocol (task {PRETRAINED.task}): {','.join(PRETRAINED.methods)} x "
        f"{PRETRAINED.seeds} seeds, {PRETRAINED.steps} steps of {PRETRAINED.prompts_per_step}x"
        f"{PRETRAINED.num_generations} completions, {PRETRAINED.test_problems}x{PRETRAINED.eval_samples} "
        f"test samples; with --tune-lr the grid {_grid(PRETRAINED)} x {PRETRAINED.tune_seeds} seeds, "
        f"greedy kept within {PRETRAINED.greedy_tolerance:g} points; hours: starts with --yes",
    )
    add(
        scope,
        "--full",
        action="store_true",
        help="start the full protocol (every method x "
        f"{_seeds(FULL)} seeds, {FULL.steps} steps of {FULL.prompts_per_step}x{FULL.num_generations}; "
        f"about {duration(full['total'] - full['sweep'])} of one CPU core, plus "
        f"{duration(full['sweep'])} with --tune-lr): without it the plan is printed and nothing runs",
    )
    add(
        p,
        "--yes",
        action="store_true",
        help="start a plan estimated over 30 CPU-minutes (printed first) that is not the full protocol: "
        "without it such a plan is printed and nothing runs; a smaller plan starts at once",
    )
    add(
        p, "--dry-run", action="store_true", help="print the plan (runs, methods, seeds, estimated time) only"
    )
    add(p, "--tiny", action="store_true", help=argparse.SUPPRESS)  # tests
    add_renaming(p, "--credits", "--methods", dest="methods",
                 help=f"credit rules, comma-separated (default: all; --quick {','.join(QUICK.methods)}); "
                 f"valid: {','.join(spelled(all_methods()))}, and the rules of --credit-module")  # fmt: skip
    add(
        p,
        "--seeds",
        help=f"seeds per method (default {_seeds(FULL)}; --quick {_seeds(QUICK)}), optionally with "
        "per-method counts: '10,grail=5,oar-gp=5'",
    )
    add(
        p,
        "--ablations",
        help=f"comma-separated run groups to add (default: none); valid: {','.join(ABLATIONS)}",
    )
    add(
        p,
        "--steps",
        type=int,
        help=f"optimizer steps per run (protocol; default {FULL.steps}, --quick {QUICK.steps})",
    )
    add(
        p,
        "--tune-lr",
        action="store_true",
        help="sweep the learning rate of every method on the validation split first (each method then trains "
        "at its own choice; the grpo_lr group repeats every method at GRPO's)",
    )
    add(p, "--lr-grid", help=f"comma-separated learning rates of the sweep (default {_grid(FULL)}; --quick "
        f"{_grid(QUICK)})")  # fmt: skip
    add(
        p,
        "--tune-seeds",
        type=int,
        help=f"seeds per grid point of the sweep (protocol; default {FULL.tune_seeds}, --quick "
        f"{QUICK.tune_seeds})",
    )
    add(
        p,
        "--greedy-tolerance",
        type=float,
        metavar="POINTS",
        help="with --tune-lr, measure greedy validation accuracy too and choose only among the rates whose "
        "mean greedy accuracy is at most POINTS below the warm start's (sweep protocol; default: greedy "
        "not part of the choice)",
    )
    add(p, "--lr", type=float, help="use this learning rate without a sweep (recorded as untuned)")
    add(
        p,
        "--recall",
        type=int,
        help="correct warm-start trajectories for recall@K%% (0: skip; default "
        f"{FULL.recall_trajectories}, --quick {QUICK.recall_trajectories})",
    )
    add(
        p,
        "--scored-tokens",
        choices=SCORED_TOKENS,
        help="tokens OAR scores and reshapes (protocol; default reasoning, OARConfig's); before-answer is "
        "the scored set of studies made before the reasoning-only default, e.g. "
        "results/study-wordproblems-v2",
    )
    add(
        p,
        "--cpu-numerics",
        choices=("portable-x86", "avx2"),
        help="pin the CPU kernels (protocol; oar_rl.numerics): portable-x86 = MKL_CBWR=COMPATIBLE "
        "ATEN_CPU_CAPABILITY=avx2, avx2 = MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2; the command re-runs "
        "itself with them (default: none, the kernels the CPU picks; results/fingerprints)",
    )
    add(p, "--checkpoint-every", type=int, metavar="N",
        help="save each run's full checkpoint every N steps beside --out, so that the same command resumes "
        "a run a stopped process left unfinished (not protocol; --pretrained: 5; 0: none)")  # fmt: skip
    add(p, "--fresh", action="store_true", help="discard the results in --out first")
    add_flag(p)
    return p


def preset_name(a: argparse.Namespace) -> str:
    return "tiny" if a.tiny else "quick" if a.quick else "pretrained" if a.pretrained else "full"


def _csv(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _parse_seeds(value: str) -> tuple[int, tuple[tuple[str, int], ...]]:
    """'10' or '10,grail=5,oar-gp=5' -> (10, (("grail", 5), ("oar-gp", 5)))."""
    default, per = None, []
    for part in _csv(value) or ():
        name, eq, count = part.partition("=")
        try:
            n = int(count if eq else name)
        except ValueError:
            raise ValueError(f"--seeds {value!r}: {part!r} is not N or METHOD=N") from None
        if eq:
            per.append((study_name(name.strip()), n))
        elif default is None:
            default = n
        else:
            raise ValueError(f"--seeds {value!r} gives the default count twice")
    if default is None:
        raise ValueError(f"--seeds {value!r} needs a default count first, e.g. '10,grail=5'")
    return default, tuple(per)


def settings_from_args(a: argparse.Namespace) -> StudySettings:
    if a.tiny and (a.quick or a.full or a.pretrained):
        raise ValueError("--tiny goes alone (not with --quick, --pretrained or --full)")
    if a.tune_lr and a.lr is not None:
        raise ValueError("--tune-lr and --lr are exclusive: the learning rate is either swept or given")
    s = PRESETS[preset_name(a)]
    changes: dict[str, Any] = {"ablations": _csv(a.ablations) or ()}
    if getattr(a, "credit_module", None):  # before the methods are checked: their rules are methods
        from oar_rl.credit_modules import load_credit_modules

        loaded = load_credit_modules(a.credit_module)
        changes["credit_modules"] = tuple((m.spec, m.sha256, tuple(m.rules)) for m in loaded)
    if a.task is not None:
        changes["task"] = a.task
    if a.probe is not None:
        changes["probe"] = a.probe
    if a.scored_tokens is not None:
        changes["scored_tokens"] = a.scored_tokens
    if getattr(a, "cpu_numerics", None) is not None:
        changes["cpu_numerics"] = a.cpu_numerics
    if a.methods is not None:
        changes["methods"] = tuple(study_name(m) for m in _csv(a.methods))  # "none" is "grpo"
        if not changes["methods"]:
            raise ValueError(f"--credits {a.methods!r} names no rule; valid: {','.join(all_methods())}")
    if a.seeds is not None:
        changes["seeds"], changes["method_seeds"] = _parse_seeds(a.seeds)
    for flag, field in (("steps", "steps"), ("recall", "recall_trajectories"), ("tune_seeds", "tune_seeds"),
                        ("greedy_tolerance", "greedy_tolerance")):  # fmt: skip
        if getattr(a, flag) is not None:
            changes[field] = getattr(a, flag)
    if a.lr_grid is not None:
        try:
            changes["lr_grid"] = tuple(float(x) for x in _csv(a.lr_grid) or ())
        except ValueError as e:
            raise ValueError(f"--lr-grid {a.lr_grid!r} is not a comma-separated list of numbers") from e
    if a.lr is not None and not a.lr > 0:
        raise ValueError(f"--lr {a.lr} must be > 0")
    if getattr(a, "checkpoint_every", None) is not None:
        if a.checkpoint_every < 0:
            raise ValueError(
                f"--checkpoint-every {a.checkpoint_every} must be a number of steps >= 1, or 0 for none"
            )
        changes["checkpoint_every"] = a.checkpoint_every or None
    return replace(s, **changes)
