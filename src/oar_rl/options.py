"""The flags several `oar-rl` commands take, defined once: one name, one meaning, one default.

`shared_parser("model", "task", ...)` is an argparse parent parser (`parents=[...]`) with the named
options under the heading "shared options", each in both spellings (`--cache-dir` and `--cache_dir`).
A command may change an option's default, help or `required` (e.g. its own `--out` directory), never its
meaning. `oar-rl train` (TRL's parser) takes the same names as aliases of TRL's (`oar_rl.train`).

The vocabulary:

- `--model`: a model directory, a Hub id, a known model name (`smollm2-135m`), a `.gguf` file, or a
  warm start by name: `default` and `wordproblems` are the shipped word-problem model in every command;
  `arithmetic` is the arithmetic warm start (built and cached on first use). Commands with `--task` use
  that task's warm start when `--model` is not given.
- `--threads`: torch CPU threads, `THREADS_DEFAULT` (1) everywhere; 0 = torch's own choice.
- `--probe`: OAR's outcome probe, `DEFAULT_PROBE` (as-mean) everywhere it is a choice of the analysis
  (train, attribute, oracle, study); `oar-rl bench` keeps lt-logits and says why.
- `--seed` (0), `--task` (`oar_rl.tasks.DEFAULT_TASK`), `--out`, `--cache-dir`, `--answer-pattern`.

One word for one thing in every command:

- `--credit`: one credit rule (`train`); `--credits`: a comma-separated list of them (`study`, `demo`,
  `bench`, `blame`, `attribute`, `oracle`; the old `--methods` and `--signals` work for one release, with
  a deprecation line);
- `--problems`: how many problems a command draws (`blame`, `bench` per step, `eval` per benchmark,
  `task-figures`; `train`'s TRL name `--limit` is an alias; the old `--prompts` and `eval --limit`
  deprecated); `oracle --max-problems` caps its sampling (was `--max-prompts`);
- `--samples`: completions per problem (`blame`, `bench`, `eval`, `task-figures`; `train`'s
  `--num_generations`; the old `bench --num-generations` and `eval --n` deprecated);
- `--split`: a task's data split, `train`, `validation` or `test` (the held-out split; its generator's
  name `eval` is accepted too).

Renamed flags (an error naming the new name, never a silent other meaning): `bench --steps` ->
`--repeats`; `attribute --n` -> `--traces`; `oracle --n` -> `--trajectories`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from oar_rl.argparsing import add

THREADS_DEFAULT = 1
"""torch CPU threads of every command: the models oar-rl trains on a CPU are tiny, one thread gives the
same numbers on every machine, and on a shared 2-core machine two threads spin against each other."""
DEFAULT_PROBE = "as-mean"
"""The outcome probe of train, attribute, oracle and study: on the embedded tasks every completion ends in
the fixed text '</answer>', which leaves lt-logits almost no signal; rows without an answer span fall
back to lt-logits, said on the console (and logged in training as oar/probe_fallback_frac)."""
TASK_MODELS: dict[str, str] = {
    "default": "wordproblems",
    "wordproblems": "wordproblems",
    "arithmetic": "arithmetic",
}
"""`--model` names of the embedded warm starts -> their task."""

MODEL_HELP = (
    "model: a directory (save_pretrained), a Hub id, a known model name (smollm2-135m: "
    "SmolLM2-135M-Instruct, see `oar-rl fetch-model`), a .gguf file (de-quantised into the cache once), "
    "or a warm start by name: "
    "'default' = 'wordproblems' = the word-problem model shipped with the package (the same in every "
    "command), 'wordproblems-long' = the long-chain regime's shipped warm start, 'arithmetic' = the "
    "arithmetic warm start (built and cached on first use)"
)


def _threads(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of threads (0: torch's choice)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0 (0: torch's own choice)")
    return value


def _option(name: str) -> tuple[str, dict[str, Any]]:
    """(flag, add_argument kwargs) of shared option `name`."""
    if name == "model":
        return "--model", {"default": "default", "help": MODEL_HELP}
    if name == "task":
        from oar_rl.tasks import DEFAULT_TASK, task_names

        return "--task", {
            "default": DEFAULT_TASK,
            "choices": task_names(),
            "help": "task: its problems, checker and warm start (oar_rl.tasks)",
        }
    if name == "seed":
        return "--seed", {"type": int, "default": 0, "help": "random seed (sampling, scoring)"}
    if name == "threads":
        return "--threads", {
            "type": _threads,
            "default": THREADS_DEFAULT,
            "help": "torch CPU threads, the same default in every oar-rl command: the embedded models are "
            "tiny and one thread gives the same numbers on every machine; 0 = torch's own choice (one per "
            "core; faster for a real model on a many-core CPU)",
        }
    if name == "out":
        return "--out", {"default": None, "help": "output directory"}
    if name == "cache-dir":
        return "--cache-dir", {
            "default": None,
            "help": "model cache: fetched and converted models, the arithmetic warm start "
            "(default: $OAR_RL_CACHE/models, else ~/.cache/oar-rl/models)",
        }
    if name == "probe":
        from oar_rl.probes import PROBES

        return "--probe", {
            "default": DEFAULT_PROBE,
            "choices": PROBES,
            "help": "outcome probe of oar-p/oar-g: as-mean (mean logits over the answer span, the span "
            "--answer-pattern finds) in every command, because on the embedded tasks every completion ends "
            "in the fixed text '</answer>', which leaves lt-logits (the next-token distribution after the "
            "completion) almost no signal; a trace without an answer span falls back to lt-logits, and the "
            "command says how many did",
        }
    if name == "answer-pattern":
        return "--answer-pattern", {
            "default": "rewarded",
            "help": "answer span of the as-* probes and grail: 'rewarded' (what the accuracy reward scores: "
            "\\boxed{}, <answer>, 'the final answer is'), 'boxed', or a regex with one group",
        }
    raise ValueError(f"unknown shared option {name!r}; valid: {', '.join(SHARED_OPTIONS)}")


SHARED_OPTIONS: tuple[str, ...] = (
    "model",
    "task",
    "seed",
    "threads",
    "out",
    "cache-dir",
    "probe",
    "answer-pattern",
)


def shared_parser(*names: str, **changes: Mapping[str, Any]) -> argparse.ArgumentParser:
    """A parent parser with the shared options `names`; `changes[name]` updates that option's kwargs
    (its default, help, required), e.g. `out={"default": "oracle_out"}`."""
    parent = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    group = parent.add_argument_group("shared options", "the same name, meaning and default in every command")
    unknown = set(changes) - {n.replace("-", "_") for n in names}
    if unknown:
        raise ValueError(f"changes for options not asked for: {sorted(unknown)}")
    for name in names:
        flag, kwargs = _option(name)
        kwargs.update(changes.get(name.replace("-", "_"), {}))
        add(group, flag, **kwargs)
    return parent


SPLIT_ALIASES: dict[str, str] = {"test": "eval"}
"""`--split` words -> the generator's split name: the held-out split is `test` in the pages and the study,
`eval` in the word-problem and arithmetic generators."""


def data_split(name: str | None) -> str | None:
    """`--split NAME` as the task's generator names it (`test` -> `eval`); None stays None."""
    return SPLIT_ALIASES.get(name, name) if name is not None else None


def apply_threads(threads: int) -> None:
    """`--threads`: set torch's CPU threads (0 leaves torch's own choice)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def model_task(spec: str | None) -> str | None:
    """The task of a warm start named as `--model` ('default', 'wordproblems', 'arithmetic'), else None."""
    return TASK_MODELS.get(spec) if spec is not None else None


def check_model_task(spec: str | None, task: str) -> None:
    """ValueError when `--model` names another task's warm start than `--task`'s (its tokenizer and
    format are another task's: the scores would mean nothing)."""
    owner = model_task(spec)
    if owner is not None and owner != task:
        what = "the shipped word-problem model" if spec == "default" else f"the {owner} warm start"
        raise ValueError(
            f"--model {spec} is {what}, not a model of --task {task}: leave --model out for the task's "
            f"warm start, or pass " + (f"--model {task}" if task in TASK_MODELS else "a model directory")
        )
