"""The `oar-rl` command: one sub-command per module, imported only when used.

Each sub-command module exposes `main(argv: list[str]) -> int` and `build_parser()` (its argument
parser, built without side effects), so `oar-rl demo --help` stays fast and a broken optional
dependency of one command cannot break the others. The flags several commands take are defined once,
in `oar_rl.options` (one name, meaning and default each).
"""

from __future__ import annotations

import importlib
import sys

from oar_rl.argparsing import run_command

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("oar_rl.study.demo", "the quick study on the word-problem task: what make demo runs"),
    "train": ("oar_rl.train", "GRPO/OAR training from a YAML recipe (TRL's parser; --key value overrides)"),
    "eval": ("oar_rl.eval.evaluation", "sample n completions per problem and report unbiased pass@k"),
    "attribute": ("oar_rl.analysis.attribute", "token-importance heatmaps (HTML), one row per scorer"),
    "oracle": ("oar_rl.analysis.recall", "counterfactual oracle and causal-token recall@K% of each scorer"),
    "fetch-model": (
        "oar_rl.fetch_cli",
        "SmolLM2-135M-Instruct (or a .gguf file) as a plain model dir, offline",
    ),
    "warm-start": (
        "oar_rl.warm_start",
        "build (or verify) a task's warm start in the cache; print where it is",
    ),
    "blame": (
        "oar_rl.analysis.blame",
        "credit on wrong rollouts: the first error's weight vs the last result's",
    ),
    "task-figures": (
        "oar_rl.analysis.task_figures",
        "what regime a word-problem task's warm start is in: length, accuracy, roles, oracle pivots",
    ),
    "bench": ("oar_rl.bench.cli", "training cost per token of each credit mode, as a ratio to GRPO"),
    "gpu-check": (
        "oar_rl.gpu_check",
        "check oar-rl's CUDA paths: training, scorers, costs, memory (JSON + Markdown)",
    ),
    # --- study (issue 8 item 4) ---
    "study": ("oar_rl.study", "compare credit methods over seeds under one fixed protocol (CIs, ablations)"),
    # --- end study ---
}


def _usage() -> str:
    lines = ["usage: oar-rl [--debug] <command> [options]", "", "commands:"]
    width = max(map(len, COMMANDS))
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += [
        "",
        "Run `oar-rl <command> --help` for a command's options. An error is one line; --debug (before or",
        "after the command, or OAR_RL_DEBUG=1) shows its traceback.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = argv[:1] == ["--debug"]  # `oar-rl --debug <command> ...`
    argv = argv[1:] if debug else argv
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    if argv[0] in {"-V", "--version"}:
        from oar_rl import __version__

        print(f"oar-rl {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(
            f"oar-rl: unknown command {name!r}{hint}; valid commands: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return run_command(name, module.main, ["--debug", *rest] if debug else rest)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
