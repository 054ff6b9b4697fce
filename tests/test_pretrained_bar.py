"""The pretrained regime's bar (experiments/pretrained_regime/bar.py) on run files made here: the decision
at its edges, decided on counts; Wilson and Newcombe against published values; bad stores refused."""

from __future__ import annotations

import json

import pytest

from experiments.pretrained_regime import bar as B


def _store(tmp_path, sampled, greedy, ws=(120, 100), seeds=(0,), earlier=None, folder="rates", steps=20):
    rates = tmp_path / folder
    (rates / "runs").mkdir(parents=True)
    acc = {"sampled": ws[0] / 300, "greedy": ws[1] / 150}
    (rates / "warm_start.json").write_text(json.dumps({"accuracy": acc}))
    for s in seeds:
        final = {"sampled": sampled / 300, "greedy": greedy / 150, "samples": 300, "step": 20}
        protocol = {"learning_rate": 1e-5, "eval_samples": 2, "steps": steps}
        rec = {"variant": "grpo", "seed": s, "protocol_hash": "p", "train_seconds": 2400.0,
               "eval_seconds": 300.0, "protocol": protocol, "final": final}  # fmt: skip
        (rates / "runs" / f"grpo.seed{s}.json").write_text(json.dumps(rec))
    if earlier is not None:
        (tmp_path / "grpo-first").mkdir()
        (tmp_path / "grpo-first" / "warm_start.json").write_text(json.dumps({"accuracy": earlier}))


def test_wilson_and_newcombe_match_published_values():
    # Newcombe (1998), Statistics in Medicine 17: Table I (Wilson) and Table II (method 10)
    lo, hi = B.wilson(81, 263)
    assert (round(lo, 4), round(hi, 4)) == (0.2553, 0.3662)
    lo, hi = B.wilson(0, 10)
    assert lo == 0.0 and round(hi, 4) == 0.2775
    lo, hi = B.newcombe(56, 70, 48, 80)
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)
    with pytest.raises(ValueError, match="count=11, n=10"):
        B.wilson(11, 10)


@pytest.mark.parametrize(
    ("sampled", "greedy", "met_s", "met_g"),
    [
        (150, 97, True, True),  # +10.0 sampled points exactly, -2.0 greedy points exactly
        (149, 97, False, True),  # +9.67
        (150, 96, True, False),  # -2.67
        (200, 120, True, True),
    ],
)
def test_the_bar_at_its_edges(tmp_path, sampled, greedy, met_s, met_g):
    _store(tmp_path, sampled, greedy)
    rec = B.bar(tmp_path)
    assert (rec["sampled_condition"], rec["greedy_condition"], rec["met"]) == (met_s, met_g, met_s and met_g)
    assert rec["rows"]["sampled"]["n"] == 300 and rec["rows"]["greedy"]["n"] == 150
    assert rec["rows"]["sampled"]["gain_points"] == pytest.approx(100 * (sampled - 120) / 300)
    assert ("**The bar is met.**" in B.render(rec)) == rec["met"]


def test_main_writes_files_and_checks_the_earlier_warm_start(tmp_path, capsys):
    _store(tmp_path, 180, 110, earlier={"sampled": 0.4, "greedy": 0.6})
    assert B.main(["--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "rates" / "bar.json").read_text())
    assert rec["earlier_warm_start"]["sampled"]["agrees"] is True
    assert rec["earlier_warm_start"]["greedy"]["agrees"] is False
    md = (tmp_path / "rates" / "bar.md").read_text()
    assert "DIFFERENT" in md and md == capsys.readouterr().out


def test_bad_stores_are_refused(tmp_path, capsys):
    _store(tmp_path, 180, 110, seeds=(0, 1))
    assert B.main(["--out", str(tmp_path)]) == 2
    assert "seeds [0, 1]" in capsys.readouterr().err
    run = tmp_path / "rates" / "runs" / "grpo.seed1.json"
    run.unlink()
    rec = json.loads((tmp_path / "rates" / "runs" / "grpo.seed0.json").read_text())
    rec["final"]["sampled"] = 0.5012
    (tmp_path / "rates" / "runs" / "grpo.seed0.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="not a count out of 300"):
        B.bar(tmp_path)


def test_amendment_2s_folder_is_read_and_written_on_its_own(tmp_path, capsys):
    _store(tmp_path, 130, 100)  # the 20-step protocol: not met
    _store(tmp_path, 160, 99, folder="steps30", steps=30)  # Amendment 2: +13.3 and -0.67, met
    assert B.main(["--out", str(tmp_path), "--folder", "steps30"]) == 0
    rec = json.loads((tmp_path / "steps30" / "bar.json").read_text())
    assert rec["met"] and rec["steps"] == 30 and rec["folder"] == "steps30"
    assert not (tmp_path / "rates" / "bar.json").exists()
    md = (tmp_path / "steps30" / "bar.md").read_text()
    assert "--folder steps30" in md and "30 steps" in md
    assert B.bar(tmp_path)["met"] is False
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        B.main(["--out", str(tmp_path), "--folder", "steps40"])
    assert e.value.code == 2 and "'steps40'" in capsys.readouterr().err
