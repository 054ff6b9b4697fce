"""Issue 57, items 1-7: what a user meets writing a credit rule from the guide -- no silent no-op, checks
before the model loads, every failure of a rule as one line naming it (`--debug`: the traceback).

Each test runs in seconds (the tiny random Qwen2 of conftest, one training step at most)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from conftest import make_args, make_trainer, pad_texts
from oar_rl import cli, credits, train
from oar_rl.credit_modules import LOADED
from oar_rl.scoring import NotStandalone, RuleError, ScoringContext

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny-cpu.yaml")


@pytest.fixture
def rule_file(tmp_path):
    """`rule_file(source)`: a credit module written under tmp_path; its rules are removed after the test."""
    written: list[Path] = []

    def make(source: str, name: str = "my_rules.py") -> Path:
        path = tmp_path / name
        path.write_text("import torch\nimport oar_rl\n\n" + source)
        written.append(path.resolve())
        return path

    yield make
    for path in written:
        loaded = LOADED.pop(str(path), None)
        for name in loaded.rules if loaded else ():
            if name in credits.CREDIT_MODES:
                credits.unregister_credit(name)


def _lines(err: str, prefix: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(prefix)]


# --------------------------------------------------------------------------------------------------
# 1. all-zero scores under reshape="weights": warned, by the rule's name
# --------------------------------------------------------------------------------------------------
def test_all_zero_weights_are_warned_by_name(tmp_path, tokenizer, dataset, rule):
    """Under 'weights' a zero is a weight of 0 (no gradient); under 'bilevel' it is GRPO's advantage.
    Nothing said so: a user's rule returning 0 for the rows it leaves alone trained on nothing."""
    rule("t-zero-weights", lambda m, b, **kw: torch.zeros(b.completion_mask.shape), reshape="weights")
    trainer = make_trainer(make_args(tmp_path, credit="t-zero-weights", max_steps=1), tokenizer, dataset)
    said = r"credit rule 't-zero-weights' \(reshape='weights'\) scored \d+ of \d+ rows 0 on every scored "
    with pytest.warns(UserWarning, match=said + r"token at step 1: .*no gradient"):
        trainer.train()


def test_a_weights_rule_with_no_silent_row_is_not_warned(tmp_path, tokenizer, dataset, rule, recwarn):
    rule("t-one-weights", lambda m, b, **kw: torch.ones(b.completion_mask.shape), reshape="weights")
    make_trainer(make_args(tmp_path, credit="t-one-weights", max_steps=1), tokenizer, dataset).train()
    assert not [w for w in recwarn if "t-one-weights" in str(w.message)]


# --------------------------------------------------------------------------------------------------
# 2. an outcome rule without standalone=False: said so, skipped by the study's recall
# --------------------------------------------------------------------------------------------------
GOLD_RULE = """
def reads_gold(model, batch, *, ctx):
    ctx.need("gold", "t-reads-gold")
    return batch.completion_mask.float()


oar_rl.register_credit("t-reads-gold", reads_gold, reshape="bilevel", options=lambda ctx: {"ctx": ctx})
"""


def _trajectories(model_dir, texts=("12+3=15 <answer>15</answer>", "4*2=8 <answer>8</answer>")):
    from oar_rl.analysis.attribute import given_trajectory, load_model

    model, tok = load_model(str(model_dir))
    return model, tok, [given_trajectory(tok, "1+1=", t, chat=False) for t in texts]


def test_an_outcome_rule_registered_as_standalone_is_named_and_skipped_by_the_recall(tiny_model_dir, rule):
    """`oar-rl study` trained every run, then its recall stopped on ScoringContext.need's training hint
    (the gold column); now the recall leaves the rule out, with the reason."""
    from oar_rl.analysis.recall import scores_per_probe
    from oar_rl.credit_modules import load_credit_module  # noqa: F401 (the module the rule comes from)

    def reads_gold(model, batch, *, ctx):
        ctx.need("gold", "t-reads-gold")
        return batch.completion_mask.float()

    rule("t-reads-gold", reads_gold, reshape="bilevel", options=lambda ctx: {"ctx": ctx})
    model, tok, trajs = _trajectories(tiny_model_dir)
    with pytest.raises(NotStandalone, match=r"credit rule 't-reads-gold' reads the rollouts' outcome .*"
                       r"register it with standalone=False"):  # fmt: skip
        scores_per_probe(model, tok, trajs, ["random", "t-reads-gold"], ["as-mean"],
                         model_free_probe="as-mean", seed=0)  # fmt: skip
    skipped: dict[str, str] = {}
    scores, _ = scores_per_probe(model, tok, trajs, ["random", "t-reads-gold"], ["lt-logits", "as-mean"],
                                 model_free_probe="as-mean", seed=0, skipped=skipped)  # fmt: skip
    assert set(skipped) == {"t-reads-gold"} and "standalone=False" in skipped["t-reads-gold"]
    assert "random" in scores and not any(k.startswith("t-reads-gold") for k in scores)


def test_attribute_gives_one_line_for_an_outcome_rule_and_names_a_standalone_false_one(
    tiny_model_dir, tmp_path, rule_file, capsys
):
    """`oar-rl attribute` printed a 38-line traceback for the first, "unknown" for the second."""
    path = rule_file(GOLD_RULE)
    argv = ["attribute", "--model", str(tiny_model_dir), "--prompt", "1+1=", "--completion",
            "2 <answer>2</answer>", "--credit-module", str(path), "--out", str(tmp_path / "a"),
            "--no-chat"]  # fmt: skip
    assert cli.main([*argv, "--credits", "t-reads-gold"]) == 1
    err = capsys.readouterr().err
    lines = _lines(err, "oar-rl attribute: error:")
    assert len(lines) == 1 and "Traceback" not in err
    assert "'t-reads-gold' reads the rollouts' outcome" in lines[0] and "standalone=False" in lines[0]
    with pytest.raises(NotStandalone):  # --debug: the exception itself, with its traceback
        cli.main(["--debug", *argv, "--credits", "t-reads-gold"])
    capsys.readouterr()
    assert cli.main([*argv, "--credits", "first-error"]) == 2
    err = capsys.readouterr().err
    assert "'first-error' is registered with standalone=False" in err and "oar-rl blame scores it" in err


# --------------------------------------------------------------------------------------------------
# 3. the gold column, checked before the model loads
# --------------------------------------------------------------------------------------------------
def test_a_missing_gold_column_is_one_line_before_the_model_loads(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    from oar_rl import trainer

    monkeypatch.setattr(trainer.OARTrainer, "__init__", lambda *a, **k: pytest.fail("the model loaded"))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(8)))
    argv = ["train", "--config", TINY, "--model", str(tiny_model_dir), "--out", str(tmp_path / "run"),
            "--dataset", str(data), "--credit", "first-error", "--gold_column", "nosuch"]  # fmt: skip
    assert cli.main(argv) == 2
    lines = _lines(capsys.readouterr().err, "oar-rl train:")
    assert len(lines) == 1
    assert "--gold_column 'nosuch'" in lines[0] and "its columns: prompt, answer" in lines[0]


# --------------------------------------------------------------------------------------------------
# 4. a rule's bad output: one line from the command (the check's message), traceback with --debug
# --------------------------------------------------------------------------------------------------
NAN_RULE = """
def nan_scores(model, batch, **kw):
    return torch.full(batch.completion_mask.shape, float("nan"))


oar_rl.register_credit("t-nan-scores", nan_scores, reshape="bilevel")
"""


def test_a_rules_bad_scores_stop_training_in_one_line(tiny_model_dir, tmp_path, rule_file, capsys):
    """A 25-60-line traceback with the check's message at its bottom before. (digit_reward: a reward with
    variance on a random model, so rows get an advantage and are scored.)"""
    path = rule_file(NAN_RULE)
    argv = ["train", "--config", TINY, "--model", str(tiny_model_dir), "--out", str(tmp_path / "run"),
            "--credit-module", str(path), "--credit", "t-nan-scores", "--max_steps", "1",
            "--reward_funcs", "conftest.digit_reward"]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    lines = _lines(err, "oar-rl train: error:")
    assert len(lines) == 1 and "Traceback" not in err
    said = r"credit rule 't-nan-scores' \(scorer nan_scores\): scores must be finite on the scored tokens; "
    assert re.search(said + r"found nan at row \d+, position \d+ .* \(--debug: the traceback\)$", lines[0])


# --------------------------------------------------------------------------------------------------
# 5. options giving a keyword the scorer does not take: named with the rule
# --------------------------------------------------------------------------------------------------
def _batch(tokenizer):
    from oar_rl.probes import prepare_batch

    p_ids, p_mask = pad_texts(tokenizer, ["1+1="], "left")
    c_ids, c_mask = pad_texts(tokenizer, ["2 <answer>2</answer>"], "right")
    return prepare_batch(None, p_ids, p_mask, c_ids, c_mask)


def test_options_with_a_keyword_the_scorer_lacks_name_the_rule(tokenizer, rule):
    """A raw `TypeError: got an unexpected keyword argument 'temprature'` before, no rule named."""

    def scorer(model, batch, *, temperature):
        return batch.completion_mask.float()

    mode = rule("t-typo-options", scorer, reshape="bilevel", options=lambda c: {"temprature": c.temperature})
    said = r"credit rule 't-typo-options': its options gave the keyword\(s\) temprature, which scorer "
    with pytest.raises(RuleError, match=said + r".*scorer\(model, batch, \*, temperature\) has no parameter "
                       r"for; it takes: temperature$"):  # fmt: skip
        credits.run_scorer(mode, None, _batch(tokenizer), ScoringContext())
    broken = rule("t-broken-options", scorer, reshape="bilevel", options=lambda c: {"x": 1 / 0})
    with pytest.raises(RuleError, match=r"credit rule 't-broken-options': its options\(ctx\) raised "
                       r"ZeroDivisionError"):  # fmt: skip
        credits.run_scorer(broken, None, _batch(tokenizer), ScoringContext())


def test_what_a_scorer_raises_is_named_with_the_rule(tokenizer, rule):
    mode = rule("t-raises", lambda m, b, **kw: b.no_such_field, reshape="bilevel")
    with pytest.raises(RuleError, match=r"credit rule 't-raises' \(scorer .*\) raised AttributeError: "):
        credits.run_scorer(mode, None, _batch(tokenizer), ScoringContext())


# --------------------------------------------------------------------------------------------------
# 6. a built-in name is never a user's rule's
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["none", "oar-g", "first-error"])
def test_a_built_in_name_cannot_be_taken_even_after_unregister(name):
    """Following the duplicate-name error's advice (unregister_credit) for 'none' made `train` print
    credit=grpo while it ran the user's rule."""
    with pytest.raises(ValueError, match="built in and cannot be removed"):
        credits.unregister_credit(name)
    with pytest.raises(ValueError, match=rf"credit rule name '{name}' is a built-in rule's"):
        credits.register_credit(name, lambda m, b, **kw: b.completion_mask.float(), reshape="weights")
    assert credits.CREDIT_MODES[name].modules[0].startswith("oar_rl.")  # still the built-in


# --------------------------------------------------------------------------------------------------
# 7. the shipped model on a local file: its own template, or a clear refusal
# --------------------------------------------------------------------------------------------------
def test_the_shipped_model_on_a_local_file_gets_its_own_template(tmp_path, monkeypatch, capsys):
    """The default answer-tag template wrapped the prompts in a chat the shipped model never saw: every
    completion clipped, reward 0, only a warning."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Mia has {i} apples.", "answer": str(i)}) + "\n"
                            for i in range(8)))  # fmt: skip
    seen = {}

    def stop(data_args, *a, **k):
        seen["template"] = data_args.template
        raise ValueError("stop here")

    monkeypatch.setattr(train, "load_train_dataset", stop)
    base = ["train", "--model", "default", "--dataset", str(data), "--use_cpu", "true", "--bf16", "false"]
    assert cli.main([*base, "--out", str(tmp_path / "a")]) == 2
    assert seen == {"template": "none"}
    capsys.readouterr()
    assert cli.main([*base, "--out", str(tmp_path / "b"), "--template", "answer-tag"]) == 2
    err = capsys.readouterr().err
    assert "--template answer-tag: the shipped word-problem model was trained on raw prompts" in err
    assert seen == {"template": "none"}  # refused before the data was loaded
