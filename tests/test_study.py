"""`oar-rl study`: the run plan; resume, protocol refusal, the learning-rate sweep, a user's credit module
joining a study and two processes sharing one, on instant fake runs (the statistics are in
test_study_stats.py; the real end-to-end run is in test_study_e2e.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import register_fake_task
from oar_rl import tasks
from oar_rl.study import cli as study_cli
from oar_rl.study import config, lr_frozen, runner
from oar_rl.study import report as study_report
from oar_rl.tasks import WarmStart

# --------------------------------------------------------------------------------------------------
# configuration and plan
# --------------------------------------------------------------------------------------------------


def test_methods_follow_the_trainer_and_ablations_share_main_runs(monkeypatch):
    from oar_rl import credits

    monkeypatch.setattr(credits, "CREDITS", (*credits.CREDITS, "new-mode"))
    assert config.all_methods()[0] == "grpo" and "new-mode" in config.all_methods()
    s = config.StudySettings(
        seeds=2, ablations=("tau", "probe"), probe="as-mean", methods=("grpo", "oar-g", "oar-p")
    )
    groups = s.variants()
    assert [v.name for v in groups["tau"]] == ["oar-g[tau=0]", "oar-g", "oar-g[tau=0.7]", "oar-g[tau=1]"]
    assert [v.name for v in groups["probe"]] == ["oar-p[probe=lt-logits]", "oar-p", "oar-p[probe=as-joint]"]
    assert dict(groups["tau"][0].overrides) == {"tau": 0.0}
    runs = s.runs()
    assert len(runs) == 2 * (3 + 3 + 2)  # the τ=0.4 and AS-Mean variants are the main runs, not retrained
    assert [seed for _, seed in runs[:8]] == [0] * 8  # seed-major


def test_bad_settings_name_the_valid_values():
    with pytest.raises(ValueError, match=r"method=.ppo. is not valid.*; choose one of grpo \(alias none\)"):
        config.StudySettings(methods=("ppo",))
    with pytest.raises(ValueError, match="must include grpo"):
        config.StudySettings(methods=("oar-g",))
    with pytest.raises(ValueError, match="valid ablations: tau, probe"):
        config.StudySettings(ablations=("beta",))
    with pytest.raises(ValueError, match="valid tasks: arithmetic"):
        tasks.get_task("nope")
    assert study_cli.main(["--out", "/tmp/unused", "--tune-lr", "--lr", "1e-4"]) == 2


def test_arithmetic_splits_are_disjoint():
    task = tasks.get_task("arithmetic")
    test = task.prompts("test", 300)
    val = task.prompts("validation", 200)
    assert len(test) == 300 and len(val) == 200
    assert not {r["prompt"] for r in test} & {r["prompt"] for r in val}
    assert task.prompts("test", 10) == test[:10]


# --------------------------------------------------------------------------------------------------
# resume, refusal, lr sweep: fake task and instant fake runs
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_study(monkeypatch, tmp_path):
    """A registered fake task; training and evaluation replaced by instant fakes that record calls."""
    calls: list[tuple[str, int, float]] = []
    state = {"interrupt_at": None, "best_lr": {}}

    register_fake_task(monkeypatch, "fake", tmp_path / "ws")

    def fake_train(
        task,
        ws,
        settings,
        variant,
        seed,
        train_rows,
        eval_rows,
        workdir,
        progress,
        *,
        learning_rate,
        curve=True,
        greedy=None,
        checkpoint_dir=None,
    ):
        if state["interrupt_at"] is not None and len(calls) == state["interrupt_at"]:
            raise KeyboardInterrupt
        calls.append((variant.name, seed, learning_rate))
        bonus = {"grpo": 0.0, "oar-g": 0.05, "oar-p": 0.02}.get(variant.method, 0.0) + 0.01 * seed
        best = math.log10(state["best_lr"].get(variant.method, 1e-4))
        final = 0.3 + bonus - abs(math.log10(learning_rate) - best) * 0.1  # best at lr 1e-4 (or best_lr)
        steps = (
            range(settings.eval_every, settings.steps + 1, settings.eval_every) if curve else [settings.steps]
        )
        history = [{"step": s, "reward": 0.1, "oar/ess_ratio": 0.8} for s in range(1, settings.steps + 1)]
        return {
            "variant": variant.name, "method": variant.method, "credit": variant.credit,
            "overrides": dict(variant.overrides), "seed": seed, "learning_rate": learning_rate,
            "curve": {str(s): final * s / settings.steps for s in steps},
            "final": {"sampled": final, "step": settings.steps,
                      # greedy: measured with the curve or when asked; it falls at high rates
                      "greedy": (0.5 - (0.1 if learning_rate >= 1e-3 else 0.0))
                      if (curve if greedy is None else greedy) else None},
            "train_seconds": 1.0, "eval_seconds": 0.1, "wall_seconds": 1.1, "history": history,
        }  # fmt: skip

    monkeypatch.setattr(study_cli, "train_and_evaluate", fake_train)
    monkeypatch.setattr(runner, "train_and_evaluate", fake_train)
    monkeypatch.setattr(runner, "_accuracy", lambda *a, greedy, **k: 0.25 if not greedy else 0.5)
    # PNGs are drawn for real in test_study_e2e.py; here they would only cost seconds per invocation.
    from oar_rl.analysis import plots

    for name in ("plot_accuracy", "plot_differences", "plot_recall"):
        monkeypatch.setattr(study_report, name, lambda *a, **k: None)
    monkeypatch.setattr(plots, "plot_curves", lambda *a, **k: {})
    return calls, state


def _args(out: Path, *extra: str) -> list[str]:
    base = ["--task", "fake", "--out", str(out), "--credits", "grpo,oar-g", "--seeds", "2", "--steps", "4"]
    return [*base, "--recall", "0", "--full", *extra]


def test_interrupt_resume_extend_and_refuse_a_changed_protocol(tmp_path, fake_study, capsys):
    calls, state = fake_study
    out = tmp_path / "out"
    state["interrupt_at"] = 3
    assert study_cli.main(_args(out)) == 130
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "grpo.seed0.json",
        "grpo.seed1.json",
        "oar-g.seed0.json",
    ]
    state["interrupt_at"] = None
    assert study_cli.main(_args(out)) == 0
    assert calls[3:] == [("oar-g", 1, 5e-5)]  # only the missing run
    study = json.loads((out / "study.json").read_text())
    assert study["complete"] and sorted(study["runs"]) == [
        "grpo/seed0",
        "grpo/seed1",
        "oar-g/seed0",
        "oar-g/seed1",
    ]
    diff = study["groups"]["main"]["oar-g"]["diff_to_grpo"]
    assert diff["diffs"] == pytest.approx([0.05, 0.05]) and diff["wins"] == 2
    assert study["groups"]["main"]["oar-g"]["credit_metrics"]["oar/ess_ratio"]["mean"] == pytest.approx(0.8)
    assert "task default" in study["learning_rate"]["source"]
    assert study["wall"]["this_invocation_seconds"] > 0 and (out / "report.html").exists()

    # A rerun trains nothing; a third seed and the τ ablation train only what is new.
    assert study_cli.main(_args(out)) == 0 and len(calls) == 4
    assert study_cli.main([*_args(out), "--seeds", "1"]) == 0 and len(calls) == 4  # a smaller scope
    narrowed = json.loads((out / "study.json").read_text())
    assert sorted(narrowed["runs"]) == ["grpo/seed0", "oar-g/seed0"]
    assert narrowed["runs_outside_scope"] == ["grpo/seed1", "oar-g/seed1"]  # reported, not hidden
    assert study_cli.main([*_args(out), "--seeds", "3", "--ablations", "tau"]) == 0
    new = calls[4:]
    assert ("grpo", 2, 5e-5) in new and ("oar-g[tau=0]", 0, 5e-5) in new and ("oar-g", 0, 5e-5) not in new
    assert len(new) == 2 + 3 * 3  # seed 2 of grpo/oar-g, plus τ ∈ {0, 0.7, 1} for 3 seeds

    # A changed protocol is refused with a diff, and nothing runs.
    capsys.readouterr()
    n = len(calls)
    assert study_cli.main([*_args(out), "--steps", "6"]) == 2
    err = capsys.readouterr().err
    assert "different configuration" in err and "steps: 4 -> 6" in err and "--fresh" in err
    assert study_cli.main([*_args(out), "--lr", "1e-4"]) == 2
    assert "learning_rate: 5e-05 -> 0.0001" in capsys.readouterr().err
    assert study_cli.main([*_args(out), "--scored-tokens", "before-answer"]) == 2
    assert "scored_tokens: 'reasoning' -> '<absent>'" in capsys.readouterr().err
    assert len(calls) == n
    # a stored run trained at another rate than the study's for its method (the name does not say) is
    # refused, not reused (a new --tune-lr sweep can move one method's rate; the protocol omits it)
    run = out / "runs" / "oar-g.seed0.json"
    rec = json.loads(run.read_text())
    run.write_text(json.dumps({**rec, "learning_rate": 0.002}))  # the protocol block says otherwise
    assert study_cli.main(_args(out)) == 2
    assert "its protocol block is not the study protocol with the run's own" in capsys.readouterr().err
    study_lr = rec["protocol"]["learning_rate"]  # a run file as a run at 0.002 writes it (issue 56)
    block = {**rec["protocol"], "learning_rate": 0.002}
    changes = {"learning_rate": {"study": study_lr, "run": 0.002}}
    run.write_text(json.dumps(rec | {"learning_rate": 0.002, "protocol": block, "protocol_changes": changes}))
    assert study_cli.main(_args(out)) == 2
    assert "oar-g.seed0.json is not the run this study asks for" in capsys.readouterr().err
    assert len(calls) == n
    assert study_cli.main([*_args(out), "--steps", "6", "--fresh"]) == 0  # --fresh starts clean


def test_scored_tokens_is_protocol_and_studies_before_it_stay_readable():
    """The scored set changes results, so it is part of the protocol; the v2 study (made before the key
    existed, every token before the answer span) reads as scored_tokens="before-answer"."""
    from oar_rl.config import SCORED_TOKENS

    assert config.SCORED_TOKENS == SCORED_TOKENS
    v2 = json.loads((Path(__file__).parents[1] / "results/study-wordproblems-v2/study.json").read_text())
    assert "scored_tokens" not in v2["protocol"]
    legacy = config.StudySettings(scored_tokens="before-answer").protocol()
    assert "scored_tokens" not in legacy
    assert config.StudySettings().protocol()["scored_tokens"] == "reasoning"
    with pytest.raises(ValueError, match="choose one of reasoning, before-answer"):
        config.StudySettings(scored_tokens="answer")


def test_runner_trains_with_the_protocols_scored_set(monkeypatch, tmp_path):
    """train_and_evaluate hands the protocol's scored_tokens to the trainer (an arm's override wins)."""
    from oar_rl.study import training

    seen: list[dict] = []

    def fake_policy(*a, **kw):
        seen.append(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(training, "train_policy", fake_policy)
    task = tasks.get_task("arithmetic")
    for s, over, want in (
        (config.StudySettings(), (), "reasoning"),
        (config.StudySettings(scored_tokens="before-answer"), (), "before-answer"),
        (config.StudySettings(), (("scored_tokens", "before-answer"),), "before-answer"),
    ):
        with pytest.raises(RuntimeError, match="stop here"):
            runner.train_and_evaluate(
                task, WarmStart(object(), object(), tmp_path, "h", {}), s, config.Variant("v", "oar-g", over),
                0, [{"prompt": "p", "answer": "1"}], [], tmp_path / "w", None, learning_rate=1e-4,
            )  # fmt: skip
        assert seen[-1]["scored_tokens"] == want


def test_tune_lr_chooses_on_validation_then_freezes(tmp_path, fake_study, capsys):
    calls, _ = fake_study
    out = tmp_path / "out"
    assert study_cli.main([*_args(out), "--tune-lr", "--lr-grid", "1e-5,1e-4,1e-3", "--tune-seeds", "2"]) == 0
    sweep = [c for c in calls if c[0].startswith("grpo-lr")]
    assert {c[2] for c in sweep} == {1e-5, 1e-4, 1e-3} and {c[1] for c in sweep} == {1000, 1001}
    study = json.loads((out / "study.json").read_text())
    lr = study["learning_rate"]
    assert lr["value"] == 1e-4 and "tuned on the validation split" in lr["source"]
    assert lr["tuning"]["chosen"] == 1e-4 and "validation" in lr["tuning"]["rule"]
    # every method is swept with the same grid and seeds, and trains at its own choice
    assert {(c[0], c[2]) for c in calls if c[0].startswith("oar-g-lr")} == {
        ("oar-g-lr1e-05", 1e-5), ("oar-g-lr0.0001", 1e-4), ("oar-g-lr0.001", 1e-3)
    }  # fmt: skip
    assert (
        lr["tuning"]["chosen_per_method"] == {"grpo": 1e-4, "oar-g": 1e-4} and lr["tuning"]["at_edge"] == []
    )
    assert {c[2] for c in calls if "-lr" not in c[0]} == {1e-4}
    assert "grpo_lr" not in study["groups"]  # every method's own choice is GRPO's: no second group
    # Later invocations reuse the frozen choice; a different --lr is refused.
    n = len(calls)
    assert study_cli.main([*_args(out), "--tune-seeds", "2"]) == 0 and len(calls) == n
    assert json.loads((out / "study.json").read_text())["learning_rate"]["value"] == 1e-4
    assert study_cli.main([*_args(out), "--tune-seeds", "2", "--lr", "5e-5"]) == 2
    assert "frozen" in capsys.readouterr().err
    # a method the sweep did not cover is refused, not silently trained at GRPO's rate
    assert study_cli.main([*_args(out), "--tune-seeds", "2", "--credits", "grpo,oar-g,oar-p"]) == 2
    assert "no learning rate was chosen for oar-p" in capsys.readouterr().err


def test_tune_lr_with_a_greedy_tolerance_skips_rates_that_break_greedy(tmp_path, fake_study, capsys):
    """--greedy-tolerance: the sweep measures greedy (the warm start's on the same validation problems
    once), and a rate whose mean greedy falls beyond the tolerance is not chosen even when it samples best."""
    _, state = fake_study
    state["best_lr"] = {"grpo": 1e-3, "oar-g": 1e-3}  # the sampled rule alone would take 1e-3
    out = tmp_path / "out"
    sweep = [*_args(out), "--tune-lr", "--lr-grid", "1e-5,1e-4,1e-3", "--tune-seeds", "1"]
    assert study_cli.main([*sweep, "--greedy-tolerance", "2"]) == 0
    tuning = json.loads((out / "lr_tuning.json").read_text())
    assert tuning["chosen_per_method"] == {"grpo": 1e-4, "oar-g": 1e-4}
    assert tuning["protocol"]["greedy_tolerance"] == 2.0 and tuning["warm_start_greedy"] == 0.5
    assert tuning["results"]["grpo"]["0.001"]["greedy_mean"] == pytest.approx(0.4)
    assert "at most 2 points below the warm start's (50.0%)" in tuning["rule"]
    assert json.loads((out / "lr_warm_start.json").read_text())["greedy"] == 0.5
    # a warm start measured under another recipe is measured again, never read back
    stale = json.loads((out / "lr_warm_start.json").read_text())
    (out / "lr_warm_start.json").write_text(json.dumps({**stale, "greedy": 0.9, "recipe_hash": "other"}))
    assert study_cli.main([*sweep, "--greedy-tolerance", "2"]) == 0
    assert json.loads((out / "lr_warm_start.json").read_text())["greedy"] == 0.5
    assert study_cli.main(sweep) == 2  # the sweep without the tolerance: another protocol, refused here
    # the same sweep without the tolerance has another protocol: refused in this directory, and in a fresh
    # one it chooses the rate that breaks greedy (studies before the tolerance keep their rule)
    out2 = tmp_path / "out2"
    sweep2 = [*_args(out2), "--tune-lr", "--lr-grid", "1e-5,1e-4,1e-3", "--tune-seeds", "1"]
    assert study_cli.main(sweep2) == 0
    tuning2 = json.loads((out2 / "lr_tuning.json").read_text())
    assert tuning2["chosen_per_method"] == {"grpo": 1e-3, "oar-g": 1e-3}
    assert (
        "greedy_tolerance" not in tuning2["protocol"]
        and "greedy_mean" not in tuning2["results"]["grpo"]["0.001"]
    )
    # a tolerance no rate meets stops the study with every rate's figures
    state["best_lr"] = {}
    out3 = tmp_path / "out3"
    assert study_cli.main([*_args(out3), "--tune-lr", "--lr-grid", "1e-3,3e-3", "--tune-seeds", "1",
                           "--greedy-tolerance", "1"]) == 2  # fmt: skip
    assert (
        "no learning rate of the grid keeps greedy validation accuracy within 1 points"
        in capsys.readouterr().err
    )


def test_per_method_learning_rates_and_grpo_lr_group(tmp_path, fake_study):
    """A method whose own best rate differs from GRPO's trains at it in "main", and at GRPO's in "grpo_lr"."""
    calls, state = fake_study
    state["best_lr"] = {"oar-g": 1e-3}
    out = tmp_path / "out"
    assert (
        study_cli.main([*_args(out), "--tune-lr", "--lr-grid", "1e-5,1e-4,1e-3", "--seeds", "2,oar-g=1"]) == 0
    )
    study = json.loads((out / "study.json").read_text())
    assert study["learning_rate"]["per_method"] == {"grpo": 1e-4, "oar-g": 1e-3}
    assert study["learning_rate"]["tuning"]["at_edge"] == ["oar-g"]  # 1e-3 is the grid's top: said
    trained = {(c[0], c[1], c[2]) for c in calls if "-lr" not in c[0]}
    assert trained == {("grpo", 0, 1e-4), ("grpo", 1, 1e-4), ("oar-g", 0, 1e-3), ("oar-g[lr=grpo]", 0, 1e-4)}
    assert sorted(study["groups"]) == ["grpo_lr", "main"]
    assert sorted(study["groups"]["grpo_lr"]) == ["grpo", "oar-g[lr=grpo]"]
    assert study["groups"]["main"]["oar-g"]["seeds"] == [0]  # --seeds 2,oar-g=1


@pytest.fixture
def own_rule(tmp_path):
    """A credit module in tmp_path registering 't-own-study' (unloaded afterwards); returns its path and a
    `reload()` that loads the file's current text again (what a new `oar-rl study` process does)."""
    from oar_rl import credits
    from oar_rl.credit_modules import LOADED

    src = tmp_path / "t_own_study_rule.py"
    src.write_text(
        "from oar_rl import register_credit\n"
        "register_credit('t-own-study', lambda m, b, **kw: b.completion_mask.float(), reshape='weights')\n"
    )

    def reload() -> None:
        if "t-own-study" in credits.CREDIT_MODES:
            credits.unregister_credit("t-own-study")
        LOADED.pop(str(src.resolve()), None)

    yield src, reload
    reload()


def test_a_users_rule_joins_a_study_reusing_its_runs_and_a_changed_module_is_refused(
    tmp_path, fake_study, own_rule, capsys
):
    """A rule from --credit-module added to a finished study (same --out) trains only its own runs; GRPO's
    are reused (before: the module was in the protocol every run shares, so the study was refused with a
    diff). The module's code is recorded on the rule's runs, and a changed module refuses them."""
    calls, _ = fake_study
    src, reload = own_rule
    out = tmp_path / "out"
    plain = [*_args(out), "--credits", "grpo"]
    assert study_cli.main(plain) == 0 and [c[0] for c in calls] == ["grpo", "grpo"]
    grpo = (out / "runs" / "grpo.seed0.json").read_text()
    with_rule = [*_args(out), "--credits", "grpo,t-own-study", "--credit-module", str(src)]
    assert study_cli.main(with_rule) == 0, capsys.readouterr().err
    assert [c[0] for c in calls[2:]] == ["t-own-study", "t-own-study"]  # GRPO's runs reused
    assert (out / "runs" / "grpo.seed0.json").read_text() == grpo
    import hashlib

    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    run = json.loads((out / "runs" / "t-own-study.seed0.json").read_text())
    assert run["credit_module"] == {"module": str(src), "sha256": digest}
    assert "credit_modules" not in run["protocol"]
    assert run["protocol_hash"] == json.loads(grpo)["protocol_hash"]
    study = json.loads((out / "study.json").read_text())
    assert study["complete"] and study["credit_modules"] == [
        {"module": str(src), "sha256": digest, "rules": ["t-own-study"]}
    ]
    assert study_cli.main(with_rule) == 0 and len(calls) == 4  # a rerun reuses the rule's runs too
    # the rule's code changed: its runs are refused (never reused), nothing trains
    src.write_text(src.read_text() + "# changed\n")
    reload()
    capsys.readouterr()
    assert study_cli.main(with_rule) == 2 and len(calls) == 4
    err = capsys.readouterr().err
    assert "t-own-study.seed0.json is a run of 't-own-study' made by --credit-module" in err
    assert f"sha256 {digest[:12]}" in err and "the rule's code changed" in err
    assert study_cli.main(plain) == 0 and len(calls) == 4  # a scope without the rule is not affected
    # deleting the rule's runs retrains them with the new code
    for p in (out / "runs").glob("t-own-study.*.json"):
        p.unlink()
    assert study_cli.main(with_rule) == 0 and [c[0] for c in calls[4:]] == ["t-own-study", "t-own-study"]
    new = hashlib.sha256(src.read_bytes()).hexdigest()
    assert json.loads((out / "runs" / "t-own-study.seed1.json").read_text())["credit_module"]["sha256"] == new


def test_a_users_rule_in_the_lr_sweep_records_its_module(tmp_path, fake_study, own_rule, capsys):
    """--tune-lr with a rule of --credit-module: its sweep runs and lr_tuning.json record the module; a
    changed module's rate is not reused for it."""
    calls, _ = fake_study
    src, reload = own_rule
    out = tmp_path / "out"
    args = [*_args(out), "--credits", "grpo,t-own-study", "--credit-module", str(src)]
    assert study_cli.main([*args, "--tune-lr", "--lr-grid", "1e-5,1e-4"]) == 0
    import hashlib

    record = {"module": str(src), "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
    tuning = json.loads((out / "lr_tuning.json").read_text())
    assert tuning["credit_modules"] == {"t-own-study": record} and "credit_modules" not in tuning["protocol"]
    swept = json.loads((out / "lr" / "t-own-study-lr1e-05.seed1000.json").read_text())
    assert swept["credit_module"] == record
    assert "credit_module" not in json.loads((out / "lr" / "grpo-lr1e-05.seed1000.json").read_text())
    src.write_text(src.read_text() + "# changed\n")
    reload()
    settings = study_cli.settings_from_args(study_cli.build_parser().parse_args(args))
    with pytest.raises(runner.StudyError, match=r"rate of 't-own-study' in lr_tuning\.json was chosen"):
        lr_frozen.method_lrs(settings, tuning)
    n = len(calls)
    assert study_cli.main(args) == 2 and len(calls) == n


def test_two_processes_share_one_study(tmp_path, fake_study):
    """Claim files split the runs: a run claimed by a live process is left to it; a dead one's is taken."""
    import os

    calls, _ = fake_study
    out = tmp_path / "out"
    claims = out / ".claims" / "runs"
    claims.mkdir(parents=True)
    (claims / "grpo.seed1.json.claim").write_text(json.dumps({"pid": 2**22 + 7, "host": os.uname().nodename}))
    assert study_cli.main(_args(out)) == 0  # the dead process's claim is taken over
    assert sorted(c[:2] for c in calls) == [("grpo", 0), ("grpo", 1), ("oar-g", 0), ("oar-g", 1)]
    assert not any(claims.iterdir())


def test_a_small_custom_study_starts_at_once_and_a_large_plan_asks_first(tmp_path, fake_study, capsys):
    """Issue 34: a plan estimated under 30 CPU-minutes starts without a flag; a larger custom one prints
    its plan and estimate and starts only with --yes; the full protocol asks for --full and is the only
    plan the message calls the full protocol. Nothing trains while a plan is refused."""
    from oar_rl.study import plan

    calls, _ = fake_study
    small = [a for a in _args(tmp_path / "small") if a != "--full"]
    assert study_cli.main(small) == 0 and len(calls) == 4
    err = capsys.readouterr().err
    assert "customised" in err and "not started" not in err

    big = ["--task", "fake", "--out", str(tmp_path / "big"), "--credits", "grpo,oar-p", "--seeds", "3",
           "--recall", "0"]  # fmt: skip
    estimate = plan.estimate_seconds(study_cli.settings_from_args(study_cli.build_parser().parse_args(big)))
    assert estimate["total"] > plan.START_AT_ONCE_SECONDS  # 6 runs of the full budget with OAR-P
    assert study_cli.main(big) == 2 and len(calls) == 4
    err = capsys.readouterr().err
    assert f"about {plan.duration(estimate['total'])} of one CPU core" in err and "--yes" in err
    assert "full protocol" not in err and " ".join(big) + " --yes" in err
    assert study_cli.main([*big, "--yes"]) == 0 and len(calls) == 4 + 6

    assert study_cli.main(["--out", str(tmp_path / "full")]) == 2 and len(calls) == 10
    err = capsys.readouterr().err
    assert "plan (the full protocol," in err and "this is the full protocol" in err and "--full" in err
    assert "about 4.2 h of one CPU core" in err  # oar_rl.study.plan's figures for the full protocol


def test_a_task_with_its_own_measured_cost_is_estimated_with_it(tmp_path):
    """The pretrained regime's plan is estimated from its own bench figures (GRPO's seconds per trained
    completion, other methods by the testbed's ratios to GRPO; its evaluation seconds per sample), at the
    threads they were measured at; the testbed keeps its figures."""
    from oar_rl.study import plan
    from oar_rl.study.config import PRESETS

    s = PRESETS["pretrained"]
    train = 20 * 8 * 8 * 1.7
    assert plan.run_seconds(s, "grpo") == pytest.approx(train + (150 * 3 + 2 * 50 * 2) * 0.6 + 5)
    ratio = plan.TRAIN_SECONDS_PER_COMPLETION["oar-g"] / plan.TRAIN_SECONDS_PER_COMPLETION["grpo"]
    assert plan.run_seconds(s, "oar-g") - plan.run_seconds(s, "grpo") == pytest.approx(train * (ratio - 1))
    lines = "\n".join(plan.plan_lines(s, preset="pretrained", out=tmp_path))
    assert "at 2 torch threads" in lines and "wordproblems-smollm2's measured figures" in lines
    full = "\n".join(plan.plan_lines(PRESETS["full"], preset="full", out=tmp_path))
    assert "at one torch thread" in full and "figures of a 2-core CPU" in full
    # hours of CPU: the preset asks before it starts
    assert "--yes" in plan.refusal(s, preset="pretrained", tune_lr=True, full=False, yes=False, command="")
