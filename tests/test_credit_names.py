"""Issue 47 item 7: plain GRPO is `grpo` wherever a rule is named (`none` its alias), an unknown rule's
error names the nearest valid ones, and the help says what each flag does.

Every test parses or validates only; nothing trains.
"""

from __future__ import annotations

import re

import pytest

from oar_rl import cli
from oar_rl.credit_names import ALIASES, nearest, registered, study_name, unknown_message


def test_one_place_resolves_the_names():
    assert registered("grpo") == "none" and registered("none") == "none" and registered("oar-g") == "oar-g"
    assert study_name("none") == "grpo" and study_name("grpo") == "grpo" and study_name("oar-p") == "oar-p"
    assert nearest("oar_g", ["none", "oar-g", "entropy"])[0] == "oar-g"
    msg = unknown_message("credit", "grp", ["none", "random"])
    assert "did you mean 'grpo'" in msg and "grpo (alias none), random" in msg


def test_an_alias_cannot_be_registered_as_a_rule():
    from oar_rl.credits import register_credit

    for alias in ALIASES:
        with pytest.raises(ValueError, match="plain GRPO's name"):
            register_credit(alias, reshape="none")


def test_oarconfig_takes_grpo_and_names_the_nearest_rules(tmp_path):
    from tests.conftest import make_args

    assert make_args(tmp_path, credit="grpo").credit == "none"  # the registered name the trainer reads
    assert make_args(tmp_path, credit="none").credit == "none"
    with pytest.raises(ValueError, match=r"credit='oar_g' is not valid \(did you mean 'oar-g'"):
        make_args(tmp_path, credit="oar_g")
    with pytest.raises(ValueError, match=r"did you mean 'grpo'"):
        make_args(tmp_path, credit="GRPO")


def test_train_takes_credit_grpo_and_refuses_an_unknown_rule_by_its_nearest_names(capsys):
    from oar_rl.train import build_parser

    parser = build_parser()
    assert parser.parse_args(["--credit", "grpo"]).credit == "grpo"
    assert parser.parse_args(["--credit", "none"]).credit == "none"
    with pytest.raises(SystemExit):
        parser.parse_args(["--credit", "frist-error"])
    assert "did you mean 'first-error'" in capsys.readouterr().err


def test_each_no_flag_of_train_says_it_turns_its_option_off(capsys):
    from oar_rl.train import build_parser

    parser = build_parser()
    negations = [a for a in parser._actions if a.option_strings and a.option_strings[0].startswith("--no_")]
    assert negations  # TRL adds one for every bool field that is on by default
    for action in negations:
        name = action.option_strings[0][len("--no_") :]
        assert action.help.startswith(f"turn --{name} off"), action.help
    parser.print_help()
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "turn --safe_rewards off (sets safe_rewards to False; it is on by default) --" in text
    assert "is on by default) (default: False)" not in text


def test_top_level_help_columns_are_aligned(capsys):
    cli.main(["--help"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    starts = {len(line) - len(line.split(maxsplit=1)[1]) for line in rows}
    assert len(rows) == len(cli.COMMANDS) and len(starts) == 1, rows


def test_study_and_bench_take_grpo_and_none(capsys):
    from oar_rl.bench import cli as bench
    from oar_rl.study.args import build_parser, settings_from_args

    settings = settings_from_args(build_parser().parse_args(["--quick", "--credits", "none,oar-g"]))
    assert settings.methods == ("grpo", "oar-g")
    with pytest.raises(ValueError, match=r"method='oar_p' is not valid \(did you mean 'oar-p'"):
        settings_from_args(build_parser().parse_args(["--quick", "--credits", "grpo,oar_p"]))
    assert bench._parse(["--credits", "grpo,oar-g", "--no-scorers"]).methods == ["none", "oar-g"]
    with pytest.raises(SystemExit):
        bench._parse(["--credits", "grpo,oar_g"])
    assert "did you mean 'oar-g'" in capsys.readouterr().err


def test_blame_lists_its_signals_and_says_why_grpo_is_none(capsys):
    from oar_rl.analysis.blame import build_parser, check_signal

    help_ = build_parser()._option_string_actions["--credits"].help
    assert "module doc" not in help_
    assert all(s in help_ for s in ("random", "position", "oar-g/<probe>", "first-error", "as-joint"))
    with pytest.raises(ValueError, match="plain GRPO scores no token"):
        check_signal("grpo")
    with pytest.raises(ValueError, match=r"did you mean 'entropy'"):
        check_signal("entrpy")


@pytest.mark.parametrize("action", ["confirm", "report", "all", "pilot"])
def test_a_screen_action_refuses_a_flag_it_does_not_use(action, capsys):
    from oar_rl.study.screen import main

    with pytest.raises(SystemExit):
        main([action, "--arms", "grpo", "--plan", "x:Y"])
    assert f"`{action}` does not use --arms" in capsys.readouterr().err
