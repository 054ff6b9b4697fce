"""Issue 57, items 8-10: whole flag names only, a bad command line in one line, one word for one thing
across the commands, the shared flags everywhere, `train --model default` on a CPU machine.

Every test parses only, or stops before a model loads."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from oar_rl import cli, train

ROOT = Path(__file__).resolve().parents[1]
ARGPARSE = ("demo", "eval", "attribute", "oracle", "fetch-model", "blame", "task-figures", "bench", "study",
            "warm-start")  # fmt: skip
REQUIRED = {
    "eval": ["--model", "m", "--out", "o"],
    "fetch-model": ["x.gguf"],
    "warm-start": ["--task", "wordproblems"],
}


def parser_of(command: str):
    return importlib.import_module(cli.COMMANDS[command][0]).build_parser()


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# --------------------------------------------------------------------------------------------------
# 8. whole flag names only; a misspelt flag is one line naming the nearest valid one
# --------------------------------------------------------------------------------------------------
def test_study_seed_is_not_seeds(tmp_path, capsys):
    """`oar-rl study --seed 3` ran three seeds (argparse took it for --seeds)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["study", "--seed", "3", "--dry-run", "--out", str(tmp_path / "s")])
    assert exit_.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert line == "oar-rl study: error: unknown option(s): --seed (did you mean --seeds?)"


def test_train_learning_rat_is_not_learning_rate(tmp_path, capsys):
    assert cli.main(["train", "--learning-rat", "1e-4", "--use_cpu", "true", "--out", str(tmp_path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == "oar-rl train: error: unknown option(s): --learning-rat (did you mean --learning-rate?)"


@pytest.mark.parametrize("command", [*ARGPARSE, "train"])
def test_no_command_takes_an_abbreviated_flag(command, capsys):
    parser = parser_of(command)
    assert parser.allow_abbrev is False
    flag = max((s for s in parser._option_string_actions if s.startswith("--")), key=len)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([*REQUIRED.get(command, []), flag[:-2], "1"])
    assert exit_.value.code == 2
    assert f"{flag[:-2]} (did you mean" in _one_line(capsys.readouterr().err)


def test_a_bad_value_is_one_line_without_the_usage(capsys):
    with pytest.raises(SystemExit):
        cli.main(["blame", "--split", "nowhere"])
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("oar-rl blame: error: argument --split: invalid choice: 'nowhere'")
    assert line.endswith("(oar-rl blame --help: the options)")


def test_every_argparse_parser_in_the_project_takes_whole_names_only():
    """A static check: each `ArgumentParser(...)` / `add_parser(...)` call of the package, the experiments
    and the benchmarks passes allow_abbrev=False (oar_rl.argparsing.Parser sets it itself)."""
    missing = []
    for root in ("src", "experiments", "benchmarks"):
        for path in (ROOT / root).rglob("*.py"):
            text = path.read_text()
            for m in re.finditer(r"(ArgumentParser|\.add_parser)\(", text):
                call = text[m.end() : m.end() + 400]
                depth, end = 1, 0
                while depth and end < len(call):
                    depth += {"(": 1, ")": -1}.get(call[end], 0)
                    end += 1
                ours = "class Parser(argparse.ArgumentParser)" in text[m.start() - 20 : m.end()]
                if "allow_abbrev=False" not in call[:end] and not ours:
                    missing.append(f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}")
    assert missing == []


# --------------------------------------------------------------------------------------------------
# 9. one word for one thing
# --------------------------------------------------------------------------------------------------
WORDS = {
    "--credits": ("study", "demo", "bench", "blame", "attribute", "oracle"),
    "--problems": ("blame", "bench", "eval", "task-figures"),
    "--samples": ("blame", "bench", "eval", "task-figures"),
}
OLD = [  # (command, old flag, its value, new flag)
    ("study", "--methods", "grpo", "--credits"),
    ("demo", "--methods", "grpo", "--credits"),
    ("bench", "--methods", "none", "--credits"),
    ("blame", "--signals", "random", "--credits"),
    ("attribute", "--methods", "random", "--credits"),
    ("oracle", "--methods", "random", "--credits"),
    ("bench", "--prompts", "2", "--problems"),
    ("blame", "--prompts", "2", "--problems"),
    ("bench", "--num-generations", "2", "--samples"),
    ("eval", "--n", "2", "--samples"),
    ("eval", "--limit", "2", "--problems"),
    ("oracle", "--max-prompts", "2", "--max-problems"),
]


@pytest.mark.parametrize(("word", "commands"), list(WORDS.items()))
def test_one_word_in_every_command(word, commands):
    for command in commands:
        assert word in parser_of(command)._option_string_actions, f"{command} has no {word}"


@pytest.mark.parametrize(("command", "old", "value", "new"), OLD)
def test_an_old_name_still_works_for_one_release_and_says_so(command, old, value, new, capsys):
    parser = parser_of(command)
    given = parser.parse_args([*REQUIRED.get(command, []), old, value])
    expected = parser.parse_args([*REQUIRED.get(command, []), new, value])
    assert vars(given) == vars(expected)
    line = _one_line(capsys.readouterr().err)
    assert f"{old} is deprecated, use {new} (the old name goes in the next release)" in line
    help_ = parser.format_help()
    assert re.search(rf"{re.escape(old)}\b", help_) is None or old == "--n"  # hidden from --help


def test_the_held_out_split_is_test_where_the_pages_say_test():
    from oar_rl.options import data_split

    assert parser_of("blame").parse_args(["--split", "test"]).split == "test"
    assert data_split("test") == "eval" and data_split("train") == "train" and data_split(None) is None
    assert "test" in parser_of("oracle")._option_string_actions["--split"].help


def test_train_takes_the_same_words_beside_trls():
    parse = train.build_parser().parse_args_and_config
    data_args, args, _ = parse(["--use_cpu", "true", "--problems", "8", "--samples", "4", "--split", "x",
                                "--per_device_train_batch_size", "4"])  # fmt: skip
    assert (data_args.limit, args.num_generations, data_args.dataset_split) == (8, 4, "x")


@pytest.mark.parametrize("command", [c for c in ARGPARSE if c != "demo"] + ["demo", "train"])
def test_the_shared_flags_are_on_every_command(command):
    """`task-figures` had neither, `blame` and `bench` no --cache-dir, `fetch-model` no --threads."""
    if command == "train":
        data_args, _, _ = train.build_parser().parse_args_and_config(
            ["--use_cpu", "true", "--threads", "2", "--cache-dir", "c"]
        )
        assert (data_args.threads, data_args.cache_dir) == (2, "c")
        return
    parser = parser_of(command)
    args = parser.parse_args([*REQUIRED.get(command, []), "--threads", "2", "--cache-dir", "c"])
    assert (args.threads, args.cache_dir) == (2, "c")


# --------------------------------------------------------------------------------------------------
# 10. train --model default on a CPU machine; a missing local path in our words
# --------------------------------------------------------------------------------------------------
def test_train_model_default_runs_in_float32_where_no_device_runs_bf16(monkeypatch, capsys):
    """TRL's default is bf16, which stopped `oar-rl train --model default` on a CPU machine with "Your
    setup doesn't support bf16/gpu"."""
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_torch_bf16_gpu_available", lambda: False)
    monkeypatch.setattr(transformers.utils, "is_torch_xla_available", lambda: False)
    seen = {}

    def stop(model_args, training_args):
        seen.update(bf16=training_args.bf16, dtype=model_args.dtype)
        raise ValueError("stop here")

    monkeypatch.setattr(train, "model_init_kwargs", stop)
    assert cli.main(["train", "--model", "default", "--dataset", "arithmetic"]) == 2
    assert seen == {"bf16": False, "dtype": "float32"}
    assert "bf16/gpu" not in capsys.readouterr().err


def test_a_missing_local_model_is_said_in_our_words(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "model"
    argv = ["train", "--model", str(missing), "--dataset", "arithmetic", "--use_cpu", "true"]
    assert cli.main([*argv, "--out", str(tmp_path / "run")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--model {missing}: no such local directory ({tmp_path} has no 'no')" in line
    assert "Repo id" not in line


def test_debug_is_ours_unless_it_carries_trls_value():
    from oar_rl.argparsing import pop_debug

    assert pop_debug(["--x", "1", "--debug"]) == (True, ["--x", "1"])
    assert pop_debug(["--debug", "underflow_overflow"]) == (False, ["--debug", "underflow_overflow"])
