"""Issue 27: one CLI vocabulary across the `oar-rl` commands, and no surprise multi-hour jobs.

Every test parses only (or stops before any sampling or training): each one names the inconsistency it
keeps away.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oar_rl import cli

ROOT = Path(__file__).resolve().parents[1]
ARGPARSE_COMMANDS = ("eval", "attribute", "oracle", "bench", "study", "demo", "fetch-model", "warm-start")


def parser_of(command: str):
    """The command's side-effect-free `build_parser()` (the convention every sub-command module keeps)."""
    import importlib

    return importlib.import_module(cli.COMMANDS[command][0]).build_parser()


def option(parser, flag: str):
    return parser._option_string_actions[flag]


# --------------------------------------------------------------------------------------------------
# both spellings everywhere
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [*ARGPARSE_COMMANDS, "train"])
def test_every_multi_word_flag_takes_both_spellings(command):
    parser = parser_of(command)
    checked = 0
    for flag, action in parser._option_string_actions.items():
        name = flag[2:]
        if not flag.startswith("--") or not re.search(r"[-_]", name) or name.startswith("no"):
            continue
        for other in ("--" + name.replace("_", "-"), "--" + name.replace("-", "_")):
            assert parser._option_string_actions.get(other) is action, f"{command}: {flag} but not {other}"
        checked += 1
    assert checked >= 1


def test_study_takes_cache_dir_in_both_spellings_like_demo():
    for command in ("study", "demo", "fetch-model", "eval", "attribute", "oracle"):
        parser = parser_of(command)
        assert option(parser, "--cache_dir") is option(parser, "--cache-dir"), command
    args = parser_of("study").parse_args(["--cache_dir", "x", "--tune_lr", "--lr_grid", "1e-4"])
    assert (args.cache_dir, args.tune_lr, args.lr_grid) == ("x", True, "1e-4")


# --------------------------------------------------------------------------------------------------
# --model: one name, one meaning of 'default'
# --------------------------------------------------------------------------------------------------
def test_train_takes_model_and_out_like_every_command_and_keeps_trls_names(tmp_path):
    from oar_rl import train

    parse = train.build_parser().parse_args_and_config
    _, args, model = parse(["--model", "m", "--out", "o", "--use_cpu", "true"])
    assert (model.model_name_or_path, args.output_dir) == ("m", "o")
    _, args, model = parse(["--model_name_or_path", "m2", "--output_dir", "o2", "--use_cpu", "true"])
    assert (model.model_name_or_path, args.output_dir) == ("m2", "o2")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: m3\nout: o3\nuse_cpu: true\n")
    _, args, model = parse(["--config", str(recipe)])
    assert (model.model_name_or_path, args.output_dir) == ("m3", "o3")


def test_model_default_is_the_shipped_word_problem_model_in_every_command(monkeypatch, capsys):
    from oar_rl import train
    from oar_rl.analysis.attribute import load_model
    from oar_rl.eval import evaluation
    from oar_rl.fetch import resolve_model
    from oar_rl.shipped import shipped_path
    from oar_rl.tasks import get_task

    shipped = str(shipped_path("wordproblems"))
    assert resolve_model("default") == resolve_model("wordproblems") == shipped
    assert resolve_model("wordproblems-long") == str(shipped_path("wordproblems-long")) != shipped
    # attribute / oracle: 'default' and no --model (the default task's warm start) are the same model
    model, _ = load_model("default", get_task("wordproblems"))
    assert Path(model.name_or_path) == Path(shipped)
    assert Path(load_model(None, get_task("wordproblems"))[0].name_or_path) == Path(shipped)
    # eval: resolved before anything is sampled
    seen = {}
    monkeypatch.setattr(evaluation, "evaluate", lambda config: seen.setdefault("eval", config.model) and {})
    monkeypatch.setattr(evaluation, "results_markdown", lambda results: "")
    assert cli.main(["eval", "--model", "default", "--out", "unused"]) == 0
    # train: resolved before the model is loaded

    def stop(model_args, training_args):
        seen["train"] = model_args.model_name_or_path
        raise ValueError("stop here")

    monkeypatch.setattr(train, "model_init_kwargs", stop)
    assert cli.main(["train", "--model", "default", "--dataset", "arithmetic", "--use_cpu", "true"]) == 2
    assert seen == {"eval": shipped, "train": shipped}
    err = capsys.readouterr().err
    assert "oar-rl eval: resolved settings" in err and f"default -> {shipped}" in err


def test_a_warm_start_of_another_task_is_refused_by_name():
    from oar_rl.options import check_model_task

    check_model_task("default", "wordproblems")
    check_model_task("/some/dir", "arithmetic")
    with pytest.raises(
        ValueError, match=r"--model default is the shipped word-problem model.*--model arithmetic"
    ):
        check_model_task("default", "arithmetic")


@pytest.mark.parametrize("command", ["eval", "attribute", "oracle", "train"])
def test_model_help_says_what_default_means(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "'default' = 'wordproblems' = the word-problem model shipped with the package" in text
    assert "smollm2-135m" in text and ".gguf" in text  # eval's help named neither


# --------------------------------------------------------------------------------------------------
# distinct names where meanings differ
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "old", "new"),
    [
        ("bench", "--steps", "--repeats"),
        ("attribute", "--n", "--traces"),
        ("oracle", "--n", "--trajectories"),
    ],
)
def test_renamed_flags_are_an_error_naming_the_new_one(command, old, new, capsys):
    parser = parser_of(command)
    assert parser.parse_args([new, "5"]) is not None
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([old, "5"])
    assert exit_.value.code == 2
    assert f"{old} was renamed {new}" in capsys.readouterr().err


def test_steps_and_n_keep_one_meaning_each():
    assert parser_of("bench").parse_args(["--repeats", "7"]).repeats == 7
    assert "optimizer steps" in option(parser_of("study"), "--steps").help
    assert "optimizer steps" in option(parser_of("demo"), "--steps").help
    assert "samples per problem" in option(parser_of("eval"), "--samples").help.lower()  # pass@k's n


# --------------------------------------------------------------------------------------------------
# one default for --threads, --seed and the probe
# --------------------------------------------------------------------------------------------------
def test_threads_has_one_default_everywhere():
    from oar_rl import train
    from oar_rl.options import THREADS_DEFAULT

    defaults = {c: option(parser_of(c), "--threads").default for c in ARGPARSE_COMMANDS if c != "fetch-model"}
    data_args, _, _ = train.build_parser().parse_args_and_config(["--use_cpu", "true"])
    defaults["train"] = data_args.threads
    assert set(defaults.values()) == {THREADS_DEFAULT} == {1}, defaults
    with pytest.raises(SystemExit):
        parser_of("bench").parse_args(["--threads", "-1"])


def test_seed_has_one_default_in_the_commands_that_sample():
    commands = ("eval", "attribute", "oracle", "bench", "blame")
    assert {option(parser_of(c), "--seed").default for c in commands} == {0}
    assert option(parser_of("blame"), "--threads").default == 1


def test_default_probe_is_as_mean_in_train_attribute_oracle_and_study():
    from oar_rl import train
    from oar_rl.study.args import settings_from_args
    from oar_rl.tasks import get_task, task_names

    _, train_args, _ = train.build_parser().parse_args_and_config(["--use_cpu", "true"])
    probes = {
        "train": train_args.probe,
        "attribute": parser_of("attribute").parse_args([]).probe,
        "oracle": parser_of("oracle").parse_args([]).probe,
    }
    for preset in ([], ["--quick"]):
        settings = settings_from_args(parser_of("study").parse_args(preset))
        for name in task_names():
            probes[f"study {preset} {name}"] = settings.resolved(get_task(name)).probe
    assert set(probes.values()) == {"as-mean"}, probes


# --------------------------------------------------------------------------------------------------
# help states the real defaults
# --------------------------------------------------------------------------------------------------
def test_study_help_states_what_the_code_does(capsys):
    from oar_rl.study.config import PRESETS

    with pytest.raises(SystemExit):
        cli.main(["study", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "chosen once for GRPO" not in text and "GRPO sweep" not in text
    assert "sweep the learning rate of every method" in text
    seeds = text[text.index("--seeds SEEDS", text.index("options:")) :]
    assert (
        f"default {PRESETS['full'].seeds}, grail 5, oar-gp 5; --quick {PRESETS['quick'].seeds}" in seeds[:200]
    )
    assert "default 5" not in text


def test_fetch_model_help_names_the_real_cache_dir(capsys):
    from oar_rl.cache_check import default_cache_dir

    with pytest.raises(SystemExit):
        cli.main(["fetch-model", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "~/.cache/oar-rl/models" in text and default_cache_dir().name == "models"


# --------------------------------------------------------------------------------------------------
# no surprise multi-hour jobs
# --------------------------------------------------------------------------------------------------
def test_bare_study_prints_its_plan_and_refuses_naming_the_flag(tmp_path, capsys):
    out = tmp_path / "study"
    assert cli.main(["study", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "60: grpo 10 x" in err and "estimated time about 4" in err and "h at one torch thread" in err
    assert f"`oar-rl study --out {out} --full`" in err
    assert not out.exists()  # nothing started, nothing written
    assert "this is the full protocol" in err
    # the lead's screen: explicit scope, --tune-lr (about 36 min): a large plan that is not the full
    # protocol asks for --yes, and says so with its estimate (issue 34)
    assert cli.main(["study", "--credits", "grpo,oar-g", "--seeds", "3", "--tune-lr", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "runs           6:" in err and "swept first (--tune-lr): 8 runs" in err
    assert f"--seeds 3 --tune-lr --out {out} --yes`" in err and "full protocol" not in err
    assert "estimated at about 36 min of one CPU core" in err


def test_dry_run_prints_the_plan_only(tmp_path, capsys):
    out = tmp_path / "study"
    assert cli.main(["study", "--dry-run", "--full", "--tune-lr", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "oar-rl study: plan (the full protocol" in err and "(the sweep " in err and not out.exists()
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "grpo.seed0.json").write_text("{}")
    assert cli.main(["study", "--quick", "--dry-run", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "runs           6: grpo 2 x" in err and "already stored 1 of 6 runs" in err
    with pytest.raises(SystemExit):
        cli.main(["study", "--quick", "--full"])


def test_full_study_estimate_matches_the_measured_study():
    from oar_rl.study.config import PRESETS
    from oar_rl.study.plan import estimate_seconds

    measured = json.loads((ROOT / "results" / "study-wordproblems-v2" / "study.json").read_text())["wall"]
    estimate = estimate_seconds(PRESETS["full"], tune_lr=True)
    assert 0.8 < estimate["runs"] / measured["runs_seconds_total"] < 1.2
    assert 0.5 < estimate["sweep"] / measured["lr_sweep_seconds_total"] < 1.2  # that sweep shared the CPU


def test_make_targets_are_one_job_each():
    text = (ROOT / "Makefile").read_text()
    recipes = dict(re.findall(r"^([a-z-]+):[^\n]*\n((?:\t[^\n]*\n)+)", text, flags=re.M))
    assert "demo-quick" not in recipes and "demo-quick" not in text
    assert "oar-rl study --full" in recipes["study"] and "--quick" in recipes["demo"]
    jobs = [recipes[t] for t in ("demo", "test", "study")]
    assert len(set(jobs)) == 3


# --------------------------------------------------------------------------------------------------
# the resolved settings, in one block at the start
# --------------------------------------------------------------------------------------------------
def test_settings_block_lists_each_setting_once():
    from oar_rl.console import settings_block

    block = settings_block("eval", {"model": "m", "threads": 1})
    assert block.splitlines() == ["oar-rl eval: resolved settings", "  model    m", "  threads  1"]
