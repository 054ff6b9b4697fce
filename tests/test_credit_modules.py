"""Credit rules from the user's own file (`--credit-module`): parsing the flag (`specs_in_argv`), loading
a module once, one imported already, rules whose scorer lives elsewhere, the current directory under the
console script, a rule registered twice; the example file of examples/credit_rules/ through `OARConfig`,
`oar-rl study`, `oar-rl blame`, `oar-rl oracle` and the study's recall; and the checks `register_credit`
makes of a scorer's signature and a rule's config keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import make_args
from oar_rl import credits
from oar_rl.config import OARConfig
from oar_rl.credit_modules import LOADED, load_credit_module, specs_in_argv
from oar_rl.credits import register_credit, unregister_credit

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "credit_rules" / "last_tokens.py"


@pytest.fixture(autouse=True, scope="module")
def _unload_example():
    """Leave the registry as the other test files expect it (a loaded module's rules stay registered)."""
    yield
    for key, mod in list(LOADED.items()):
        for name in mod.rules:
            if name in credits.CREDIT_MODES:
                unregister_credit(name)
        del LOADED[key]


def test_credit_module_loads_once_and_config_validates_after_it(tmp_path):
    spec = str(EXAMPLE)
    with pytest.raises(ValueError, match=r"credit=.no-such-rule. is not valid; .*credit_module"):
        make_args(tmp_path, credit="no-such-rule")
    args = make_args(tmp_path, credit="last-tokens", credit_module=[spec])
    assert args.credit == "last-tokens" and "last-tokens" in credits.CREDITS
    loaded = load_credit_module(spec)
    assert loaded is LOADED[str(EXAMPLE)] and loaded.rules == ("last-tokens",)
    import hashlib

    assert loaded.sha256 == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert specs_in_argv(["--credit-module", "a.py", "--x", "--credit_module=b"]) == ["a.py", "b"]
    # every other command reads the flag as train does: several values, repeats accumulated, in order
    from oar_rl.analysis.blame import build_parser as blame_parser
    from oar_rl.study.args import build_parser as study_parser

    argv = ["--credit-module", "a.py", "b.py", "--credit_module", "c", "--credit-module=d"]
    for parser in (study_parser(), blame_parser()):
        assert parser.parse_args(argv).credit_module == specs_in_argv(argv) == ["a.py", "b.py", "c", "d"]
    bad = tmp_path / "nothing.py"
    bad.write_text("x = 1\n")
    with pytest.raises(ValueError, match=r"registered no credit rule; call oar_rl\.register_credit"):
        load_credit_module(str(bad))
    with pytest.raises(ValueError, match="no such file"):
        OARConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to=[], credit_module=[str(tmp_path / "x.py")]
        )
    with pytest.raises(ValueError, match="cannot import it"):
        load_credit_module("no_such_package.rules")


def test_a_credit_module_imported_already_is_not_run_twice(tmp_path, monkeypatch):
    """The guide lets users import their module themselves; --credit-module then finds its rules (before:
    "registered no credit rule" for the dotted name, "already registered" for the file's path)."""
    import sys

    src = tmp_path / "t_own_rules.py"
    src.write_text(
        "import torch\nfrom oar_rl import register_credit\n"
        "register_credit('t-own', lambda m, b, **kw: b.completion_mask.float(), reshape='weights')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import t_own_rules  # noqa: F401

        assert load_credit_module("t_own_rules").rules == ("t-own",)
        LOADED.pop(str(src.resolve()))
        assert load_credit_module(str(src)).rules == ("t-own",)  # the path of the same file
        unregister_credit("t-own")  # e.g. a notebook reloading a changed file: loading again re-runs it
        LOADED.pop(str(src.resolve()))
        assert load_credit_module(str(src)).rules == ("t-own",) and "t-own" in credits.CREDIT_MODES
    finally:
        LOADED.pop(str(src.resolve()), None)
        sys.modules.pop("t_own_rules", None)
        if "t-own" in credits.CREDIT_MODES:
            unregister_credit("t-own")


def test_a_rule_whose_scorer_comes_from_another_module_belongs_to_the_module_registering_it(
    tmp_path, monkeypatch
):
    """A module imported before `--credit-module` names it, whose rule's scorer is defined elsewhere (a
    helper module, a functools.partial of another function): its rules are found, not re-run and refused
    as "already registered" (the origin was the scorer's module before)."""
    import sys

    (tmp_path / "t_helper_scores.py").write_text(
        "def ones(m, b, **kw):\n    return b.completion_mask.float()\n"
        "def make():\n    from oar_rl import register_credit\n"
        "    register_credit('t-made', ones, reshape='weights')\n"
    )
    src = tmp_path / "t_partial_rules.py"
    src.write_text(
        "import functools\nfrom oar_rl import register_credit\nimport t_helper_scores as h\n"
        "register_credit('t-partial', functools.partial(h.ones), reshape='weights')\n"
        "register_credit('t-helper', h.ones, reshape='weights')\nh.make()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("t-partial", "t-helper", "t-made")
    try:
        import t_partial_rules  # noqa: F401

        assert {credits.CREDIT_MODES[n].modules[0] for n in names} == {"t_partial_rules"}
        assert credits.CREDIT_MODES["t-partial"].modules == ("t_partial_rules", "t_helper_scores")
        assert credits.CREDIT_MODES["t-made"].help == "credit rule registered by t_partial_rules"
        loaded = load_credit_module("t_partial_rules")
        assert loaded.rules == names
        LOADED.pop(str(src.resolve()))
        assert load_credit_module(str(src)).rules == names
        # the helper's source is in the recorded digest: editing it changes a study's protocol hash
        import hashlib

        helper = tmp_path / "t_helper_scores.py"
        expected = hashlib.sha256()
        for p in (src, helper):
            expected.update(f"{p.name}\0".encode() + p.read_bytes() + b"\0")
        assert loaded.sha256 == expected.hexdigest() != hashlib.sha256(src.read_bytes()).hexdigest()
    finally:
        LOADED.pop(str(src.resolve()), None)
        for mod in ("t_partial_rules", "t_helper_scores"):
            sys.modules.pop(mod, None)
        for n in names:
            if n in credits.CREDIT_MODES:
                unregister_credit(n)
    assert credits.CREDIT_MODES["oar-g"].modules[0] == "oar_rl.credits"


def test_rules_registered_through_a_helper_s_function_belong_to_the_helper_too(tmp_path, monkeypatch):
    """A script, or a package's __init__, that calls a function of the credit module which registers its
    rules: `--credit-module` of that module finds them (its own module is the caller of register_credit)."""
    import sys

    pkg = tmp_path / "t_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from t_pkg import rules\nrules.setup()\n")
    (pkg / "scores.py").write_text("def ones(m, b, **kw):\n    return b.completion_mask.float()\n")
    (pkg / "rules.py").write_text(  # the scorer from a third module: only the caller is t_pkg.rules
        "from t_pkg.scores import ones\n"
        "def setup():\n    from oar_rl import register_credit\n"
        "    register_credit('t-setup', ones, reshape='weights')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import t_pkg  # noqa: F401

        assert credits.CREDIT_MODES["t-setup"].modules == ("t_pkg", "t_pkg.rules", "t_pkg.scores")
        assert load_credit_module("t_pkg.rules").rules == ("t-setup",)
    finally:
        LOADED.pop(str((pkg / "rules.py").resolve()), None)
        for mod in ("t_pkg", "t_pkg.rules", "t_pkg.scores"):
            sys.modules.pop(mod, None)
        if "t-setup" in credits.CREDIT_MODES:
            unregister_credit("t-setup")


def test_a_rule_registered_twice_names_both_files_and_the_remedy(tmp_path):
    """A file loaded by path is imported under a made-up module name; the "already registered" error named
    that name only (now: the files, and what to do)."""
    import oar_rl

    first, second = tmp_path / "t_first_rules.py", tmp_path / "t_second_rules.py"
    for path in (first, second):
        path.write_text(
            "from oar_rl import register_credit\n"
            "register_credit('t-twice', lambda m, b, **kw: b.completion_mask.float(), reshape='weights')\n"
        )
    try:
        load_credit_module(str(first))
        with pytest.raises(ValueError) as err:
            load_credit_module(str(second))
        msg = str(err.value)
        assert f"'t-twice' is already registered by {first.resolve()}; registering it again from " in msg
        assert str(second.resolve()) in msg and "oar_rl_credit_module_" not in msg
        assert "another name" in msg and "oar_rl.unregister_credit('t-twice')" in msg
        assert oar_rl.unregister_credit is unregister_credit  # the remedy is public
        assert oar_rl.compute_importance is credits.compute_importance
    finally:
        LOADED.pop(str(first.resolve()), None)
        if "t-twice" in credits.CREDIT_MODES:
            unregister_credit("t-twice")


def test_a_dotted_credit_module_in_the_current_directory_imports_under_the_console_script(
    tmp_path, monkeypatch
):
    """`oar-rl train --credit-module my_rules` (the console script has no current directory on sys.path,
    unlike `python -m`): found as the reward functions of `oar-rl train` are."""
    import sys

    (tmp_path / "t_cwd_rules.py").write_text(
        "from oar_rl import register_credit\n"
        "register_credit('t-cwd', lambda m, b, **kw: b.completion_mask.float(), reshape='weights')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    try:
        assert load_credit_module("t_cwd_rules").rules == ("t-cwd",)
    finally:
        LOADED.pop(str((tmp_path / "t_cwd_rules.py").resolve()), None)
        sys.modules.pop("t_cwd_rules", None)
        if "t-cwd" in credits.CREDIT_MODES:
            unregister_credit("t-cwd")


def test_a_scorer_that_cannot_take_its_keyword_arguments_is_refused_at_registration(rule):
    """Before, it was accepted and failed at its first call with a TypeError that named no rule."""
    import functools

    def no_kw(model, batch):
        return batch.completion_mask.float()

    msg = r"'t-no-kw': scorer .*no_kw\(model, batch\) cannot be called as scorer\(model, batch, settings="
    with pytest.raises(ValueError, match=msg + r".*take \*\*kw, or give options="):
        register_credit("t-no-kw", no_kw, reshape="weights")
    with pytest.raises(ValueError, match=r"'t-no-probe'.*scorer\(model, batch, probe=\.\.\., \.\.\.\)"):
        register_credit("t-no-probe", no_kw, reshape="bilevel", probe=True, options=lambda c: {})
    with pytest.raises(ValueError, match=r"'t-one-arg'.*take \*\*kw"):
        register_credit("t-one-arg", lambda batch, **kw: None, reshape="weights")
    assert "t-no-kw" not in credits.CREDIT_MODES and "t-no-probe" not in credits.CREDIT_MODES
    # what can be called passes: its own options, explicit keywords, a partial, an uninspectable builtin
    rule("t-opts", no_kw, reshape="weights", options=lambda c: {})
    rule("t-explicit", lambda m, b, settings, batch_size, temperature, tokenizer, generator: None,
         reshape="uniform", noisy=True)  # fmt: skip
    rule("t-partial-kw", functools.partial(lambda m, b, k, **kw: None, k=1), reshape="weights")
    rule("t-builtin", torch.ones_like, reshape="weights")


def test_a_rule_config_key_that_is_no_oarconfig_field_is_refused_in_training_and_blame(rule):
    """blame merged a misspelt key into its settings and scored with the default τ, silently."""
    from oar_rl.analysis.blame import rule_defaults
    from oar_rl.config import OARConfig, oar_defaults

    rule("t-typo", lambda m, b, **kw: b.completion_mask.float(), reshape="bilevel", config={"tua": 0.7})
    with pytest.raises(
        ValueError, match=r"'t-typo' sets 'tua', which is not an OARConfig field \(did you mean tau"
    ):
        OARConfig(output_dir="unused", credit="t-typo")
    with pytest.raises(ValueError, match=r"'t-typo' sets 'tua'"):
        rule_defaults("t-typo/as-mean", oar_defaults())
    from oar_rl.analysis.blame import check_signal

    with pytest.raises(ValueError, match=r"'t-typo' sets 'tua'"):  # before anything loads or samples
        check_signal("t-typo")
    rule("t-tau", lambda m, b, **kw: b.completion_mask.float(), reshape="bilevel", config={"tau": 0.7})
    assert rule_defaults("t-tau", oar_defaults())["tau"] == 0.7


def test_example_rule_runs_in_study_and_blame(tmp_path, capsys):
    """The guide's example file through `oar-rl study` (tiny: 1 seed, 2 steps) and `oar-rl blame`."""
    from oar_rl.analysis import blame
    from oar_rl.study import cli as study_cli

    out = tmp_path / "study"
    args = ["--tiny", "--credits", "grpo,last-tokens", "--seeds", "1", "--recall", "0", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--credit-module", str(EXAMPLE)]  # fmt: skip
    assert study_cli.main(args) == 0
    run = json.loads((out / "runs" / "last-tokens.seed0.json").read_text())
    digest = load_credit_module(str(EXAMPLE)).sha256
    assert run["credit"] == "last-tokens"
    assert run["credit_module"] == {"module": str(EXAMPLE), "sha256": digest}
    assert run["final"]["sampled"] is not None
    grpo = json.loads((out / "runs" / "grpo.seed0.json").read_text())
    # the module is recorded on its rule's runs, not in the protocol every run shares
    assert grpo["protocol_hash"] == run["protocol_hash"] and "credit_modules" not in run["protocol"]
    assert "credit_module" not in grpo

    out = tmp_path / "blame"
    argv = ["--problems", "4", "--samples", "4", "--credits", "position,random,last-tokens",
            "--out", str(out), "--credit-module", str(EXAMPLE)]  # fmt: skip
    assert blame.main(argv) == 0
    result = json.loads((out / "blame.json").read_text())
    assert set(result["signals"]) == {"position", "random", "last-tokens"} and result["rows"] >= 1
    assert result["credit_modules"] == [{"module": str(EXAMPLE), "sha256": digest}]
    assert "last-tokens − position" in result["paired"]


def test_oracle_and_study_recall_record_the_credit_modules(tiny_model_dir, tmp_path, monkeypatch):
    """`oar-rl oracle` and `python -m oar_rl.study.recall` take --credit-module rules and record each
    module with its code's sha256, as train, study and blame do (before: neither recorded any)."""
    import oar_rl.data.arithmetic as arithmetic
    from conftest import register_fake_task
    from oar_rl.analysis import recall
    from oar_rl.study import recall as study_recall

    digest = load_credit_module(str(EXAMPLE)).sha256
    monkeypatch.setattr(arithmetic, "check", lambda text, answer: True)
    out = tmp_path / "oracle"
    argv = ["--task", "arithmetic", "--model", str(tiny_model_dir), "--trajectories", "2",
            "--max-problems", "8", "--max-new-tokens", "4", "--credits", "last-tokens",
            "--credit-module", str(EXAMPLE), "--out", str(out)]  # fmt: skip
    assert recall.main(argv) == 0
    result = json.loads((out / "recall.json").read_text())
    assert "last-tokens" in result["recall"]
    assert result["credit_modules"] == [{"module": str(EXAMPLE), "sha256": digest}]

    register_fake_task(monkeypatch, "fake-recall", tmp_path / "ws")  # the analysis itself is stubbed
    seen = {}

    def fake_analysis(task, model, tok, *, methods, **kw):
        seen["methods"] = methods
        return {"ks": list(study_recall.KS), "sampled": 0, "trajectories": 0, "skipped": "stub"}

    monkeypatch.setattr(study_recall, "recall_analysis", fake_analysis)
    out = tmp_path / "study-recall"
    argv = ["--task", "fake-recall", "--credits", "last-tokens", "--credit-module", str(EXAMPLE),
            "--out", str(out)]  # fmt: skip
    assert study_recall.main(argv) == 0 and "last-tokens" in seen["methods"]
    written = json.loads((out / "recall.json").read_text())
    assert written["credit_modules"] == [{"module": str(EXAMPLE), "sha256": digest}]
