"""Issue 33's answers page (experiments/credit_long/answers.py) on made-up run files of both regimes:
each question's figure is the statistics module's on the right seeds, a regime stays "pending" until its
confirmation has every seed, and the committed page is what the committed run files give."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from experiments.credit_long import answers
from experiments.credit_long.plan import CREDIT_LONG
from experiments.credit_screen.plan import CREDIT_SCREEN
from oar_rl.study import stats
from oar_rl.study.runner import RunStore
from oar_rl.study.screen import protocol, write_report

ROOT = Path(__file__).resolve().parents[1]


def _put(root: Path, plan, kind: str, gaps: dict[str, float], seeds, base: float = 0.5) -> None:
    """GRPO at `base` with a per-seed wobble; each arm at GRPO + its gap (points) + a wobble of its own."""
    store = RunStore(root / kind / "runs", protocol(kind, plan))
    for i, seed in enumerate(seeds):
        grpo = base + 0.01 * (i % 3)
        for arm, gap in {"grpo": None, **gaps}.items():
            acc = grpo if gap is None else grpo + gap / 100 + 0.003 * ((i * 7 + len(arm)) % 5 - 2)
            rec = {"variant": arm, "seed": seed, "final": {"sampled": acc, "greedy": acc},
                   "train_seconds": 1.0, "history": []}  # fmt: skip
            store.put(arm, seed, rec)


def _acc(root: Path, kind: str, arm: str, seed: int) -> float:
    plan = CREDIT_SCREEN if root.name == "short" else CREDIT_LONG
    return 100 * RunStore(root / kind / "runs", protocol(kind, plan)).get(arm, seed)["final"]["sampled"]


def test_answers_come_from_the_run_files_and_wait_for_every_confirmation_seed(tmp_path):
    short, long = tmp_path / "short", tmp_path / "long"
    _put(short, CREDIT_SCREEN, "screen", {"oar-g": 1.0, "first-error": 2.0, "position": 0.5},
         CREDIT_SCREEN.screen_seeds)  # fmt: skip
    (short / "screen").mkdir(exist_ok=True)
    (short / "screen" / "study.json").write_text('{"winners": ["first-error", "oar-g"]}')
    _put(short, CREDIT_SCREEN, "confirm", {"oar-g": 3.0, "first-error": 0.0}, CREDIT_SCREEN.confirm_seeds)
    rules = {a.name: 0.0 for a in CREDIT_LONG.arms if a.stage == 1 and a.name != "grpo"}
    _put(long, CREDIT_LONG, "screen", rules | {"entropy": 4.0, "random": 3.0, "oar-g": -5.0},
         CREDIT_LONG.screen_seeds)  # fmt: skip
    res = answers.answers(short, long)
    assert res["q1"]["short"]["answer"] == "yes: oar-g"  # +3 with a small wobble: above 0
    assert res["q1"]["long"]["answer"] == "pending (no winners yet)"

    assert write_report(long, "screen", CREDIT_LONG)["winners"] == ["entropy", "random"]
    half = CREDIT_LONG.confirm_seeds[:5]
    _put(long, CREDIT_LONG, "confirm", {"entropy": 2.0, "random": 0.0, "oar-g": -2.0, "position": 0.0}, half)
    res = answers.answers(short, long)
    assert (
        res["q1"]["long"]["answer"]
        == "pending (seeds landed: grpo 5, entropy 5, random 5, oar-g 5, position 5)"
    )
    # blinded while it runs: no number of the long confirmation anywhere, only its progress
    assert res["q1"]["long"]["confirm"] == [] and "long confirm" not in res["q3"]
    assert all(not r["long"]["seeds"] for r in res["q2"]["confirm"])
    assert res["landed"]["long"] == {"grpo": 5, "entropy": 5, "random": 5, "oar-g": 5, "position": 5}
    assert (
        "| entropy | 1 | +4.0 " in (text := answers.markdown(res))
        and "running: 5 of 10 seeds landed |" in text
    )
    _put(long, CREDIT_LONG, "confirm", {"entropy": 2.0, "random": 0.0, "oar-g": -2.0, "position": 0.0},
         CREDIT_LONG.confirm_seeds)  # fmt: skip
    last = CREDIT_LONG.confirm_seeds[-1]
    kept = (long / "confirm" / "runs" / f"grpo.seed{last}.json").read_text()
    (long / "confirm" / "runs" / f"grpo.seed{last}.json").unlink()  # only the baseline lacks a seed
    res = answers.answers(short, long)
    assert (
        res["q1"]["long"]["answer"]
        == "pending (seeds landed: grpo 9, entropy 10, random 10, oar-g 10, position 10)"
    )
    (long / "confirm" / "runs" / f"grpo.seed{last}.json").write_text(kept)
    res = answers.answers(short, long)
    assert res["q1"]["long"]["answer"] == "yes: entropy"

    # question 2: OAR-G's gaps in each regime and the Welch interval of long - short
    def gaps(root, kind, arm, seeds):
        return [_acc(root, kind, arm, s) - _acc(root, kind, "grpo", s) for s in seeds]

    g = res["q2"]["confirm"][0]
    assert g["rule"] == "oar-g"
    gs = gaps(short, "confirm", "oar-g", CREDIT_SCREEN.confirm_seeds)
    gl = gaps(long, "confirm", "oar-g", CREDIT_LONG.confirm_seeds)
    ref = stats.welch_difference(gl, gs)
    assert g["growth"]["low"] == pytest.approx(ref["low"]) and ref["high"] < 0
    assert g["short"]["mean"] == pytest.approx(sum(gs) / len(gs))

    # question 3: OAR-G's gap minus position's, paired by seed
    d = res["q3"]["long confirm"]
    pos = gaps(long, "confirm", "position", CREDIT_LONG.confirm_seeds)
    assert d["diffs"] == pytest.approx([a - b for a, b in zip(gl, pos, strict=True)])
    assert set(res["q3"]) == {"short screen", "long screen", "long confirm"}  # where position ran

    text = answers.markdown(res)
    assert "**long regime: yes: entropy.**" in text and "| long confirm | " in text
    prot = {p["folder"].rsplit("/", 3)[-3] + "/" + p["kind"]: p for p in res["protocols"]}
    assert prot["long/confirm"]["runs"] == 5 * 10 and len(prot["long/confirm"]["hashes"]) == 1


def test_the_committed_answers_page_is_what_the_run_files_give(tmp_path, monkeypatch):
    committed = ROOT / "results" / "credit-long" / "answers.md"
    if not committed.exists():
        pytest.skip("no answers page committed yet")
    for regime in ("credit-screen", "credit-long"):
        for kind in ("screen", "confirm"):
            src = ROOT / "results" / regime / kind
            if (src / "runs").is_dir():
                shutil.copytree(src / "runs", tmp_path / "results" / regime / kind / "runs")
            if (src / "study.json").exists():
                shutil.copy(src / "study.json", tmp_path / "results" / regime / kind / "study.json")
    monkeypatch.chdir(tmp_path)
    assert answers.main(["--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "answers.md").read_text() == committed.read_text()
