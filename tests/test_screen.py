"""The credit screen's engine (`oar_rl.study.screen`) and the project's plans (`experiments/credit_screen`,
`experiments/credit_long`): every arm is a valid OARConfig, every paired baseline exists and is GRPO at
the same step size, the protocols are the committed runs', the rule picks what it says on fake results,
and `--plan` finds a plan by module:ATTR or file."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import make_args
from experiments.credit_long.plan import CREDIT_LONG
from experiments.credit_screen.plan import ARM_BY_NAME, ARMS, CONTRASTS, CREDIT_SCREEN
from oar_rl.study.screen import contrasts, diagnostics, markdown, summarize, winners
from oar_rl.study.screen import protocol as plan_protocol


def protocol(kind, plan=CREDIT_SCREEN):
    return plan_protocol(kind, plan)


def test_every_arm_is_a_valid_config_paired_with_grpo_at_its_step_size(tmp_path):
    for arm in ARMS:
        over = {k: v for k, v in arm.overrides if k not in ("learning_rate", "steps_per_generation")}
        credit = "none" if arm.method == "grpo" else arm.method
        make_args(tmp_path, credit=credit, **over)  # OARConfig accepts every override
        if arm.baseline is None:
            assert arm.method == "grpo"
            continue
        base = ARM_BY_NAME[arm.baseline]
        assert base.method == "grpo" and base.baseline is None
        step = {k: v for k, v in arm.overrides if k in ("learning_rate", "steps_per_generation")}
        assert step == dict(base.overrides), arm.name  # the same learning rate and trust region
    assert len({a.name for a in ARMS}) == len(ARMS)
    assert protocol("screen")["split"] == "validation" and protocol("confirm")["split"] == "test"
    assert protocol("screen") != protocol("confirm")


def test_screen_protocol_is_the_committed_runs_and_confirm_curves_on_a_subsample():
    """A code change must not silently move the screen's protocol away from its committed run files; the
    confirmation's curve uses 150 x 2 test samples while its final accuracy uses all 500 x 4."""
    import json
    from pathlib import Path

    runs = sorted(Path(__file__).parents[1].glob("results/credit-screen/screen/runs/*.json"))
    assert runs, "the screen's committed run files are missing"
    assert json.loads(runs[0].read_text())["protocol"] == protocol("screen")
    conf = protocol("confirm")
    assert (conf["curve_problems"], conf["curve_samples"]) == (150, 2)
    assert (conf["test_problems"], conf["eval_samples"]) == (500, 4)
    assert "curve_problems" not in protocol("screen")


def _runs(accs: dict[str, list[float]]) -> dict[str, dict[int, dict]]:
    return {
        name: {2000 + i: {"final": {"sampled": a / 100}, "train_seconds": 1.0} for i, a in enumerate(v)}
        for name, v in accs.items()
    }


BASE = [80.0, 81.0, 82.0, 83.0, 84.0]


def test_decision_rule_breaks_ties_by_cost_not_by_order():
    accs = {a.name: list(BASE) for a in ARMS}
    accs["oar-g[negative]"] = [b + 2 for b in BASE]  # +2 every seed
    accs["first-error"] = [b + 1 for b in BASE]  # cost 2.5, listed before ...
    accs["oar-g[draws=4]"] = [b + 1 for b in BASE]  # ... this tie at cost 1.5: the cheaper wins
    arms = list(ARMS)
    assert arms.index(ARM_BY_NAME["first-error"]) < arms.index(ARM_BY_NAME["oar-g[draws=4]"])
    assert ARM_BY_NAME["oar-g[draws=4]"].cost < ARM_BY_NAME["first-error"].cost
    rows = summarize(_runs(accs), arms)
    by = {r["arm"]: r for r in rows}
    assert by["oar-g[negative]"]["paired"]["mean"] == pytest.approx(2.0)
    assert by["oar-g[negative]"]["paired"]["wins"] == 5
    assert by["first-error"]["paired"]["mean"] == pytest.approx(by["oar-g[draws=4]"]["paired"]["mean"])
    # by order it would be first-error
    assert winners(rows, CREDIT_SCREEN) == ["oar-g[negative]", "oar-g[draws=4]"]
    assert "| oar-g[negative] | 1 | 5 |" in markdown(rows, "t", "n")


def test_decision_rule_ties_are_ties_at_float_rounding_too():
    """Equal totals against different baselines give means that differ in the 15th digit: still a tie,
    which the cheaper arm wins; a seed level with its baseline is a tie, not a loss, in the table."""
    accs = {a.name: list(BASE) for a in ARMS}
    accs["oar-g[negative]"] = [b + 2 for b in BASE]
    accs["grpo[lr=2e-4]"] = [82.4, 83.6, 83.4, 81.0, 81.5]
    accs["first-error"] = [80.2, 81.7, 85.6, 82.9, 81.2]  # +3.6 points in all ...
    accs["oar-g[lr=2e-4]"] = [84.0, 87.0, 85.0, 81.8, 75.7]  # ... here too, with other float rounding
    rows = summarize(_runs(accs), list(ARMS))
    by = {r["arm"]: r for r in rows}
    a, b = by["first-error"]["paired"]["mean"], by["oar-g[lr=2e-4]"]["paired"]["mean"]
    assert a == pytest.approx(b, abs=1e-9) and a > b  # rounding apart: the costlier first-error ahead
    assert ARM_BY_NAME["oar-g[lr=2e-4]"].cost < ARM_BY_NAME["first-error"].cost
    assert winners(rows, CREDIT_SCREEN) == ["oar-g[negative]", "oar-g[lr=2e-4]"]
    accs["oar-p"] = [80.0, 82.0, 82.0, 83.0, 83.0]  # level with GRPO on seeds 2000, 2002 and 2003
    oar_p = summarize(_runs(accs), [ARM_BY_NAME["grpo"], ARM_BY_NAME["oar-p"]])[1]
    assert (oar_p["paired"]["wins"], oar_p["paired"]["ties"]) == (1, 3)
    assert "| grpo | 1/5 (3 tied) |" in markdown([oar_p], "t", "n")
    from oar_rl.study.stats import paired_difference

    noise = paired_difference({1: 0.1 + 0.2, 2: 0.5}, {1: 0.3, 2: 0.4})  # 5.6e-17 apart: level
    assert (noise["wins"], noise["ties"]) == (1, 1)


def test_runs_on_seeds_outside_the_plan_or_in_another_runs_file_are_refused(tmp_path):
    """A stray seed must not stand in for a missing one, nor a copied file count twice."""
    from oar_rl.study.runner import RunStore, StudyError
    from oar_rl.study.screen import load_runs

    store = RunStore(tmp_path / "screen" / "runs", protocol("screen"))
    rec = {"variant": "grpo", "final": {"sampled": 0.5}, "train_seconds": 1.0, "history": []}
    for seed in CREDIT_SCREEN.screen_seeds:
        store.put("grpo", seed, rec | {"seed": seed})
    assert sorted(load_runs(tmp_path, "screen", CREDIT_SCREEN)["grpo"]) == list(CREDIT_SCREEN.screen_seeds)
    first = tmp_path / "screen" / "runs" / RunStore.filename("grpo", CREDIT_SCREEN.screen_seeds[0])
    copy = first.with_name("grpo copy.json")
    copy.write_bytes(first.read_bytes())
    with pytest.raises(
        StudyError, match=r"grpo copy.json holds the run 'grpo/seed2000', whose file is grpo.seed2000"
    ):
        load_runs(tmp_path, "screen", CREDIT_SCREEN)
    copy.unlink()
    store.put("grpo", 7, rec | {"seed": 7})
    with pytest.raises(StudyError, match=r"'grpo/seed7' is on seed 7, not one of the plan's screen seeds"):
        load_runs(tmp_path, "screen", CREDIT_SCREEN)


def test_a_confirmation_is_blinded_until_every_arm_has_its_seeds(tmp_path):
    import json

    from oar_rl.study.runner import RunStore
    from oar_rl.study.screen import write_report

    (tmp_path / "screen").mkdir()
    (tmp_path / "screen" / "study.json").write_text(json.dumps({"winners": ["first-error", "oar-g"]}))
    store = RunStore(tmp_path / "confirm" / "runs", protocol("confirm"))
    seeds = CREDIT_SCREEN.confirm_seeds
    for i, seed in enumerate(seeds):
        for arm, acc in (("grpo", 0.5), ("first-error", 0.61), ("oar-g", 0.47)):
            if arm == "oar-g" and i == len(seeds) - 1:
                continue  # one run short
            rec = {"variant": arm, "seed": seed, "final": {"sampled": acc + 0.001 * i, "greedy": acc},
                   "train_seconds": 1.0, "history": []}  # fmt: skip
            store.put(arm, seed, rec)
    rec = write_report(tmp_path, "confirm", CREDIT_SCREEN)
    text = (tmp_path / "confirm.md").read_text()
    assert rec["blinded"] and rec["rows"] == [] and rec["landed"]["oar-g"] == list(seeds[:-1])
    assert "Running: 29 of 30 runs landed" in text and "| oar-g | 9/10 |" in text and "61" not in text
    assert not (tmp_path / "confirm.png").exists()  # no figure either (tests/test_screen_plot.py)
    last = {"variant": "oar-g", "seed": seeds[-1], "final": {"sampled": 0.5, "greedy": 0.5}}
    store.put("oar-g", seeds[-1], last | {"train_seconds": 1.0, "history": []})
    assert not write_report(tmp_path, "confirm", CREDIT_SCREEN).get("blinded")
    assert "| first-error | 10 | " in (tmp_path / "confirm.md").read_text()
    assert (tmp_path / "confirm.png").exists()


def test_decision_rule_pairs_each_arm_with_its_own_baseline():
    """oar-g[tr] is +2.5 above its own baseline (grpo[tr]) but 2.5 below GRPO; oar-g[lr=2e-4] is 1.5
    above GRPO but 1.5 below its own baseline: paired with GRPO instead, the winners would differ."""
    accs = {a.name: list(BASE) for a in ARMS}
    accs["oar-g[negative]"] = [b + 2 for b in BASE]
    accs["grpo[tr]"] = [b - 5 for b in BASE]
    accs["oar-g[tr]"] = [b - 2.5 for b in BASE]
    accs["grpo[lr=2e-4]"] = [b + 3 for b in BASE]
    accs["oar-g[lr=2e-4]"] = [b + 1.5 for b in BASE]
    rows = summarize(_runs(accs), list(ARMS))
    by = {r["arm"]: r for r in rows}
    assert by["oar-g[tr]"]["paired"]["mean"] == pytest.approx(2.5)
    assert by["oar-g[lr=2e-4]"]["paired"]["mean"] == pytest.approx(-1.5)
    assert winners(rows, CREDIT_SCREEN) == ["oar-g[tr]", "oar-g[negative]"]
    with_grpo = [replace(a, baseline="grpo") if a.baseline else a for a in ARMS]  # the wrong pairing
    assert winners(summarize(_runs(accs), with_grpo), CREDIT_SCREEN) == ["oar-g[negative]", "oar-g[lr=2e-4]"]


def test_decision_rule_refuses_an_incomplete_screen():
    accs = {a.name: list(BASE) for a in ARMS}
    del accs["oar-p"][-1]
    with pytest.raises(ValueError, match="not complete: oar-p"):
        winners(summarize(_runs(accs), list(ARMS)), CREDIT_SCREEN)


def test_contrasts_compare_gaps_to_each_arms_own_baseline():
    base = [80.0, 81.0, 82.0, 83.0, 84.0]
    accs = {a.name: list(base) for a in ARMS}
    accs["oar-g"] = [b - 1 for b in base]  # 1 below GRPO at 4e-4
    accs["grpo[lr=2e-4]"] = [b - 6 for b in base]
    accs["oar-g[lr=2e-4]"] = [b - 6.5 for b in base]  # 0.5 below GRPO at 2e-4: the gap shrank by 0.5
    accs["oar-g[before-answer]"] = [b - 3 + (i % 2) for i, b in enumerate(base)]
    by = {(r["arm"], r["versus"]): r["paired"] for r in contrasts(_runs(accs), CREDIT_SCREEN)}
    assert len(by) == len(CONTRASTS)
    assert by[("oar-g[lr=2e-4]", "oar-g")]["mean"] == pytest.approx(0.5)
    assert by[("oar-g", "oar-g[before-answer]")]["diffs"] == pytest.approx([2.0, 1.0, 2.0, 1.0, 2.0])
    assert by[("first-error", "oar-g")]["wins"] == 5
    del accs["oar-g[tr]"]
    assert ("oar-g[tr]", "oar-g") not in {
        (r["arm"], r["versus"]) for r in contrasts(_runs(accs), CREDIT_SCREEN)
    }
    assert all(a in ARM_BY_NAME and b in ARM_BY_NAME for a, b, _ in CONTRASTS)


def test_diagnostics_ratio_to_the_baseline_on_the_same_seed():
    def rec(norms, ess):
        return {"history": [{"grad_norm": n, "oar/ess_ratio": ess} for n in norms]}

    runs = {
        "grpo": {2000: rec([1.0, 3.0], 1.0), 2001: rec([4.0], 1.0)},
        "oar-g": {2000: rec([3.0, 5.0], 0.8), 2001: rec([2.0], 0.6)},
    }
    by = {r["arm"]: r for r in diagnostics(runs, [ARM_BY_NAME["grpo"], ARM_BY_NAME["oar-g"]])}
    assert by["grpo"]["grad_norm_ratio"] == pytest.approx(1.0)
    assert by["oar-g"]["grad_norm_ratio"] == pytest.approx((4.0 / 2.0 + 2.0 / 4.0) / 2)
    assert by["oar-g"]["oar/ess_ratio"] == pytest.approx(0.7)
    assert by["oar-g"]["oar/top10_mass"] is None


def test_confirmation_table_shows_greedy_accuracy_paired():
    runs = {
        "grpo": {100: {"final": {"sampled": 0.80, "greedy": 0.90}, "train_seconds": 1.0},
                 101: {"final": {"sampled": 0.82, "greedy": 0.92}, "train_seconds": 1.0}},
        "first-error": {100: {"final": {"sampled": 0.83, "greedy": 0.95}, "train_seconds": 2.0},
                        101: {"final": {"sampled": 0.84, "greedy": 0.93}, "train_seconds": 2.0}},
    }  # fmt: skip
    rows = summarize(runs, [ARM_BY_NAME["grpo"], ARM_BY_NAME["first-error"]])
    fe = rows[1]
    assert fe["paired"]["diffs"] == pytest.approx([3.0, 2.0])
    assert fe["paired_greedy"]["diffs"] == pytest.approx([5.0, 1.0])
    text = markdown(rows, "Credit confirm", "n")
    assert "| wins | greedy % (95% CI) | Δ greedy, paired | train s/run |" in text
    assert "| first-error | 2 | 83.5 (" in text and "| grpo | 2/2 | 94.0 (" in text
    assert "| stage |" in markdown(summarize(_runs({"grpo": [80.0, 81.0]}), [ARM_BY_NAME["grpo"]]), "t", "n")


def test_confirmation_arms_come_from_the_screens_recorded_winners(tmp_path):
    import json

    from oar_rl.study.screen import confirm_arms

    with pytest.raises(ValueError, match="does not exist"):
        confirm_arms(tmp_path, CREDIT_SCREEN)
    (tmp_path / "screen").mkdir()
    (tmp_path / "screen" / "study.json").write_text(json.dumps({"winners": None}))
    with pytest.raises(ValueError, match="names no winners yet"):
        confirm_arms(tmp_path, CREDIT_SCREEN)
    (tmp_path / "screen" / "study.json").write_text(
        json.dumps({"winners": ["oar-g[lr=2e-4]", "first-error"]})
    )
    names = [a.name for a in confirm_arms(tmp_path, CREDIT_SCREEN)]
    assert names == ["grpo[lr=2e-4]", "oar-g[lr=2e-4]", "grpo", "first-error"]  # each with its own baseline


def test_report_regenerates_the_committed_tables_from_their_run_files(tmp_path):
    """`report` on a copy of the committed run files (load_runs, summarize, the decision rule, contrasts,
    diagnostics, write_report, main) writes exactly the committed screen.md and confirm.md, and the
    figure each shows under its title (its image line aside, whether or not the committed .md has it
    yet; the figure's data: tests/test_committed_tables.py)."""
    import shutil
    from pathlib import Path

    from experiments.credit_screen.__main__ import main
    from oar_rl.study.screen_plot import image_line

    committed = Path(__file__).parents[1] / "results" / "credit-screen"
    for kind in ("screen", "confirm"):
        shutil.copytree(committed / kind / "runs", tmp_path / kind / "runs")
    assert main(["report", "--out", str(tmp_path)]) == 0
    for kind in ("screen", "confirm"):
        new, old = ((d / f"{kind}.md").read_text() for d in (tmp_path, committed))
        figure = image_line(kind) + "\n\n"
        assert new.splitlines()[2] == image_line(kind) and (tmp_path / f"{kind}.png").exists()
        assert new.replace(figure, "", 1) == old.replace(figure, "", 1), kind
    import json

    screen = json.loads((tmp_path / "screen" / "study.json").read_text())
    assert screen["winners"] == json.loads((committed / "screen" / "study.json").read_text())["winners"]


def test_the_long_regimes_protocol_is_pinned():
    """The long screen's protocol (results/credit-long/PREREGISTRATION.md): its task, its warm start's
    recipe, the short screen's recipe otherwise; a code change that moves it fails here first."""
    from oar_rl.study.config import protocol_hash

    plan = CREDIT_LONG
    d = protocol("screen", plan)
    assert (d["task"], d["warm_start_recipe"], d["learning_rate"], d["split"]) == (
        "wordproblems-long",
        "da20d80fd55c8835",
        4e-4,
        "validation",
    )
    short = protocol("screen")
    same = {k for k in short if k not in ("task", "lr_source", "screen_format", "test_problems")}
    assert {k: d[k] for k in same} == {k: short[k] for k in same}
    assert protocol_hash(d) == "f20b145301778d1f"
    decided = [a for a in plan.arms if a.stage in plan.decision_stages]
    assert plan.decision_stages == (1,)  # the pre-registered arms; stage 2 is the exploratory addendum
    assert [a.name for a in decided] == [
        "grpo",
        "oar-g",
        "first-error",
        "position",
        "oar-p-span",
        "entropy-80-20",
        "entropy",
        "random",
    ]
    assert all(a.baseline == "grpo" for a in decided[1:]) and plan.confirm_also == ("oar-g", "position")
    addendum = [a for a in plan.arms if a.stage == 2]
    assert all(dict(a.overrides)["learning_rate"] == 2e-4 for a in addendum)
    assert [a.baseline for a in addendum] == [None, "grpo[lr=2e-4]", "grpo[lr=2e-4]"]


def test_the_short_screens_protocol_hashes_are_pinned():
    """The plans moved out of the package (issue 34) without moving their protocols."""
    from oar_rl.study.config import protocol_hash

    assert protocol_hash(protocol("screen")) == "aa95afb326278762"
    assert protocol_hash(protocol("confirm")) == "2a515877fe5c12c6"
    assert protocol_hash(protocol("confirm", CREDIT_LONG)) == "5ea45901e27480ff"


def test_plan_is_found_by_module_attr_or_file_and_a_bad_one_is_named(tmp_path, capsys):
    from pathlib import Path

    from oar_rl.study.screen import main
    from oar_rl.study.screen_plan import load_plan

    root = Path(__file__).parents[1]
    assert load_plan("experiments.credit_long.plan:CREDIT_LONG") is CREDIT_LONG
    assert load_plan(str(root / "experiments" / "credit_long" / "plan.py")).name == "credit-long"
    for bad, says in [
        ("credit-long", "neither module:ATTR nor a .py file"),
        ("experiments.no_such:PLAN", "cannot import 'experiments.no_such'"),
        ("experiments.credit_long.plan:NOPE", "has nothing as NOPE, not a ScreenPlan"),
        ("experiments.credit_long.plan:LONG_ARMS", "has tuple as LONG_ARMS"),
        (str(tmp_path / "none.py"), "no such file"),
    ]:
        with pytest.raises(ValueError, match=f"--plan '.*': .*{says}|--plan '.*' is {says}"):
            load_plan(bad)
    with pytest.raises(SystemExit) as e:
        main(["report", "--plan", "credit-long", "--out", str(tmp_path)])
    assert e.value.code == 2 and "--plan 'credit-long' is neither module:ATTR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", "--out", str(tmp_path)])  # --plan is required: the package holds no plan


def test_a_bound_next_to_zero_shows_which_side_it_is_on():
    """'+0.0' hid whether a lower bound was above 0 (the pre-registered criterion); two decimals there."""
    from oar_rl.study.screen_report import fmt_ci, signed_text

    assert [signed_text(x) for x in (0.048, -0.03, 0.0, 0.05, 1.26, -2.04)] == [
        "+0.05", "-0.03", "+0.0", "+0.1", "+1.3", "-2.0"
    ]  # fmt: skip
    assert fmt_ci({"mean": 0.4, "low": 0.048, "high": 0.8}, signed=True) == "+0.4 (+0.05, +0.8)"
    assert fmt_ci({"mean": 99.3, "low": 99.0, "high": 99.6}) == "99.3 (99.0, 99.6)"
