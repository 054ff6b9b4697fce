"""`oar-rl eval`'s configuration: `EvalConfig` (one field per CLI flag) and the parser built from it.

Also `BenchmarkJob`, one benchmark's data, files and resume state. The sampling lives in
:mod:`oar_rl.eval.sampling`; the files, the run and pass@k in :mod:`oar_rl.eval.evaluation`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Backend = Literal["transformers", "vllm"]
BACKENDS: tuple[str, ...] = ("transformers", "vllm")


def _csv(kind):
    def parse(text: str) -> list:
        items = [t.strip() for t in str(text).split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        try:
            return [kind(t) for t in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"bad list {text!r}: {exc}") from exc

    return parse


@dataclass
class EvalConfig:
    """Everything `oar-rl eval` needs; the CLI flags are these fields (``--max-new-tokens`` etc.)."""

    model: str = field(metadata={"help": "Model (the shared --model of oar_rl.options; resolved by main)."})
    out: str = field(metadata={"help": "Output directory (resumable; see the module docs)."})
    revision: str | None = field(
        default=None,
        metadata={
            "help": "Hub model only: a branch, tag or commit (default: the default branch). Resolved to a "
            "commit before anything loads, pinned for the run and recorded; a resume at another commit "
            "is refused."
        },
    )
    benchmarks: list[str] = field(
        default_factory=lambda: ["aime25", "aime24", "amc23", "math500", "gsm8k"],
        metadata={
            "help": "Comma-separated benchmarks (gsm8k, math500, aime24, aime25, amc23, dapo-math, and the "
            "embedded tasks arithmetic, wordproblems) or local .jsonl/.json/.parquet files; NAME:SPLIT picks "
            "a split (default: the test split; 'eval' for the embedded tasks).",
            "type": _csv(str),
        },
    )
    n: int = field(default=32, metadata={"help": "Samples per problem (n of pass@k).", "flag": "samples"})
    k: list[int] = field(
        default_factory=lambda: [1, 32],
        metadata={"help": "Comma-separated k values (each <= --samples).", "type": _csv(int)},
    )
    temperature: float = field(default=0.6, metadata={"help": "Sampling temperature (0: greedy)."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling top-p in (0, 1]."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling (0: off)."})
    max_new_tokens: int = field(default=1024, metadata={"help": "Longest completion, in tokens."})
    batch_size: int = field(
        default=64, metadata={"help": "Sequences per generate call (problems x samples)."}
    )
    limit: int | None = field(
        default=None, metadata={"help": "Only the first N problems of each benchmark.", "flag": "problems"}
    )
    template: str = field(
        default="answer-tag",
        metadata={"help": "Prompt template.", "choices": ("answer-tag", "boxed", "none")},
    )
    backend: str = field(default="transformers", metadata={"help": "Sampling backend.", "choices": BACKENDS})
    seed: int = field(default=0, metadata={"help": "Base random seed."})
    dtype: str = field(
        default="auto",
        metadata={"help": "Model dtype.", "choices": ("auto", "float32", "bfloat16", "float16")},
    )
    device: str = field(
        default="auto", metadata={"help": "Device for the transformers backend (auto: cuda if any)."}
    )
    verify_timeout: float = field(default=10.0, metadata={"help": "Seconds per completion for math-verify."})
    verify_workers: int = field(default=2, metadata={"help": "math-verify worker processes."})
    chat: bool | None = field(
        default=None,
        metadata={
            "help": "--chat: wrap each prompt as a user message with the tokenizer's chat template; "
            "--no-chat: raw prompts. Default: the template when the tokenizer has one (instruct models), "
            "as TRL does for conversational data"
        },
    )
    truncate_prompts: bool = field(
        default=False,
        metadata={
            "help": "Left-truncate prompts that do not fit the model's positions together with "
            "--max-new-tokens (default: refuse before sampling, naming them)."
        },
    )

    def validate(self) -> None:
        """Raise ValueError on any bad value (everything that can be checked without loading anything)."""
        if self.n < 1:
            raise ValueError(f"--samples must be >= 1, got {self.n}")
        if not self.k:
            raise ValueError("--k must list at least one k")
        bad = [k for k in self.k if k < 1 or k > self.n]
        if bad:
            raise ValueError(f"every k must be in [1, --samples {self.n}], got {bad}")
        if len(set(self.k)) != len(self.k):
            raise ValueError(f"--k repeats a value: {list(self.k)}; give each k once")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"--temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"--top-k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--problems must be >= 1, got {self.limit}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; valid backends: {', '.join(BACKENDS)}")
        if not self.benchmarks:
            raise ValueError("--benchmarks is empty")
        if not (math.isfinite(self.verify_timeout) and self.verify_timeout > 0):
            raise ValueError(
                f"--verify-timeout must be a finite number of seconds > 0, got {self.verify_timeout}"
            )
        if self.verify_workers < 1:
            raise ValueError(f"--verify-workers must be >= 1, got {self.verify_workers}")


def build_parser() -> argparse.ArgumentParser:
    """The `oar-rl eval` parser, generated from `EvalConfig`'s fields; the shared options (`--model`,
    `--out`, `--seed`, `--threads`, `--cache-dir`) come from `oar_rl.options`."""
    from oar_rl.argparsing import add_deprecated, flag_names, new_parser
    from oar_rl.options import shared_parser

    shared = shared_parser(
        "model", "out", "seed", "threads", "cache-dir",
        model={"default": None, "required": True},
        out={"required": True, "help": "output directory (resumable; see the module docs)"},
        seed={"help": "base random seed"},
    )  # fmt: skip
    parser = new_parser(
        "oar-rl eval",
        "Sample n completions per problem and report unbiased pass@k (results.json, results.md).",
        parents=[shared],
    )
    taken = {a.dest for a in shared._actions}
    for f in dataclasses.fields(EvalConfig):
        if f.name in taken:
            continue
        flags = flag_names(f.metadata.get("flag", f.name))  # --max-new-tokens and --max_new_tokens, as TRL
        kwargs: dict[str, Any] = {"help": f.metadata.get("help", ""), "dest": f.name}
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            kwargs["default"] = default
            kwargs["help"] += (
                f" (default: {','.join(map(str, default)) if isinstance(default, list) else default})"
            )
        if f.name == "chat":  # three states: --chat, --no-chat, or decided by the tokenizer
            group = parser.add_mutually_exclusive_group()
            group.add_argument(
                *flags, dest="chat", action="store_const", const=True, default=None, help=kwargs["help"]
            )
            group.add_argument(*flag_names("no-chat"), dest="chat", action="store_const", const=False)
            continue
        if "type" in f.metadata:
            kwargs["type"] = f.metadata["type"]
        elif f.type in ("int", "int | None"):
            kwargs["type"] = int
        elif f.type == "bool":
            kwargs["action"] = "store_true"
        elif f.type == "float":
            kwargs["type"] = float
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        action = parser.add_argument(*flags, **kwargs)
        if "flag" in f.metadata:  # the one word of every command; the old name kept for one release
            add_deprecated(parser, {"n": "--n", "limit": "--limit"}[f.name], action)
    return parser


@dataclass
class BenchmarkJob:
    """One benchmark of a run: its data, files and resume state."""

    key: str
    name: str
    split: str | None
    prompts: list[str]
    answers: list[str]
    records: dict[int, dict[str, Any]]
    jsonl: Path
    meta: Path
    meta_data: dict[str, Any]
