"""Credit rules in training and from the user's own file: the issue-33 rules two steps through
`OARTrainer`, a rule from examples/credit_rules/ through `OARConfig`, `oar-rl study` and `oar-rl blame`
(`--credit-module`), and the errors a bad rule gets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from conftest import make_args, make_trainer
from oar_rl import credits
from oar_rl.config import OARConfig
from oar_rl.credit_modules import LOADED, load_credit_module, specs_in_argv
from oar_rl.credits import register_credit, unregister_credit
from oar_rl.reshape import token_advantages
from oar_rl.tiny import tiny_qwen2
from test_credit_rules import serial_span_oar_p
from test_trainer import capture, params

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


@pytest.fixture
def rule():
    names: list[str] = []

    def make(name, scorer, **kw):
        names.append(name)
        return register_credit(name, scorer, **kw)

    yield make
    for n in names:
        if n in credits.CREDIT_MODES:
            unregister_credit(n)


def _moved(trainer, before) -> None:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    after = params(trainer.model)
    assert all(not torch.equal(v, after[k]) for k, v in before.items()), "a parameter did not change"


KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")


@pytest.mark.parametrize("credit", ["position", "oar-p-span"])
def test_two_steps_reshape_like_the_reference(tmp_path, tokenizer, dataset, credit):
    """position and oar-p-span train two steps; each batch's token advantages are Eq. 14-17 of a slow
    per-row reference of the scores (the reasoning tokens are every token here: no answer format)."""
    from oar_rl.importance.span import reasoning_steps

    trainer = make_trainer(make_args(tmp_path, credit=credit, probe="lt-logits"), tokenizer, dataset)
    before, records = params(trainer.model), capture(trainer)
    trainer.train()
    _moved(trainer, before)
    checked = 0
    for rec in records:
        out, seq_adv = rec["out"], rec["seq_adv"]
        p_ids, p_mask, c_ids, c_mask = (out[k] for k in KEYS)
        rows = (seq_adv != 0) & c_mask.bool().any(1)
        if credit == "position":  # the token's 1-based index
            ref = torch.arange(1, c_ids.shape[1] + 1).float().expand_as(c_ids) * c_mask
        else:
            steps = reasoning_steps(tokenizer, c_ids, c_mask.bool())
            pad = trainer.model.config.pad_token_id
            # a plain model with the old policy's weights (a deep copy's forward can be accelerate's
            # wrapper of the live model)
            policy = tiny_qwen2(len(tokenizer), seed=0)
            policy.load_state_dict(rec["policy"].state_dict())
            ref = serial_span_oar_p(
                policy.eval(), p_ids, p_mask, c_ids, c_mask, "lt-logits", c_mask.bool(), steps, mask_id=pad
            ).float()
        expected = torch.zeros_like(out["advantages"])
        expected[rows], _ = token_advantages(seq_adv[rows], ref[rows], c_mask[rows])
        torch.testing.assert_close(out["advantages"], expected, rtol=1e-4, atol=1e-5)
        active = rows & (c_mask.sum(1) > 1)
        if active.any():  # the credit is really redistributed
            checked += 1
            assert not torch.allclose(out["advantages"][active], (seq_adv[:, None] * c_mask)[active])
    assert checked


def test_entropy_80_20_is_trls_top_entropy_quantile(tmp_path, tokenizer, dataset, monkeypatch):
    """GRPO's (B,) advantages untouched; TRL's own entropy mask at 0.2 does the work."""
    from trl import GRPOTrainer

    calls = []
    real = GRPOTrainer.get_high_entropy_mask

    def spy(self, entropies, mask, threshold):
        calls.append(threshold)
        return real(self, entropies, mask, threshold)

    monkeypatch.setattr(GRPOTrainer, "get_high_entropy_mask", spy)
    args = make_args(tmp_path, credit="entropy-80-20")
    assert args.top_entropy_quantile == 0.2
    trainer = make_trainer(args, tokenizer, dataset)
    before, records = params(trainer.model), capture(trainer)
    trainer.train()
    _moved(trainer, before)
    for rec in records:
        assert torch.equal(rec["out"]["advantages"], rec["seq_adv"])  # exactly TRL's (B,) tensor
    assert calls and all(t == pytest.approx(0.8) for t in calls)
    with pytest.raises(ValueError, match=r"credit=.entropy-80-20. sets top_entropy_quantile=0\.2, but "):
        make_args(tmp_path, credit="entropy-80-20", top_entropy_quantile=0.5)


def test_a_weights_rule_needs_no_trainer_edit(tmp_path, tokenizer, dataset, rule):
    """reshape='weights': the scores are the weights, A_t = A_i · w_t, on a rule registered in the test."""

    def halves(model, batch, **kw):
        assert model is None and {"settings", "batch_size", "temperature", "tokenizer"} <= set(kw)
        t = torch.arange(batch.completion_mask.shape[1], device=batch.completion_mask.device)
        return torch.where(t % 2 == 0, 2.0, 0.5).expand(batch.completion_mask.shape).float()

    rule("t-halves", halves, reshape="weights")
    trainer = make_trainer(make_args(tmp_path, credit="t-halves"), tokenizer, dataset)
    before, records = params(trainer.model), capture(trainer)
    trainer.train()
    _moved(trainer, before)
    for rec in records:
        out, seq_adv = rec["out"], rec["seq_adv"]
        mask = out["completion_mask"].bool()
        w = torch.where(torch.arange(mask.shape[1]) % 2 == 0, 2.0, 0.5) * mask
        torch.testing.assert_close(out["advantages"], seq_adv[:, None] * w)


def test_bad_scores_stop_training_naming_the_rule(tmp_path, tokenizer, dataset, rule):
    rule("t-nan", lambda m, b, **kw: torch.full(b.completion_mask.shape, float("nan")), reshape="bilevel")
    trainer = make_trainer(make_args(tmp_path, credit="t-nan"), tokenizer, dataset)
    with pytest.raises(
        ValueError, match=r"credit rule .t-nan.*must be finite on the scored tokens; found nan"
    ):
        trainer.train()


def test_a_scorer_that_keeps_its_graph_gets_no_gradient_through_the_advantages(
    tmp_path, tokenizer, dataset, rule
):
    """A rule that runs the policy without no_grad: its scores are detached before they become advantages
    (before, the graph reached TRL's loss: a wrong gradient, and with two micro-batches per generation
    batch a second backward through a freed graph)."""
    from oar_rl.model_parts import body_hidden

    def hidden_norm(model, batch, **kw):
        h = body_hidden(model, batch.attention_mask, input_ids=batch.input_ids)[:, batch.prompt_len :]
        out = h.norm(dim=-1).float()
        assert out.requires_grad  # the premise: the scorer hands back a graph
        return out

    rule("t-hnorm", hidden_norm, reshape="weights", needs_model=True)
    args = make_args(tmp_path, credit="t-hnorm", steps_per_generation=2, gradient_accumulation_steps=2)
    trainer = make_trainer(args, tokenizer, dataset)
    records = capture(trainer)
    trainer.train()  # raised "Trying to backward through the graph a second time" before
    assert records and all(not r["out"]["advantages"].requires_grad for r in records)


def _batch(mask):
    from types import SimpleNamespace

    return SimpleNamespace(completion_mask=torch.as_tensor(mask, dtype=torch.bool))


def test_check_scores_rounding_signs_and_unread_tokens(rule):
    valid = [[True, True, True, False]]
    scored = torch.tensor([[True, True, False, False]])
    uniform = rule("t-u", lambda m, b, **kw: None, reshape="uniform")
    # rounding below zero is clamped (it reached rescale_sum/ess_ratio as a negative before)
    out = credits.check_scores(uniform, torch.tensor([[-1e-7, 2.0, 5.0, 9.0]]), _batch(valid), scored)
    assert out.tolist() == [[0.0, 2.0, 5.0, 0.0]]
    # 'bilevel' keeps them (Eq. 14 clamps), so the built-in rules score bit for bit as before
    bilevel = rule("t-b", lambda m, b, **kw: None, reshape="bilevel")
    out = credits.check_scores(bilevel, torch.tensor([[-1e-7, 2.0, 5.0, 9.0]]), _batch(valid), scored)
    assert torch.equal(out, torch.tensor([[-1e-7, 2.0, 5.0, 0.0]]))
    # a value never read may be non-finite (it becomes 0); on a scored token it is an error
    out = credits.check_scores(uniform, torch.tensor([[1.0, 2.0, float("nan"), 0.0]]), _batch(valid), scored)
    assert out.tolist() == [[1.0, 2.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match=r"t-u.*finite on the scored tokens; found nan at row 0, position 1"):
        credits.check_scores(uniform, torch.tensor([[1.0, float("nan"), 0.0, 0.0]]), _batch(valid), scored)
    # 'weights' takes the scores as they are: one large score does not widen the tolerance
    weights = rule("t-w", lambda m, b, **kw: None, reshape="weights")
    with pytest.raises(ValueError, match=r"t-w.*needs non-negative scores.*found -0\.5"):
        credits.check_scores(weights, torch.tensor([[1e6, -0.5, 0.0, 0.0]]), _batch(valid), scored)
    # 'entropy' (Eq. 6): a negative score would turn the bonus into a penalty
    entropy = rule("t-e", lambda m, b, **kw: None, reshape="entropy")
    with pytest.raises(ValueError, match=r"t-e.*reshape='entropy' needs non-negative scores"):
        credits.check_scores(entropy, torch.tensor([[1.0, -1.0, 0.0, 0.0]]), _batch(valid))
    # float32 entropies of peaked distributions with logits near 50 come out at about -3.8e-6: kept
    peaked = torch.tensor([[1.0, -3.8e-6, 0.0, 0.0]])
    assert torch.equal(credits.check_scores(entropy, peaked, _batch(valid)), peaked)
    graph = torch.tensor([[1.0, 2.0, 3.0, 4.0]], requires_grad=True) * 2
    assert not credits.check_scores(uniform, graph, _batch(valid), scored).requires_grad
    with pytest.raises(ValueError, match=r"probe=True does not go with reshape='entropy'"):
        register_credit("t-probe-entropy", lambda m, b, **kw: None, reshape="entropy", probe=True)
    from oar_rl.reshape import entropy_shaped_advantages

    with pytest.raises(ValueError, match=r"entropies must be >= 0 on valid tokens.*found -10\.0"):
        entropy_shaped_advantages(torch.tensor([1.0]), torch.tensor([[0.5, -10.0]]), torch.ones(1, 2))
    entropy_shaped_advantages(torch.tensor([1.0]), torch.tensor([[0.5, -3.8e-6]]), torch.ones(1, 2))


def test_a_noisy_grail_rule_gets_the_generators_of_the_rows_it_scores(tmp_path, tokenizer, dataset, rule):
    """GRAIL scores the selected rollouts only; a noisy rule gets their generators, in row order (before:
    every row's, so rows and generators did not pair)."""
    seen: list[list[torch.Generator]] = []

    def noisy(model, batch, generator, **kw):
        assert len(generator) == batch.completion_mask.shape[0]
        seen.append(list(generator))
        return torch.stack([torch.rand(batch.completion_mask.shape[1], generator=g) for g in generator])

    rule("t-noisy-grail", noisy, reshape="grail", needs_model=True, noisy=True,
         options=lambda c: {"generator": c.generator})  # fmt: skip
    pattern = "([a-z])"  # the random policy writes no answer format: the last lowercase letter is the span
    args = make_args(tmp_path, credit="t-noisy-grail", answer_pattern=pattern)
    trainer = make_trainer(args, tokenizer, dataset)
    drawn: list[list[torch.Generator]] = []
    make_generators = trainer._credit_generators

    def spy(rows, n):
        drawn.append(make_generators(rows, n))
        return drawn[-1]

    trainer._credit_generators = spy
    trainer.train()
    assert seen and len(seen) == len(drawn)
    for got, all_rows in zip(seen, drawn, strict=True):
        ids = [id(g) for g in all_rows]
        where = [ids.index(id(g)) for g in got]
        assert where == sorted(where)  # a subsequence, in order
    assert any(len(got) < len(all_rows) for got, all_rows in zip(seen, drawn, strict=True))


@pytest.mark.parametrize("shape", ["(C,)", "(1, C)"])
def test_a_grail_rule_s_scores_are_checked_before_they_fill_the_batch(
    tmp_path, tokenizer, dataset, rule, shape
):
    """reshape='grail' scores only the rollouts it selects, into a (B, C) buffer: a (C,) or (1, C) output
    was broadcast over the rows there, unchecked (now: the rule's name and the expected shape)."""

    def flat(model, batch, **kw):
        c = batch.completion_mask.shape[1]
        return torch.ones(c) if shape == "(C,)" else torch.ones(1, c)

    rule("t-flat-grail", flat, reshape="grail")
    args = make_args(tmp_path, credit="t-flat-grail", answer_pattern="([a-z])")
    trainer = make_trainer(args, tokenizer, dataset)
    with pytest.raises(
        ValueError, match=r"credit rule 't-flat-grail'.*scores have shape .*expected \(B, C\)"
    ):
        trainer.train()


# ---------------------------------------------------------------------------------------------------
# --credit-module


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


def test_example_rule_runs_in_study_and_blame(tmp_path, capsys):
    """The guide's example file through `oar-rl study` (tiny: 1 seed, 2 steps) and `oar-rl blame`."""
    from oar_rl.analysis import blame
    from oar_rl.study import cli as study_cli

    out = tmp_path / "study"
    args = ["--tiny", "--methods", "grpo,last-tokens", "--seeds", "1", "--recall", "0", "--out", str(out),
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
    argv = ["--prompts", "4", "--samples", "4", "--signals", "position,random,last-tokens", "--out", str(out),
            "--credit-module", str(EXAMPLE)]  # fmt: skip
    assert blame.main(argv) == 0
    result = json.loads((out / "blame.json").read_text())
    assert set(result["signals"]) == {"position", "random", "last-tokens"} and result["rows"] >= 1
    assert result["credit_modules"] == [{"module": str(EXAMPLE), "sha256": digest}]
    assert "last-tokens − position" in result["paired"]


def test_a_users_probe_rule_is_scored_under_every_probe_in_the_recall(rule, monkeypatch):
    """`scores_per_probe` runs every rule registered with probe=True under each probe (named
    '<rule>/<probe>'), read from the registry when called (before: a fixed (oar-g, oar-p), so a user's
    probe rule was scored under the model-free probe alone, named as if it read none)."""
    from oar_rl.analysis import recall
    from oar_rl.probes import PROBES

    rule("t-probed", lambda m, b, probe, **kw: b.completion_mask.float(), reshape="bilevel", probe=True)
    rule("t-plain", lambda m, b, **kw: b.completion_mask.float(), reshape="bilevel")
    mask = torch.ones(2, 3, dtype=torch.bool)
    asked: list[tuple[str, list[str]]] = []

    def fake_scores(model, tok, trajs, methods, *, probe, **kw):
        asked.append((probe, list(methods)))
        return {m: torch.rand(2, 3) for m in methods}, mask

    monkeypatch.setattr(recall, "method_scores", fake_scores)
    scores, _ = recall.scores_per_probe(None, None, [], ["oar-g", "t-probed", "t-plain"], PROBES,
                                        model_free_probe="as-mean", seed=0)  # fmt: skip
    assert {"t-probed", "oar-g"} <= set(recall.probe_methods()) and "t-plain" not in recall.probe_methods()
    assert {f"t-probed/{p}" for p in PROBES} <= set(scores) and "t-probed" not in scores
    assert "t-plain" in scores and not any(k.startswith("t-plain/") for k in scores)
    assert asked == [(p, ["oar-g", "t-probed"] + (["t-plain"] if p == "as-mean" else [])) for p in PROBES]


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
            "--max-prompts", "8", "--max-new-tokens", "4", "--methods", "last-tokens",
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
    argv = ["--task", "fake-recall", "--methods", "last-tokens", "--credit-module", str(EXAMPLE),
            "--out", str(out)]  # fmt: skip
    assert study_recall.main(argv) == 0 and "last-tokens" in seen["methods"]
    written = json.loads((out / "recall.json").read_text())
    assert written["credit_modules"] == [{"module": str(EXAMPLE), "sha256": digest}]


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


def test_standalone_false_rules_are_refused_by_compute_importance_and_run_by_blame(rule):
    """`standalone=False`: compute_importance's callers (attribute, oracle, recall) give no gold answers
    or answer check; blame builds the trainer's context and runs every rule (first-error by default)."""
    from oar_rl.analysis.blame import DEFAULT_SIGNALS, check_signal

    rule("t-trainer-only", lambda m, b, **kw: b.completion_mask.float(), reshape="weights", standalone=False)
    assert "t-trainer-only" not in credits.SCORED_CREDITS and "first-error" in DEFAULT_SIGNALS
    check_signal("t-trainer-only")
    ids = torch.ones(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"kind='t-trainer-only' is not a known importance kind"):
        credits.compute_importance("t-trainer-only", None, ids, ids, ids, ids)
