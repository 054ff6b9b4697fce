"""Issue 48's plan: the pre-registered rate rule and compute multiplier (experiments/credit_why/rates.py)
on made-up run records, the confirmation's arms, and an arm's own prompts per step reaching training."""

from __future__ import annotations

import pytest

from experiments.credit_why import rates
from experiments.credit_why.plan import GRID, RATES, _lr, confirm_plan

WARM = {"sampled": 0.40, "greedy": 0.70}


def _run(sampled: float, greedy: float, search: float = 0.0) -> dict:
    hist = [{"loss": 0.0, "completions/mean_length": 100.0, "oar/search_tokens": 1.5 * search,
             "oar/search_continued_tokens": search} for _ in range(3)]  # fmt: skip
    return {"final": {"sampled": sampled, "greedy": greedy}, "train_seconds": 1.0, "history": hist}


def _grid(table: dict[str, dict[float, tuple[float, float]]], search: float = 0.0) -> dict:
    runs = {}
    for rule, by_rate in table.items():
        for rate, (s, g) in by_rate.items():
            runs[f"{rule}[lr={_lr(rate)}]"] = {seed: _run(s, g, search) for seed in RATES.screen_seeds}
    return runs


def test_each_rule_takes_its_best_eligible_rate_and_grpo_must_gain_ten_points():
    runs = _grid({
        # 2e-4: greedy −10, not eligible
        "grpo": {5e-5: (0.45, 0.71), 1e-4: (0.52, 0.685), 2e-4: (0.60, 0.60)},
        "first-error": {5e-5: (0.46, 0.70), 1e-4: (0.50, 0.70), 2e-4: (0.50, 0.70)},  # tie: the smaller rate
    }, search=12800.0)  # fmt: skip
    rec = rates.choose(runs, WARM)
    assert rec["chosen"] == {"grpo": 1e-4, "first-error": 1e-4}
    assert rec["grpo_criterion_met"] and rec["confirm"]  # +12 at 1e-4, greedy −1.5 (within 2)
    assert (
        rec["compute"]["ratio"] == pytest.approx(2.0) and rec["compute"]["prompts"] == 32
    )  # 12800/(100×128)
    assert rec["compute"]["computed_ratio"] == pytest.approx(2.5) and len(rec["compute"]["seeds"]) == 3
    runs["grpo[lr=1e-4]"] = {s: _run(0.48, 0.70) for s in RATES.screen_seeds}  # +8: below the criterion
    rec = rates.choose(runs, WARM)
    assert rec["chosen"]["grpo"] == 1e-4 and not rec["grpo_criterion_met"] and not rec["confirm"]
    assert "not met" in rates.markdown(rec) and "−" in rates.markdown(rec)


def test_the_compute_multiplier_reads_continuation_tokens_from_the_runs_that_record_them():
    """Amendments 1 and 2: steps without a search count 0; a run made before the field is left out; the
    prompts are 16 × the unrounded ratio (never fewer than GRPO's 16)."""
    runs = {s: _run(0.5, 0.7, 6400.0) for s in RATES.screen_seeds}  # ratio 1.5 -> 24 prompts
    runs[4000]["history"][1].pop("oar/search_continued_tokens")  # a step with no searched row
    for h in runs[4001]["history"]:  # made before the field existed
        h.pop("oar/search_continued_tokens")
    got = rates.multiplier(runs)
    assert got["seeds"] == [4000, 4002] and got["steps"] == 6
    assert got["ratio"] == pytest.approx((5 * 1.5 + 1.0) / 6) and got["prompts"] == round(16 * 8.5 / 6)
    assert rates.multiplier({4000: runs[4001]})["prompts"] is None
    assert rates.multiplier({s: _run(0.5, 0.7, 10.0) for s in (1, 2)})["prompts"] == 16


def test_the_committed_warm_start_has_what_the_analyses_read():
    import json
    from pathlib import Path

    warm = json.loads(
        (Path(__file__).resolve().parents[1] / "results/credit-why/warm_start.json").read_text()
    )
    for split, n in (("validation", 300), ("test", 500)):
        w = warm[split]
        assert {"sampled", "greedy", "curve", "per_problem"} <= set(w)
        assert len(w["per_problem"]["greedy"]) == len(w["per_problem"]["sampled"]) == n
        assert w["sampled"] == pytest.approx(sum(w["per_problem"]["sampled"]) / (4 * n))
        assert w["greedy"] == pytest.approx(sum(w["per_problem"]["greedy"]) / n)


def test_the_rule_refuses_an_incomplete_grid():
    runs = _grid({"grpo": {r: (0.5, 0.7) for r in GRID}, "first-error": {r: (0.5, 0.7) for r in GRID}})
    del runs["first-error[lr=2e-4]"][RATES.screen_seeds[0]]
    with pytest.raises(ValueError, match=r"first-error\[lr=2e-4\] has seeds"):
        rates.choose(runs, WARM)


def test_the_confirmations_arms_take_the_rates_the_plan_fixes():
    plan = confirm_plan(1e-4, 5e-5, 32)
    by = {a.name: dict(a.overrides) for a in plan.arms}
    assert (
        by["grpo"]["learning_rate"]
        == by["entropy"]["learning_rate"]
        == by["grpo-compute"]["learning_rate"]
        == 1e-4
    )
    for name in ("first-error", "lowest-prob", "random-departure", "save-prefix"):
        assert by[name]["learning_rate"] == 5e-5
    assert by["grpo-compute"]["prompts_per_step"] == 32 and "prompts_per_step" not in by["grpo"]
    assert all(a.baseline == "grpo" for a in plan.arms if a.name != "grpo")
    assert plan.confirm_seeds == tuple(range(400, 410)) and plan.eval["confirm"] == ("test", 500)


def test_an_arms_prompts_per_step_reaches_training(monkeypatch, tmp_path):
    """GRPO at first-error's compute: the arm's prompts_per_step wins over the study's (it was a duplicate
    keyword before)."""
    from oar_rl.study import runner, training
    from oar_rl.study.config import PRESETS, Variant

    seen = {}

    def fake_train_policy(*a, **kw):
        seen.update(kw)
        return None, [], 0.0

    monkeypatch.setattr(training, "train_policy", fake_train_policy)

    class Task:
        answer_pattern = None
        trainer_kwargs = None
        check = staticmethod(lambda t, g: True)
        reward = staticmethod(lambda *a, **k: [])

    class WS:
        path = tmp_path

    variant = Variant("grpo-compute", "grpo", (("prompts_per_step", 32), ("learning_rate", 1e-4)))
    out = runner.train_variant(Task, WS, PRESETS["full"], variant, 0, [], tmp_path, [], learning_rate=4e-4)
    assert seen["prompts_per_step"] == 32 and seen["num_generations"] == PRESETS["full"].num_generations
    assert out[3] == 1e-4 and callable(seen["trainer_kwargs"]["answer_check"])


def _confirm_runs(gap: dict[str, float], seeds=tuple(range(400, 410))) -> dict:
    """Made-up confirmation runs: arm accuracy 0.40 + gap[arm] + a seed effect shared by every arm."""
    import random

    runs = {}
    for arm, g in gap.items():
        for s in seeds:
            rng = random.Random(s * 7 + len(arm))
            acc = 0.40 + g + (s - 404) * 0.004 + rng.uniform(-0.002, 0.002)
            counts = [4 if i < round(acc * 500) else 0 for i in range(500)]
            prompts = 32 if arm == "grpo-compute" else 16
            runs.setdefault(arm, {})[s] = {
                "final": {"sampled": acc, "greedy": 0.7 + g, "per_problem": {"sampled": counts}},
                "curve": {str(k): acc for k in (5, 10, 15, 20, 25, 30)},
                "train_seconds": 100.0
                * (2.5 if arm in ("first-error", "random-departure", "save-prefix") else 1),
                "overrides": {"prompts_per_step": prompts} if arm == "grpo-compute" else {},
                "history": [{"loss": 0.0, "completions/mean_length": 100.0}],
            }
    return runs


def test_answers_apply_the_preregistered_rules_and_stay_blinded_until_complete():
    from experiments.credit_why import answers

    warm = {
        "sampled": 0.389,
        "greedy": 0.708,
        "curve": 0.39,
        "per_problem": {"greedy": [1] * 250 + [0] * 250, "sampled": [2] * 500},
    }
    gaps = {"grpo": 0.0, "grpo-compute": 0.02, "first-error": 0.06, "lowest-prob": 0.06,
            "random-departure": 0.0, "save-prefix": 0.01, "entropy": -0.30}  # fmt: skip
    runs = _confirm_runs(gaps)
    seeds = tuple(range(400, 410))
    part = {a: dict(list(r.items())[:9]) if a == "entropy" else r for a, r in runs.items()}
    rec = answers.answers(part, warm, seeds)
    assert rec["blinded"] and rec["landed"]["entropy"] == list(range(400, 409))
    assert "arms" not in rec and "Issue 48" in answers.markdown(rec, seeds)
    rec = answers.answers(runs, warm, seeds)
    assert rec["D1"] == {"first-error": True, "lowest-prob": True, "random-departure": False,
                         "save-prefix": False, "entropy": False}  # fmt: skip
    assert rec["D2"]["location"] and not rec["D3"]["distinguishable"]
    fe = rec["arms"]["first-error"]
    assert fe["vs_grpo"]["mean"] == pytest.approx(6.0, abs=0.2)
    assert fe["vs_grpo_adjusted"]["low"] < fe["vs_grpo"]["low"]  # the 99.5% interval is wider
    assert rec["arms"]["entropy"]["collapsed"] == 10 and rec["arms"]["grpo"]["collapsed"] == 0
    assert rec["arms"]["entropy"]["greedy_below"] == 10 and rec["arms"]["grpo"]["greedy_below"] == 0
    learned = rec["baselines_learned"]  # greedy 0.7 + gap; sampled: seed effect +0.2 on average, jitter ±0.2
    assert learned["grpo"]["greedy"]["mean"] == pytest.approx(-0.8)
    assert learned["grpo-compute"]["greedy"]["mean"] == pytest.approx(1.2)
    assert learned["grpo"]["sampled"]["mean"] == pytest.approx(100 * (0.40 + 0.002 - 0.389), abs=0.2)
    assert rec["arms"]["grpo-compute"]["tokens_ratio"] == pytest.approx(2.0)
    assert fe["seconds_ratio"] == pytest.approx(2.5)
    assert answers.aulc({"5": 0.5, "30": 0.5}, 0.5) == pytest.approx(50.0)
    assert answers.aulc({"30": 1.0}, 0.0) == pytest.approx(50.0)
    text = answers.markdown(rec, seeds)
    assert "**yes**" in text and "−" in text
    assert set(rec["contrasts"]) == {"save-prefix − first-error", "first-error − entropy"}
    assert rec["contrasts"]["first-error − entropy"]["mean"] == pytest.approx(36.0, abs=0.2)
    split = rec["arms"]["grpo"]["split_vs_warm_start"]  # every arm, grpo included, against the warm start
    assert split["warm_right"]["problems"] == 250 and split["warm_right"]["warm_start"] == pytest.approx(50.0)


def test_the_pages_warm_start_figures_are_the_committed_files():
    """docs/results/credit-why.md's table prints results/credit-why/warm_start.json's accuracies."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    warm = json.loads((root / "results/credit-why/warm_start.json").read_text())
    page = (root / "docs/results/credit-why.md").read_text()
    for split, label in (("validation", "validation (the grid)"), ("test", "test (the confirmation)")):
        row = next(line for line in page.splitlines() if line.strip().startswith(f"| {label} |"))
        assert f"{100 * warm[split]['sampled']:.1f}%" in row and f"{100 * warm[split]['greedy']:.1f}%" in row


WARM_TEST = {
    "sampled": 0.389,
    "greedy": 0.708,
    "curve": 0.39,
    "curve_sample": [150, 2],
    "per_problem": {"greedy": [1] * 250 + [0] * 250, "sampled": [2] * 500},
}


def test_the_answers_figure_draws_the_records_numbers_and_not_a_blinded_record(tmp_path):
    from experiments.credit_why import answers, figure

    seeds = tuple(range(400, 410))
    gaps = {"grpo": 0.0, "grpo-compute": 0.02, "first-error": 0.06, "lowest-prob": 0.05,
            "random-departure": 0.0, "save-prefix": 0.01, "entropy": -0.02}  # fmt: skip
    runs = _confirm_runs(gaps)
    for by_seed in runs.values():  # a curve that rises to the final accuracy
        for r in by_seed.values():
            r["curve"] = {str(k): 0.39 + (r["final"]["sampled"] - 0.39) * k / 30 for k in range(5, 31, 5)}
    rec = answers.answers(runs, WARM_TEST, seeds)
    c = rec["curves"]["first-error"]
    assert c["steps"] == [0, 5, 10, 15, 20, 25, 30] and c["mean"][0] == pytest.approx(39.0)
    assert c["low"][0] is None and c["mean"][-1] == pytest.approx(
        rec["arms"]["first-error"]["sampled"]["mean"]
    )
    data = figure.figure_data(rec, seeds)
    row = next(r for r in data["rows"] if r.get("label") == "first-error − grpo-compute")
    adj = rec["arms"]["first-error"]["vs_grpo-compute_adjusted"]
    assert (row["adj_low"], row["adj_high"]) == (adj["low"], adj["high"]) and row["mean"] == adj["mean"]
    assert len([r for r in data["rows"] if "label" in r]) == 2 * 5 + 2 + 2  # D1, D2, D3, two contrasts
    assert data["curve_sample"] == "150 problems × 2 samples" and data["warm"] == pytest.approx(39.0)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from oar_rl.study.screen_plot import forest

    fig, ax = plt.subplots()
    forest(ax, data["rows"])  # the left panel: the decision's 99.5% interval is drawn, not only the 95%
    drawn = [tuple(line.get_xdata()) for line in ax.get_lines()]
    plt.close(fig)
    assert (adj["low"], adj["high"]) in drawn and tuple(row["diffs"]) in drawn
    png = figure.draw(data, tmp_path / "answers.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(answers.png)" in answers.markdown(rec, seeds)
    part = {a: dict(list(r.items())[:9]) for a, r in runs.items()}
    with pytest.raises(ValueError, match="blinded"):
        figure.figure_data(answers.answers(part, WARM_TEST, seeds), seeds)
    del runs["grpo"][400]["curve"]["15"]
    with pytest.raises(ValueError, match=r"seeds \[400\] have no step 15"):
        answers.answers(runs, WARM_TEST, seeds)


def test_the_answers_command_writes_its_files_once_every_run_is_in(tmp_path, monkeypatch):
    import json

    from experiments.credit_why import __main__ as cli

    (tmp_path / "warm_start.json").write_text(json.dumps({"test": WARM_TEST}))
    (tmp_path / "rates.json").write_text(json.dumps(
        {"confirm": True, "chosen": {"grpo": 2e-4, "first-error": 1e-4}, "compute": {"prompts": 30}}
    ))  # fmt: skip
    gaps = dict.fromkeys(("grpo", "grpo-compute", "first-error", "lowest-prob", "random-departure",
                          "save-prefix", "entropy"), 0.0)  # fmt: skip
    runs = _confirm_runs(gaps)
    monkeypatch.setattr(cli, "load_runs", lambda out, kind, plan: runs)
    assert cli.main(["answers", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "answers.json").read_text())["blinded"] is False
    assert (tmp_path / "answers.png").exists() and "(answers.png)" in (tmp_path / "answers.md").read_text()
    del runs["entropy"][409]  # an incomplete set: the figure goes, the page shows progress only
    assert cli.main(["answers", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "answers.png").exists()
    assert json.loads((tmp_path / "answers.json").read_text())["blinded"] is True


def _utc(hhmm: str):
    from datetime import UTC, datetime

    return datetime.fromisoformat(f"2026-11-28T{hhmm}").replace(tzinfo=UTC)


def test_the_seconds_ratio_over_runs_that_shared_the_cpu_with_nothing_else(tmp_path):
    """shared_cpu: a run is shared when its [end − wall_seconds, end] overlaps a window of other work; a
    recorded run keeps its times (a later checkout's mtimes are not the runs' ends); answers reports the
    seconds ratio over the unshared runs beside the one over every run."""
    import json
    import os
    from datetime import UTC, datetime

    from experiments.credit_why import answers, shared_cpu
    from oar_rl.study.runner import RunStore

    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    for key, end in (("grpo.seed400", "2026-11-28T11:14"), ("grpo.seed401", "2026-11-28T11:20")):
        f = runs_dir / RunStore.filename(key.split(".seed")[0], int(key.split(".seed")[1]))
        f.write_text(json.dumps({"wall_seconds": 600.0, "key": key.replace(".seed", "/seed")}))
        t = datetime.fromisoformat(end).replace(tzinfo=UTC).timestamp()
        os.utime(f, (t, t))
    rec = shared_cpu.update(tmp_path)
    assert rec["runs"]["grpo.seed400"]["shared_with"] == []  # 11:04–11:14, before the 11:15 window
    assert rec["runs"]["grpo.seed401"]["shared_with"] == ["2026-11-28T11:15"]
    os.utime(runs_dir / "grpo.seed400.json")  # a checkout: now
    assert shared_cpu.update(tmp_path)["runs"]["grpo.seed400"]["end"].startswith("2026-11-28T11:14")
    # alone: seed400 11:04–11:14 has seed401 (11:10–11:20) beside it for 4 of its 10 minutes
    assert rec["runs"]["grpo.seed400"]["alone_seconds"] == pytest.approx(360.0)
    assert shared_cpu.same_load(rec) == set() and shared_cpu.same_load(None) is None
    for t in rec["runs"].values():
        t["alone_seconds"] = 0.0
    assert shared_cpu.same_load(rec) == {"grpo.seed400"}
    with pytest.raises(ValueError, match=r"lacks \['grpo.seed402'\]"):
        shared_cpu.same_load(rec, {"grpo.seed400", "grpo.seed402"})
    assert (
        shared_cpu.alone_seconds(
            (_utc("11:00"), _utc("11:10")),
            [(_utc("11:02"), _utc("11:04")), (_utc("11:03"), _utc("11:05")), (_utc("11:09"), _utc("11:20"))],
        )
        == 360.0
    )

    seeds = tuple(range(400, 410))
    runs = _confirm_runs(dict.fromkeys(("grpo", "grpo-compute", *answers.RULES), 0.0))
    runs["first-error"][401]["train_seconds"] = 1000.0  # inflated by other work
    clean = {f"{a}.seed{s}" for a in runs for s in seeds} - {"first-error.seed401", "grpo.seed409"}
    rec = answers.answers(runs, WARM_TEST, seeds, same_load=clean)
    fe = rec["arms"]["first-error"]
    assert fe["seconds_ratio"] == pytest.approx((9 * 250 + 1000) / 10 / 100)
    assert fe["seconds_same_load"] == {"ratio": pytest.approx(2.5), "runs": 9, "grpo_runs": 9}
    text = answers.markdown(rec, seeds)
    assert "| first-error | 325 | 3.25 | 2.50 (9 and 9) |" in text
    assert "seconds_same_load" not in answers.answers(runs, WARM_TEST, seeds)["arms"]["grpo"]


def test_tokens_read_the_runs_protocol_and_the_split_refuses_another_sample():
    from experiments.credit_why import answers

    run = {"protocol": {"prompts_per_step": 16, "num_generations": 4}, "overrides": {"prompts_per_step": 30},
           "history": [{"loss": 0.0, "completions/mean_length": 10.0, "oar/search_continued_tokens": 5.0},
                       {"loss": 0.0, "completions/mean_length": 20.0}, {"train_runtime": 1.0}]}  # fmt: skip
    assert answers.generated_tokens(run) == pytest.approx((10 * 30 * 4 + 5 + 20 * 30 * 4) / 2)
    run["overrides"] = {}
    assert answers.generated_tokens(run) == pytest.approx((10 * 16 * 4 + 5 + 20 * 16 * 4) / 2)
    runs = _confirm_runs({"grpo": 0.0}, seeds=(400, 401))["grpo"]
    runs[401]["final"]["per_problem"]["sampled"] = runs[401]["final"]["per_problem"]["sampled"][:499]
    with pytest.raises(ValueError, match="seed 401: 499 problems"):
        answers.split_gain(runs, {**WARM_TEST, "samples": 4}, [True] * 500)
    runs[401]["final"]["per_problem"]["sampled"].append(0)
    runs[401]["final"]["samples"] = 1000  # 2 samples per problem, not the warm start's 4
    with pytest.raises(ValueError, match="1000 samples"):
        answers.split_gain(runs, {**WARM_TEST, "samples": 4}, [True] * 500)


def test_the_committed_answers_figure_is_readable_at_the_pages_width():
    """Issue 56: every text of answers.png is at least `MIN_PX` px tall where the docs page shows it (the
    content column, `PAGE_PX` wide: a wider image is scaled down to it), and its axes name the samples
    they read: the differences the final sample (500 × 4), the curves theirs (150 × 2)."""
    import json
    import struct
    from pathlib import Path

    from matplotlib.text import Text

    from experiments.credit_why import figure

    root = Path(__file__).resolve().parents[1] / "results/credit-why"
    data = figure.figure_data(json.loads((root / "answers.json").read_text()), tuple(range(400, 410)))
    fig = figure.build(data)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    width = struct.unpack(">I", (root / "answers.png").read_bytes()[16:20])[0]
    scale = min(1.0, figure.PAGE_PX / width)
    smallest = min(t.get_fontsize() for t in texts) * figure.DPI / 72 * scale
    assert smallest >= figure.MIN_PX, f"the smallest label is {smallest:.1f} px at the page's width"
    labels = " ".join(t.get_text() for t in texts)
    assert "500 problems × 4 samples per run" in labels and "150 problems × 2 samples" in labels
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_shared_cpu_keys_a_run_by_its_arms_name_not_its_file_name(tmp_path):
    """An arm named with brackets ("grpo[lr=1e-4]") is written as grpo_lr_1e-4_.seedN.json; the record is
    keyed "grpo[lr=1e-4].seedN", the name `answers` looks it up by."""
    import json

    from experiments.credit_why import shared_cpu
    from oar_rl.study.runner import RunStore

    (tmp_path / "runs").mkdir()
    f = tmp_path / "runs" / RunStore.filename("grpo[lr=1e-4]", 402)
    f.write_text(json.dumps({"wall_seconds": 600.0, "key": "grpo[lr=1e-4]/seed402"}))
    assert f.name == "grpo_lr_1e-4_.seed402.json"
    assert set(shared_cpu.update(tmp_path)["runs"]) == {"grpo[lr=1e-4].seed402"}
