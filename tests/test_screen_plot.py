"""The credit screen's figure (`oar_rl.study.screen_plot`): one row per arm in the table's order with the
table's own paired differences, grouped by stage where the table has stages, linked under the report's
title; and a confirmation that is still running (blinded) gets no figure, nor any number drawn."""

from __future__ import annotations

import json

import pytest

from experiments.credit_screen.plan import ARM_BY_NAME, ARMS, CREDIT_SCREEN
from oar_rl.study import screen_plot
from oar_rl.study.screen import markdown, summarize, write_report
from oar_rl.study.screen import protocol as plan_protocol

PNG = b"\x89PNG\r\n\x1a\n"


def _runs(accs: dict[str, list[float]], first_seed: int = 2000, greedy: bool = False):
    def final(a: float) -> dict[str, float]:
        return {"sampled": a / 100, **({"greedy": a / 100} if greedy else {})}

    return {
        name: {first_seed + i: {"final": final(a), "train_seconds": 1.0} for i, a in enumerate(v)}
        for name, v in accs.items()
    }


def _delta_cells(text: str) -> dict[str, str]:
    """{arm: its "Δ vs baseline, paired (95% CI)" cell} of a report's table."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    col = [c.strip() for c in lines[0].strip("|").split("|")].index("Δ vs baseline, paired (95% CI)")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]
    return {c[0]: c[col] for c in cells if c[0] != "hypothesis" and len(c) > col}


@pytest.fixture
def drawn(monkeypatch):
    """Every `data` the report passes to `screen_plot.draw` (which still draws)."""
    calls: list[dict] = []
    real = screen_plot.draw

    def spy(data, path):
        calls.append(data)
        return real(data, path)

    monkeypatch.setattr(screen_plot, "draw", spy)
    return calls


def test_the_figure_is_the_tables_paired_differences_in_its_order_grouped_by_stage():
    base = [80.0, 81.0, 82.0, 83.0, 84.0]
    names = ["grpo", "oar-g", "first-error", "grpo[tr]", "oar-g[tr]", "position"]
    accs = {n: list(base) for n in names}
    accs["first-error"] = [b + d for b, d in zip(base, (2.0, 0.5, 1.0, -1.0, 3.0), strict=True)]
    accs["oar-g[tr]"] = [b - 2 for b in base]
    accs["position"] = [81.0]  # one seed: a mean, no interval
    del accs["oar-g"]  # no run yet
    arms = [ARM_BY_NAME[n] for n in names]
    rows = summarize(_runs(accs), arms)
    data = screen_plot.figure_data(
        rows, kind="screen", split="validation", seeds=CREDIT_SCREEN.screen_seeds,
        protocol_hash="aa95afb326278762", decision_stages=CREDIT_SCREEN.decision_stages,
    )  # fmt: skip
    assert [r.get("heading") or r["arm"] for r in data["rows"]] == [
        "stage 1 · decision", "grpo", "oar-g", "first-error",
        "stage 2 · decision", "grpo[tr]", "oar-g[tr]",
        "stage 3 · after the decision", "position",
    ]  # fmt: skip
    plotted = {r["arm"]: r for r in data["rows"] if "arm" in r}
    cells = _delta_cells(markdown(rows, "t", "n"))
    for r in rows:  # the table's own numbers, not recomputed
        p, d = r.get("paired") or {}, plotted[r["arm"]]
        assert (d["diffs"], d["seeds"]) == (p.get("diffs", []), p.get("seeds", []))
        assert (d["mean"], d["low"], d["high"]) == (p.get("mean"), p.get("low"), p.get("high"))
        assert d["text"] == cells[r["arm"]]
    assert plotted["first-error"]["diffs"] == pytest.approx([2.0, 0.5, 1.0, -1.0, 3.0])
    assert plotted["oar-g[tr]"]["mean"] == pytest.approx(-2.0)
    assert plotted["position"]["low"] is None and plotted["position"]["mean"] == pytest.approx(1.0)
    assert plotted["grpo"]["mean"] is None and plotted["oar-g"]["mean"] is None  # baseline; no run
    for says in ("validation split", "5 seeds (2000-2004)", "final sampled accuracy",
                 "percentage points", "protocol aa95afb326278762"):  # fmt: skip
        assert says in data["title"]
    # the confirmation's table has no stage column (greedy columns instead): no stage headings either
    confirm = summarize(_runs({"grpo": base, "oar-g": [b - 3 for b in base]}, 100, greedy=True), arms[:2])
    data = screen_plot.figure_data(
        confirm, kind="confirm", split="test", seeds=(100, 101, 102, 103, 104), protocol_hash="x"
    )
    assert [r.get("heading") for r in data["rows"]] == [None, None]
    assert data["title"].startswith("Credit confirmation: test split, 5 seeds (100-104)")


def test_report_writes_the_figure_and_shows_it_under_the_title(tmp_path, drawn):
    from oar_rl.study.runner import RunStore

    store = RunStore(tmp_path / "screen" / "runs", plan_protocol("screen", CREDIT_SCREEN))
    for i, seed in enumerate(CREDIT_SCREEN.screen_seeds):
        for arm, acc in (("grpo", 0.80), ("oar-g", 0.78), ("first-error", 0.81)):
            rec = {"variant": arm, "seed": seed, "final": {"sampled": acc + 0.003 * i * (arm == "oar-g")},
                   "train_seconds": 1.0, "history": []}  # fmt: skip
            store.put(arm, seed, rec)
    rec = write_report(tmp_path, "screen", CREDIT_SCREEN)
    assert (tmp_path / "screen.png").read_bytes()[:8] == PNG
    lines = (tmp_path / "screen.md").read_text().splitlines()
    assert lines[:4] == ["# Credit screen", "", screen_plot.image_line("screen"), ""]
    assert screen_plot.image_line("screen").endswith("(screen.png)")
    [data] = drawn
    assert "protocol aa95afb326278762" in data["title"]  # the committed screen's hash: the same protocol
    plotted = {r["arm"]: r for r in data["rows"] if "arm" in r}
    assert list(plotted) == [r["arm"] for r in rec["rows"]]
    for r in rec["rows"]:
        if r.get("paired"):
            assert plotted[r["arm"]]["diffs"] == r["paired"]["diffs"]
    assert plotted["oar-g"]["diffs"] == pytest.approx([-2.0, -1.7, -1.4, -1.1, -0.8])


def test_a_blinded_confirmation_draws_no_figure_and_no_number(tmp_path, drawn):
    """While an arm lacks a seed, nothing is passed to the plot and no confirm.png exists (one left from
    an earlier complete set is removed); once every run has landed, the figure shows the differences."""
    from oar_rl.study.runner import RunStore

    (tmp_path / "screen").mkdir()
    (tmp_path / "screen" / "study.json").write_text(json.dumps({"winners": ["first-error", "oar-g"]}))
    (tmp_path / "confirm.png").write_bytes(PNG + b"an earlier figure, with numbers")
    store = RunStore(tmp_path / "confirm" / "runs", plan_protocol("confirm", CREDIT_SCREEN))
    seeds = CREDIT_SCREEN.confirm_seeds

    def land(arm: str, i: int, acc: float) -> None:
        rec = {"variant": arm, "seed": seeds[i], "final": {"sampled": acc + 0.001 * i, "greedy": acc},
               "train_seconds": 1.0, "history": []}  # fmt: skip
        store.put(arm, seeds[i], rec)

    for i in range(len(seeds)):
        for arm, acc in (("grpo", 0.5), ("first-error", 0.61), ("oar-g", 0.47)):
            if not (arm == "oar-g" and i == len(seeds) - 1):  # one run short
                land(arm, i, acc)
    assert write_report(tmp_path, "confirm", CREDIT_SCREEN)["blinded"]
    numbers = [r for d in drawn for r in d["rows"] if r.get("diffs") or r.get("mean") is not None]
    assert numbers == [] and drawn == []  # no difference reached the plot; nothing drawn at all
    assert not (tmp_path / "confirm.png").exists()
    assert ".png" not in (tmp_path / "confirm.md").read_text()
    land("oar-g", len(seeds) - 1, 0.47)
    assert not write_report(tmp_path, "confirm", CREDIT_SCREEN).get("blinded")
    [data] = drawn
    plotted = {r["arm"]: r for r in data["rows"]}
    assert list(plotted) == ["grpo", "first-error", "oar-g"]
    assert plotted["first-error"]["mean"] == pytest.approx(11.0) and len(plotted["oar-g"]["diffs"]) == 10
    assert (tmp_path / "confirm.png").read_bytes()[:8] == PNG
    assert screen_plot.image_line("confirm") in (tmp_path / "confirm.md").read_text()


def test_every_arm_of_the_plans_can_be_drawn(tmp_path):
    """The full screen's figure (20 arms, 4 stages) draws, and so does one with no run yet."""
    base = [80.0, 81.0, 82.0, 83.0, 84.0]
    accs = {a.name: [b + (i % 3) - 1 for b in base] for i, a in enumerate(ARMS)}
    accs["oar-p"] = base[:1]
    accs["random"] = []
    rows = summarize(_runs(accs), list(ARMS))
    data = screen_plot.figure_data(
        rows, kind="screen", split="validation", seeds=(2000, 2001), protocol_hash="h"
    )
    assert len([r for r in data["rows"] if "heading" in r]) == 4
    screen_plot.draw(data, tmp_path / "screen.png")
    assert (tmp_path / "screen.png").read_bytes()[:8] == PNG
    assert [p.name for p in tmp_path.iterdir()] == ["screen.png"]  # written atomically: no temporary left
    import warnings

    with warnings.catch_warnings():  # a report before any run landed: an empty figure, drawn cleanly
        warnings.simplefilter("error")
        empty = screen_plot.figure_data([], kind="screen", split="validation", seeds=(1,), protocol_hash="h")
        screen_plot.draw(empty, tmp_path / "empty.png")
