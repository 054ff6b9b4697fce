"""The committed result tables regenerate, to their printed digits, from the committed run files with
today's statistics code (`scipy.stats`: t-intervals, paired tests): the screen's and the confirmation's
Markdown tables text for text, and the v2 study's aggregates number for number."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCREEN = ROOT / "results" / "credit-screen"
V2 = ROOT / "results" / "study-wordproblems-v2"


@pytest.mark.parametrize("kind", ["screen", "confirm"])
def test_credit_screen_tables_regenerate_from_the_run_files(tmp_path, kind, monkeypatch):
    """The .md text for text (its figure's image line aside: the committed .md gains it when it is next
    regenerated), twice over (deterministic); the figure's PNG bytes vary with matplotlib and fonts, so
    what it plots is compared instead: each arm's row, in the table's order, with the committed table's
    paired difference and interval and one dot per seed."""
    from experiments.credit_screen.plan import CREDIT_SCREEN
    from oar_rl.study import screen_plot
    from oar_rl.study.screen import write_report
    from oar_rl.study.screen_report import fmt_ci

    for part in ("screen", "confirm"):
        shutil.copytree(SCREEN / part / "runs", tmp_path / part / "runs")
    shutil.copy(SCREEN / "screen" / "study.json", tmp_path / "screen" / "study.json")  # the winners
    drawn: list[dict] = []
    monkeypatch.setattr(screen_plot, "draw", lambda data, path: drawn.append(data) or path)
    figure = screen_plot.image_line(kind) + "\n\n"
    committed = (SCREEN / f"{kind}.md").read_text()
    texts = []
    for _ in range(2):
        write_report(tmp_path, kind, CREDIT_SCREEN)
        texts.append((tmp_path / f"{kind}.md").read_text())
    assert texts[0] == texts[1] and figure in texts[0]
    assert texts[0].replace(figure, "", 1) == committed.replace(figure, "", 1)
    assert drawn[0] == drawn[1]
    table = [[c.strip() for c in line.strip("|").split("|")] for line in committed.split("\n\n## ")[0]
             .splitlines() if line.startswith("| ")]  # fmt: skip
    head, body = table[0], table[1:]
    delta, seeds = head.index("Δ vs baseline, paired (95% CI)"), head.index("seeds")
    arms = [r for r in drawn[0]["rows"] if "arm" in r]
    assert [r["arm"] for r in arms] == [c[0] for c in body]
    for r, cells in zip(arms, body, strict=True):
        assert fmt_ci(r, signed=True) == cells[delta], r["arm"]  # the plotted mean and interval
        assert len(r["diffs"]) in (0, int(cells[seeds])), r["arm"]  # a baseline's row has no dots
        assert (len(r["diffs"]) == 0) == (r["baseline"] is None), r["arm"]


def _close(new, old, path: str = "") -> None:
    """`new` equals the committed `old` to float rounding (keys the new code adds are allowed)."""
    if isinstance(old, dict):
        missing = set(old) - set(new)
        assert not missing, f"{path}: lost {sorted(missing)}"
        for k, v in old.items():
            _close(new[k], v, f"{path}.{k}")
    elif isinstance(old, list):
        assert len(new) == len(old), path
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            _close(a, b, f"{path}[{i}]")
    elif isinstance(old, float):
        assert new == pytest.approx(old, rel=1e-12, abs=1e-15), path
    else:
        assert new == old, path


def test_v2_study_aggregates_regenerate_from_the_run_files():
    """Means, t-intervals, paired differences (and their MDE) of every variant of the v2 study, from
    its runs/, equal its committed study.json; the tables page is generated from that file."""
    from oar_rl.study.report import aggregate

    study = json.loads((V2 / "study.json").read_text())
    runs = {}
    for path in sorted((V2 / "runs").glob("*.json")):
        rec = json.loads(path.read_text())
        runs[rec["key"]] = rec
    groups = {g: list(res) for g, res in study["groups"].items()}
    in_scope = {k: r for k, r in runs.items() if k in study["runs"]}
    assert len(in_scope) == len(study["runs"]) == 60
    _close(aggregate(groups, in_scope), study["groups"], "groups")


def test_run_files_record_their_machine_outside_the_protocol_and_old_ones_still_verify():
    """Issue 34: a run's machine is descriptive. The v2 study's run files (made before it was recorded)
    verify under their pinned protocol hash and the report says their machine was not recorded; a record
    with a machine verifies under the same hash."""
    import torch

    from oar_rl.machine import REPRODUCIBILITY, machine_info
    from oar_rl.study.config import protocol_hash
    from oar_rl.study.report import _machines
    from oar_rl.study.runner import RunStore, _check_same

    study = json.loads((V2 / "study.json").read_text())
    assert protocol_hash(study["protocol"]) == study["protocol_hash"] == "a57749050a59f8c8"
    runs = RunStore(V2 / "runs", study["protocol"]).check_all()
    assert len(runs) == 60 and not any("machine" in r for r in runs.values())
    note = _machines({"runs": runs})
    assert "not recorded (made before run files recorded their machine) (60 runs)" in note
    info = machine_info()
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["torch_threads"] == torch.get_num_threads() and info["versions"]["trl"]
    rec = {**runs["oar-g/seed3"], "machine": info}
    _check_same(V2 / "runs" / "oar-g.seed3.json", rec, study["protocol"])  # no error: not protocol
    note = _machines({"runs": {"a": rec, "b": rec}})
    assert f"({info['cpu_capability']})" in note and "(2 runs)" in note
    assert "86.9%" in REPRODUCIBILITY and "grpo.seed3 and random.seed3" in REPRODUCIBILITY
    assert "no run reproduces, GRPO's included" in REPRODUCIBILITY and "33.3%" in REPRODUCIBILITY


def test_the_lr_note_points_at_a_page_that_has_the_section():
    """The untuned study's learning-rate source (shown in its report) points at docs/history.md's section,
    not at a README section that moved."""
    from oar_rl.tasks import get_task

    note = get_task("wordproblems").learning_rate_note
    assert "README" not in note and "docs/history.md, 'Why RL barely moved the first warm start'" in note
    assert "## Why RL barely moved the first warm start" in (ROOT / "docs" / "history.md").read_text()


# --------------------------------------------------------------------------------------------------
# the leaderboard (issue 34)
# --------------------------------------------------------------------------------------------------


def test_the_committed_leaderboard_is_the_regenerated_one():
    from experiments.leaderboard import leaderboard

    assert (ROOT / leaderboard.PAGE).read_text() == leaderboard.page(ROOT), (
        "docs/results/leaderboard.md is out of date: run `python -m experiments.leaderboard`"
    )
    assert leaderboard.main(["--root", str(ROOT), "--check"]) == 0


def test_the_leaderboard_fits_marks_its_scored_sets_and_prints_minus_signs():
    """Issue 47: a compact summary (rule × regime: Δ and evidence), the details per regime below it; a
    figure of the v2 study's scored set (before-answer) marked; `−`, never ASCII "-", before a number."""
    from experiments.leaderboard import leaderboard

    text = (ROOT / leaderboard.PAGE).read_text()
    summary = text[text.index("<table>") : text.index("</table>")]
    assert summary.count("<th colspan='2'>") == 4 and "## wordproblems-long at 4e-4: details" in text
    assert "## wordproblems-long at chosen rates: details" in text  # issue 48's confirmation
    assert "## wordproblems-smollm2: details" in text  # the pretrained regime's, blinded while it runs
    assert "<td>+1.0 (+0.2, +1.8)†</td><td>v2 study, 10 seeds</td>" in summary  # entropy, before-answer
    assert "<td>−3.5 (−4.8, −2.1)</td><td>confirmed, 10 seeds</td>" in summary  # oar-g, reasoning tokens
    assert "**†**: scored set `before-answer`" in text
    cells = re.findall(r"<td>(.*?)</td>", text)
    assert cells and not [c for c in cells if re.search(r"(?<![\w.])-\d", c)]
    assert leaderboard.minus("oar-g[lr=2e-4] -1.1 (-2.0, +0.3)") == "oar-g[lr=2e-4] −1.1 (−2.0, +0.3)"


def test_leaderboard_figures_are_the_confirmed_and_recorded_ones():
    """Spot checks against the committed tables: the confirmation's first-error and OAR-G, the v2 study's
    entropy, the blame page's OAR-G weights, the testbed's recall and the bench's step ratio."""
    from experiments.leaderboard.leaderboard import (
        REGIMES,
        accuracy_cells,
        blame_cells,
        cost_cell,
        recall_cells,
    )

    short = REGIMES[0]
    assert accuracy_cells(ROOT, short, "first-error")[:3] == [
        "+0.3 (-0.9, +1.6)",
        "10",
        "confirmation, test split",
    ]
    assert accuracy_cells(ROOT, short, "oar-g")[0] == "-3.5 (-4.8, -2.1)"  # confirm.md
    assert accuracy_cells(ROOT, short, "entropy")[:2] == ["+1.0 (+0.2, +1.8)", "10"]  # tables.md, v2 study
    assert blame_cells(ROOT, short, "oar-g") == ["0.96 vs 2.85", "-1.89 (-1.98, -1.80)"]  # blame.md
    assert recall_cells(ROOT, short, "oar-g")[0] == "0.30 (0.28, 0.31)"
    assert recall_cells(ROOT, short, "random")[1] == "n/a"  # a control has no difference to a control
    assert recall_cells(ROOT, short, "first-error") == ["n/a", "n/a"]
    assert cost_cell(ROOT, short, "oar-p") == "5.16× [4.44–5.87]" and cost_cell(ROOT, short, "grail") == "n/a"


def _run(folder: Path, variant: str, seed: int, acc: float, secs: float = 10.0, protocol: str = "p1") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rec = {"variant": variant, "method": variant, "seed": seed, "overrides": {}, "protocol_hash": protocol,
           "final": {"sampled": acc}, "train_seconds": secs}  # fmt: skip
    (folder / f"{variant}.seed{seed}.json").write_text(json.dumps(rec))


def test_leaderboard_shows_screen_only_rules_and_adds_a_regime_when_its_runs_land(tmp_path):
    """A rule found only in a screen says so with its seed count; a confirmation still running is
    blinded (the rule's row comes from its screen, with the confirmation's progress); a regime without
    run files is named below the table, and gets its own column group once its run files exist."""
    from experiments.leaderboard import leaderboard as lb

    short = lb.Regime("short", "test", confirmed=(lb.Source("c", "confirmation", "x.md"),),
                      screens=(lb.Source("s", "screen", "x.md"),))  # fmt: skip
    blind = lb.Regime("short", "test", confirmed=(lb.Source("c", "confirmation", "x.md", blinded=True),),
                      screens=(lb.Source("s", "screen", "x.md"),))  # fmt: skip
    long = lb.Regime("long", "test", confirmed=(lb.Source("long/c", "confirmation", "x.md"),))
    for seed in range(10):  # oar-g: 2 and 1 points ahead on alternate seeds
        g = 0.8 - 0.01 * seed
        _run(tmp_path / "c", "grpo", seed, g)
        _run(tmp_path / "c", "oar-g", seed, g + (0.02 if seed % 2 == 0 else 0.01), secs=20.0)
    for seed in range(2):  # my-rule's confirmation has 2 of its 10 seeds: not read
        _run(tmp_path / "c", "my-rule", seed, 0.99)
    for seed in range(5):
        _run(tmp_path / "s", "grpo", seed, 0.5)
        _run(tmp_path / "s", "my-rule", seed, 0.5 + 0.01 * (seed + 1))
    text = lb.page(tmp_path, (short, long))
    assert text.count("<th colspan='2'>") == 1 and "Regime **long** (test): no run files yet" in text
    summary, row = [line for line in text.splitlines() if "<code>my-rule</code>" in line][:2]
    # t(4) = 2.776; an unblinded folder's 2 seeds are no confirmation (a finished study may have fewer)
    assert summary.endswith("<td>+3.0 (+1.0, +5.0)</td><td>screen only, 5 seeds</td></tr>")
    assert "<td>+3.0 (+1.0, +5.0)</td><td>screen only, 5 seeds</td><td>screen</td>" in row
    assert "<td>+1.5 (+1.1, +1.9)</td><td>10</td><td>confirmation</td>" in text  # t(9) = 2.262, sd 0.527
    assert "<td>2.00×</td></tr>" in text  # oar-g's train time against GRPO's
    # a pre-registered confirmation is read whole or not at all: oar-g's 10 seeds wait for my-rule's
    assert lb.accuracy_cells(tmp_path, blind, "oar-g") == [
        "running", "confirmation running: 10 of 10 seeds", "confirmation", "n/a"
    ]  # fmt: skip
    assert lb.accuracy_cells(tmp_path, blind, "my-rule")[2] == "screen (confirmation running: 2 of 10 seeds)"
    for seed in range(2, 10):
        _run(tmp_path / "c", "my-rule", seed, 0.99)
    assert lb.accuracy_cells(tmp_path, blind, "oar-g")[:3] == ["+1.5 (+1.1, +1.9)", "10", "confirmation"]
    assert lb.accuracy_cells(tmp_path, blind, "my-rule")[1:3] == ["10", "confirmation"]
    for seed in range(2, 10):
        (tmp_path / "c" / f"my-rule.seed{seed}.json").unlink()
    # with its plan, an arm that has not started yet holds the others back too
    from experiments.credit_long.plan import CREDIT_LONG

    (tmp_path / "long2" / "screen").mkdir(parents=True)
    (tmp_path / "long2" / "screen" / "study.json").write_text('{"winners": ["entropy", "first-error"]}')
    planned = lb.Source("long2/confirm/runs", "confirmation", "x.md", blinded=True,
                        plan="experiments.credit_long.plan:CREDIT_LONG")  # fmt: skip
    regime = lb.Regime("long", "test", confirmed=(planned,))
    for arm in ("grpo", "oar-g", "entropy", "position"):  # first-error: no file yet
        for seed in CREDIT_LONG.confirm_seeds:
            _run(tmp_path / "long2" / "confirm" / "runs", arm, seed, 0.5 + (0.02 if arm == "oar-g" else 0))
    assert lb.accuracy_cells(tmp_path, regime, "oar-g") == [
        "running", "confirmation running: 10 of 10 seeds", "confirmation", "n/a"
    ]  # fmt: skip
    for seed in CREDIT_LONG.confirm_seeds:
        _run(tmp_path / "long2" / "confirm" / "runs", "first-error", seed, 0.5)
    assert lb.accuracy_cells(tmp_path, regime, "oar-g")[1:3] == ["10", "confirmation"]
    _run(tmp_path / "long" / "c", "grpo", 0, 0.4)
    _run(tmp_path / "long" / "c", "oar-g", 0, 0.5)
    text = lb.page(tmp_path, (short, long))
    assert text.count("<th colspan='2'>") == 2 and "no run files yet" not in text
    _run(tmp_path / "c", "random", 0, 0.5, protocol="p2")
    with pytest.raises(ValueError, match="mixes run files of 2 protocols"):
        lb.page(tmp_path, (short, long))


def test_leaderboard_reads_a_fixed_arm_confirmation_whole_with_its_rates(tmp_path):
    """Issue 48's confirmation: its arms are fixed in advance (no screen's winners) and each trains at a
    rate chosen on a grid (a learning-rate override), GRPO-at-compute on more prompts per step. No figure
    is read until every arm has its 10 seeds, an arm with no file yet included; then each arm is its
    row, and a run with another override (an ablation) is not."""
    from experiments.leaderboard import leaderboard as lb

    arms = ("grpo", "grpo-compute", "first-error")
    src = lb.Source("why", "confirmation at chosen rates", "x.md", blinded=True, arms=arms,
                    overrides=frozenset({"learning_rate", "prompts_per_step"}))  # fmt: skip
    regime = lb.Regime("why", "test", confirmed=(src,))

    def run(arm: str, seed: int, acc: float, over: dict) -> None:
        _run(tmp_path / "why", arm, seed, acc)
        path = tmp_path / "why" / f"{arm}.seed{seed}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "overrides": over}))

    for seed in range(10):
        run("grpo", seed, 0.5, {"learning_rate": 2e-4})
        run("first-error", seed, 0.52 + 0.002 * (seed % 2), {"learning_rate": 1e-4})
    assert lb.accuracy_cells(tmp_path, regime, "first-error")[:2] == [
        "running", "confirmation running: 10 of 10 seeds"
    ]  # fmt: skip
    for seed in range(10):
        run("grpo-compute", seed, 0.51, {"learning_rate": 2e-4, "prompts_per_step": 30})
    run("first-error[tau=0.2]", 0, 0.9, {"learning_rate": 1e-4, "tau": 0.2})
    assert lb.accuracy_cells(tmp_path, regime, "first-error")[:3] == [
        "+2.1 (+2.0, +2.2)", "10", "confirmation at chosen rates"
    ]  # fmt: skip
    assert lb.accuracy_cells(tmp_path, regime, "grpo-compute")[:2] == ["+1.0 (+1.0, +1.0)", "10"]
    assert lb.rules(tmp_path, (regime,)) == ["grpo", "grpo-compute", "first-error"]


def test_a_confirmation_of_six_seeds_is_read_at_six_and_not_before(tmp_path):
    """The pretrained regime's confirmation fixes 6 seeds per arm (its Amendment 1), not the 10 of the
    others: OAR-G's figure is read once both arms hold seeds 0-5, blinded while either lacks one; the
    committed regime points at that folder with those seeds."""
    from experiments.leaderboard import leaderboard as lb
    from experiments.leaderboard.regimes import PRETRAINED_ARMS, REGIMES

    src = lb.Source("p", "confirmation, test split", "x.md", blinded=True, arms=PRETRAINED_ARMS, seeds=6)
    regime = lb.Regime("smol", "test", confirmed=(src,))
    for seed in range(6):
        _run(tmp_path / "p", "oar-g", seed, 0.50 + (0.02 if seed % 2 else 0.01))
        if seed < 5:
            _run(tmp_path / "p", "grpo", seed, 0.50)
    assert lb.accuracy_cells(tmp_path, regime, "oar-g") == [
        "running", "confirmation running: 5 of 6 seeds", "confirmation, test split", "n/a"
    ]  # fmt: skip
    _run(tmp_path / "p", "grpo", 5, 0.50)
    cells = lb.accuracy_cells(tmp_path, regime, "oar-g")
    assert cells[0].startswith("+1.5 (") and cells[1:3] == ["6", "confirmation, test split"]
    smol = next(r for r in REGIMES if r.name == "wordproblems-smollm2")
    assert [(s.runs, s.seeds, s.arms) for s in smol.confirmed] == [
        ("results/pretrained-regime/confirm30/runs", 6, ("grpo", "oar-g"))
    ]  # fmt: skip
    assert smol.recall == "results/recall-smollm2/recall.json"
