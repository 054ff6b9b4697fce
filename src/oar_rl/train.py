"""`oar-rl train`: GRPO / OAR training from a YAML recipe, on TRL's parser and trainer.

    oar-rl train --config configs/qwen2.5-7b-dapo-oar-g.yaml [--key value ...]
    accelerate launch --config_file configs/accelerate/zero2.yaml -m oar_rl.train --config ...

Three dataclasses make the command line, exactly as in TRL's own `trl grpo` script: `DataArguments`
(below), `OARConfig` (TRL's `GRPOConfig` + the credit-assignment fields) and TRL's `ModelConfig` (model
path, dtype, attention, PEFT/LoRA, quantisation). YAML keys are the flag names; flags given on the
command line override the file. The model and tokenizer are loaded with `from_pretrained` (a Hub id or
a local directory), the dataset with `oar_rl.data.load` (rows with a `prompt` and an `answer`), and
the run ends with `save_model(output_dir)`.

Conversational data: a local file whose `prompt` is a list of messages (`[{"role": "user", "content":
...}]`) keeps its messages, so TRL applies the tokenizer's chat template as it does for any
conversational dataset; the prompt template (`--template`, default answer-tag) is applied to the
content of the last user message. (oar_rl.data.load flattens such prompts to the last user message for
`eval`; training an instruct model on the flattened text would drop its chat template silently.)

Console: one progress bar with the reward and loss, and one summary line at the end, as `oar-rl study`
shows (`oar_rl.console.attach`); `--verbose` prints TRL's log dicts instead. Every log dict still goes to
`report_to` and to `output_dir/logs.jsonl`.

Departures from TRL's script: reward functions are named `accuracy` / `format` (oar-rl's math-verify reward
with a hang-proof worker pool, and the `<answer>` format check) or given as a dotted import path; their
weights are TRL's `reward_weights`. `--credit-module` takes one or more modules, its repeats accumulate and
add to the recipe's `credit_module` (every module named is loaded before the parser, whose `--credit` choices
list their rules; the run records them all). `--resume_from_checkpoint true` (or `latest`) resumes from the
newest `checkpoint-*` in `output_dir`; a path resumes from that checkpoint. A completion whose reward raises
is logged and scored None (`--safe_rewards`, on by default; see `oar_rl.rewards.safe_reward`); a reward that
fails on every completion of 3 consecutive batches stops the run with its error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oar_rl.checkpoints import (
    check_fresh_output_dir,
    check_model,
    check_resume,
    pin_model,
    record_model,
    resolve_checkpoint,
)
from oar_rl.fetch import resolve_model
from oar_rl.train_data import (  # noqa: F401 (public here too, as before)
    check_enough_prompts,
    conversational_prompts,
    load_train_dataset,
    template_for_model,
)

REWARD_NAMES: tuple[str, ...] = ("accuracy", "format")
MODEL_REQUIRED = (
    "a directory, a Hub id, smollm2-135m, a .gguf file, default (the word-problem model) or arithmetic"
)


@dataclass
class DataArguments:
    """What to train on and how it is scored."""

    dataset: str | None = field(
        default=None,
        metadata={
            "help": "Training data: a name known to oar_rl.data ('dapo-math', 'dapo-math-raw', 'gsm8k', "
            "'arithmetic', ...) or a local .json/.jsonl/.parquet file; see `oar_rl.data.load`. The "
            "loader gives `prompt` and `answer` columns."
        },
    )
    dataset_split: str | None = field(
        default="train",
        metadata={
            "help": "Split to train on (default 'train'; None: the loader's default split, which is the test "
            "split for evaluation benchmarks)."
        },
    )
    template: str | None = field(
        default=None,
        metadata={"help": "Prompt template passed to `oar_rl.data.load` (None: the loader's default)."},
    )
    limit: int | None = field(
        default=None, metadata={"help": "Use only the first `limit` rows (after loading); None: all."}
    )
    data_files: str | None = field(
        default=None, metadata={"help": "Data files for a local/generic dataset, passed to the loader."}
    )
    question_column: str | None = field(
        default=None, metadata={"help": "Question column of a local file (None: detected by the loader)."}
    )
    answer_column: str | None = field(
        default=None, metadata={"help": "Answer column of a local file (None: detected by the loader)."}
    )
    threads: int = field(
        default=1,
        metadata={
            "help": "torch CPU threads, the same default in every oar-rl command (oar_rl.options."
            "THREADS_DEFAULT); 0 = torch's own choice (one per core)."
        },
    )
    cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Model cache for --model names and .gguf files (default: $OAR_RL_CACHE/models, else "
            "~/.cache/oar-rl/models)."
        },
    )
    verbose: bool = field(
        default=False,
        metadata={"help": "Print TRL's log dict every logging step instead of one progress bar."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: list(REWARD_NAMES),
        metadata={
            "help": "Reward functions: 'accuracy' (math-verify against the `answer` column, bounded in "
            "time), 'format' (`<answer>...</answer>` format), or a dotted import path "
            "'package.module.function'. Weights: --reward_weights (one per function; default all 1)."
        },
    )


def build_parser():
    """TRL's parser over (DataArguments, OARConfig, ModelConfig).

    As TRL's: every flag in both spellings (`--max_steps`, `--max-steps`), defaults in `--help`. Added:
    the names the other oar-rl commands use, `--model` (TRL's `--model_name_or_path`) and `--out`
    (`--output_dir`), and TRL's dataset flag names (`--dataset_name`, `--dataset_train_split`) as
    aliases, in YAML too; `--help` lists oar-rl's options (the model first) under their own headings
    before TRL's.
    """
    import dataclasses

    from trl import GRPOConfig, ModelConfig, TrlParser

    from oar_rl.argparsing import DATASET_ALIASES, dealias_config, group_options
    from oar_rl.argparsing import Parser as OneLine
    from oar_rl.config import OARConfig
    from oar_rl.options import MODEL_HELP

    aliases = {**DATASET_ALIASES, "model_name_or_path": ("model",), "output_dir": ("out",)}
    aliases["dataset_split"] = (*aliases["dataset_split"], "split")  # the one word of every command
    aliases |= {"limit": ("problems",), "num_generations": ("samples",)}

    class Parser(TrlParser):
        def set_defaults_with_config(self, **kwargs):
            return super().set_defaults_with_config(**dealias_config(kwargs, aliases))

        error = OneLine.error  # one line, no usage block

    parser = Parser(
        (DataArguments, OARConfig, ModelConfig),
        allow_abbrev=False,  # `--learning-rat` is an unknown flag, not --learning-rate
        prog="oar-rl train",
        usage="oar-rl train [--config RECIPE.yaml] [--key value ...]   (YAML keys are the flag names)",
    )
    for action in parser._actions:
        for alias in aliases.get(action.dest, ()):
            for flag in dict.fromkeys((f"--{alias}", f"--{alias.replace('_', '-')}")):
                parser._option_string_actions[flag] = action
                action.option_strings.append(flag)
        if action.dest == "model_name_or_path":
            action.help = MODEL_HELP + " (--model in every oar-rl command; TRL's name also works)"
        elif action.dest == "credit":  # the live registry: rules of --credit-module loaded before the parser
            action.__class__, action.metavar = _Credit, "RULE"
        elif action.option_strings[0].startswith("--no_") and isinstance(action, argparse._StoreFalseAction):
            name = action.option_strings[0][len("--no_") :]  # TRL's negation of a bool field on by default
            action.help = f"turn --{name} off (sets {name} to False; it is on by default)"
            action.default = argparse.SUPPRESS  # the field's own flag sets the default; no "(default: ...)"
        elif action.dest == "credit_module":  # repeats accumulate, onto the recipe's list
            action.__class__ = _CreditModules
        elif action.dest == "seed":
            action.help = (
                f"{action.help} TRL's default 42, kept here; the other oar-rl commands' --seed is 0."
            )
    data = ["model_name_or_path", "output_dir", *(f.name for f in dataclasses.fields(DataArguments))]
    grpo = {f.name for f in dataclasses.fields(GRPOConfig)}
    oar = [f.name for f in dataclasses.fields(OARConfig) if f.name not in grpo]
    rest = [a.dest for a in parser._actions if a.dest not in {"help", *data, *oar}]
    group_options(
        parser,
        [
            ("OAR options: model, data and rewards", None, data),
            ("OAR options: credit assignment", "OARConfig's fields (see oar_rl.trainer)", oar),
            ("TRL options", "TRL's GRPOConfig (with transformers' TrainingArguments) and ModelConfig", rest),
        ],
    )
    first = ("model_name_or_path", "output_dir")  # the model on top, as in every oar-rl command's help
    group = next(g for g in parser._action_groups if g.title == "OAR options: model, data and rewards")
    group._group_actions.sort(key=lambda a: first.index(a.dest) if a.dest in first else len(first))
    return parser


class _Credit(argparse._StoreAction):
    """`--credit RULE`: a registered rule (read live: --credit-module's rules are loaded before the parser)
    or an alias (`grpo`, `oar_rl.credit_names`); an unknown name is an error naming the nearest ones."""

    def __call__(self, parser, namespace, values, option_string=None):
        from oar_rl import credits
        from oar_rl.credit_names import registered, unknown_message

        if registered(values) not in credits.CREDIT_MODES:
            parser.error(unknown_message(option_string or "--credit", values, credits.CREDITS))
        setattr(namespace, self.dest, values)


class _CreditModules(argparse._StoreAction):
    """`--credit-module A [B ...]` (nargs='+', as TRL builds a list field) whose values accumulate: over
    repeats of the flag and onto the recipe's `credit_module` (a plain store kept the last flag's values
    only, while every module named was loaded before the parser, so the run recorded fewer than it ran
    with); a module named twice is kept once."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        current = [current] if isinstance(current, str) else list(current or ())
        setattr(namespace, self.dest, list(dict.fromkeys([*current, *values])))


def resolve_reward(name: str) -> Callable[..., list[float | None]]:
    """'accuracy' | 'format' | 'package.module.function' -> the reward function."""
    from oar_rl import rewards

    if name == "accuracy":
        return rewards.accuracy_reward
    elif name == "format":
        return rewards.format_reward
    elif "." in name or ":" in name:
        module_name, _, attr = name.replace(":", ".").rpartition(".")
        from oar_rl.credit_modules import cwd_importable

        cwd_importable()  # allow recipes to name a reward module next to them (as credit modules)
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"reward function {name!r} could not be imported: {err}") from err
        if not callable(fn):
            raise ValueError(f"reward function {name!r} is not callable (got {type(fn).__name__})")
        return fn
    raise ValueError(
        f"unknown reward function {name!r}; valid: {', '.join(REWARD_NAMES)}, or a dotted import path "
        "'package.module.function'"
    )


def model_init_kwargs(model_args, training_args) -> dict[str, Any]:
    """`from_pretrained` keyword arguments, built as TRL's `trl grpo` script builds them.

    The trainer loads the model from `model_name_or_path` (Hub id or local directory) with these, and the
    tokenizer with `AutoProcessor.from_pretrained` (left padding; pad token defaults to EOS).
    """
    if not model_args.model_name_or_path:
        raise ValueError("--model is required (TRL's --model_name_or_path): " + MODEL_REQUIRED)
    kwargs: dict[str, Any] = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    kwargs.update(training_args.model_init_kwargs or {})
    kwargs["revision"] = (
        model_args.model_revision
    )  # pinned (`checkpoints.pin_model`): a recipe cannot undo it
    return kwargs


def run_settings(given: str, model_args, data_args: DataArguments, args) -> dict[str, Any]:
    """The resolved settings `oar-rl train` prints at its start."""
    path = model_args.model_name_or_path
    probe = args.probe
    from oar_rl.credits import CREDIT_MODES

    mode = CREDIT_MODES.get(args.credit)
    if mode is not None and mode.probe and probe != "lt-logits":  # a rule that reads the probe
        probe += f" (answer span: {args.answer_pattern or 'rewarded'}; rows without one: lt-logits)"
    return {
        "model": path if given == path else f"{given} -> {path}",
        "dataset": f"{data_args.dataset} (split {data_args.dataset_split}, limit {data_args.limit})",
        "rewards": ",".join(data_args.reward_funcs),
        "credit": args.credit,
        "probe": probe,
        "tau / oar_beta": f"{args.tau} / {args.oar_beta}",
        "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "float32",
        "learning rate": args.learning_rate,
        "steps": f"max_steps {args.max_steps}, epochs {args.num_train_epochs}",
        "generations": f"{args.num_generations} per prompt, {args.generation_batch_size} per batch",
        "seed": args.seed,
        "threads": data_args.threads or "torch's choice",
        "out": args.output_dir,
    }


def _load_credit_modules(argv: list[str]) -> None:
    """Load the `--credit-module` files named on the command line or in the `--config` recipe."""
    from oar_rl.credit_modules import load_credit_modules, specs_in_argv

    specs: list[str] = []  # the recipe's, then the command line's: the parsed list's order
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        import yaml

        recipe = Path(argv[argv.index("--config") + 1])
        if recipe.is_file():
            value = (yaml.safe_load(recipe.read_text()) or {}).get("credit_module") or []
            specs += [value] if isinstance(value, str) else list(value)
    load_credit_modules([*specs, *specs_in_argv(argv)])


def main(argv: list[str] | None = None) -> int:
    """Parse, load, train, save. Returns 0 on success, 2 on a configuration error."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from oar_rl.console import silence_known_warnings

    silence_known_warnings()  # before parsing: TRL's own defaults warn there
    try:
        _load_credit_modules(argv)  # before the parser: their rules are choices of --credit
    except (ValueError, OSError) as err:
        print(f"oar-rl train: error: {err}", file=sys.stderr)
        return 2
    parser = build_parser()
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

    if not (is_torch_bf16_gpu_available() or is_torch_xla_available()):
        parser.set_defaults(bf16=False)  # TRL's default is bf16: float32 where no device runs it
    try:
        data_args, training_args, model_args, unknown = parser.parse_args_and_config(
            argv, return_remaining_strings=True
        )
        if unknown:
            from oar_rl.argparsing import unknown_flags_message

            raise ValueError(unknown_flags_message(parser, unknown) or f"unrecognised arguments: {unknown}")
        if data_args.threads < 0:
            raise ValueError(f"--threads {data_args.threads} must be >= 0 (0: torch's own choice)")
        from oar_rl.options import apply_threads

        apply_threads(data_args.threads)
        given = model_args.model_name_or_path
        if not given:
            raise ValueError("--model is required (TRL's --model_name_or_path): " + MODEL_REQUIRED)
        model_args.model_name_or_path = resolve_model(given, data_args.cache_dir)
        template_note = template_for_model(data_args, model_args.model_name_or_path)
        reward_names = list(data_args.reward_funcs)
        reward_funcs = [resolve_reward(name) for name in reward_names]
        if training_args.reward_weights is not None and len(training_args.reward_weights) != len(
            reward_funcs
        ):
            raise ValueError(
                f"reward_weights has {len(training_args.reward_weights)} values but there are "
                f"{len(reward_funcs)} reward functions ({', '.join(reward_names)})"
            )
        if training_args.eval_strategy != "no":
            raise ValueError(
                f"eval_strategy={training_args.eval_strategy!s}: `oar-rl train` takes no eval dataset; use "
                "`oar-rl eval` on the saved model (eval_strategy: no)"
            )
        from oar_rl.console import check_trackers

        check_trackers(training_args.report_to)  # before the model loads, not after
        checkpoint = resolve_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
        if checkpoint is None:
            check_fresh_output_dir(training_args.output_dir)
        else:
            check_resume(checkpoint, training_args)
        identity = pin_model(model_args, training_args.model_init_kwargs)  # a Hub id -> one commit
        check_model(checkpoint, identity)
        training_args.model_init_kwargs = model_init_kwargs(model_args, training_args)
        train_dataset = load_train_dataset(data_args, reward_names, training_args)
        check_enough_prompts(len(train_dataset), training_args, data_args.dataset)
        import contextlib

        from trl import get_peft_config, get_quantization_config

        from oar_rl.console import no_load_bars
        from oar_rl.trainer import OARTrainer

        peft_config = get_peft_config(model_args)
        if peft_config is not None and identity["fingerprint"].startswith("hub:"):
            peft_config.revision = model_args.model_revision  # the saved adapter names its base's commit
        with contextlib.nullcontext() if data_args.verbose else no_load_bars():
            trainer = OARTrainer(
                model=model_args.model_name_or_path,
                reward_funcs=reward_funcs,
                args=training_args,
                train_dataset=train_dataset,
                quantization_config=get_quantization_config(model_args),
                peft_config=peft_config,
            )
        record_model(training_args.output_dir, identity, training_args.should_save)
    except (ValueError, OSError) as err:
        print(f"oar-rl train: error: {err}", file=sys.stderr)
        return 2

    import time

    from oar_rl.console import attach, summary
    from oar_rl.credit_names import study_name

    rule = study_name(training_args.credit)  # plain GRPO shown as grpo (registered as 'none')
    attach(trainer, desc=f"train {rule}", verbose=data_args.verbose)
    if trainer.accelerator.is_main_process:
        from oar_rl.console import JsonlLog, print_settings

        trainer.add_callback(JsonlLog(Path(training_args.output_dir) / "logs.jsonl"))
        settings = run_settings(given, model_args, data_args, training_args)
        print_settings("train", settings | ({"template": template_note} if template_note else {}))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint)
    if trainer.state.global_step == 0:  # a second line of defence behind check_enough_prompts
        print("oar-rl train: error: training did zero optimizer steps; nothing saved", file=sys.stderr)
        return 1
    with contextlib.nullcontext() if data_args.verbose else no_load_bars():
        trainer.save_model(training_args.output_dir)
    if trainer.use_vllm:  # a colocated engine: shut down while its process groups exist
        from oar_rl.vllm_sync import shutdown

        shutdown(trainer.vllm_generation)
    lines = summary(trainer.state.log_history)
    trainer.accelerator.print(
        f"oar-rl train: credit={rule} done at step {trainer.state.global_step} in "
        f"{time.perf_counter() - t0:.0f} s; {'; '.join(lines[1:]) or lines[0]}; model saved to "
        f"{training_args.output_dir}"
    )
    if hasattr(trainer, "end"):
        trainer.end()
    return 0


if __name__ == "__main__":  # `accelerate launch -m oar_rl.train --config ...`
    from oar_rl.argparsing import run_command

    raise SystemExit(run_command("train", main, sys.argv[1:]))
