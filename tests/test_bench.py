"""`oar-rl bench` (oar_rl.analysis.bench*): smoke runs print figures, which are never asserted; the
bookkeeping (interleaving, pairwise ratios, token-forward counts) is checked exactly."""

from __future__ import annotations

import json

import pytest
import torch

from oar_rl.analysis import bench
from oar_rl.analysis.bench_scorers import oarp_token_forwards
from oar_rl.analysis.bench_shapes import _count_params, build_shape, qwen2_config
from oar_rl.tiny import tiny_qwen2


def _run(tmp_path, argv):
    out = tmp_path / "bench"
    rc = bench.main(
        [
            *argv,
            "--repeats",
            "2",
            "--warmup",
            "0",
            "--prompts",
            "1",
            "--num-generations",
            "2",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    return json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


def test_bench_smoke_random_shape(tmp_path, capsys):
    methods = ["none", "oar-p-full", "oar-gp"]
    report, md = _run(
        tmp_path,
        [
            "--shape",
            "qwen2-tiny",
            "--full-stride",
            "2",
            "--completion-len",
            "6",
            "--prompt-len",
            "4",
            "--methods",
            ",".join(methods),
        ],
    )
    steps = report["steps"]
    assert list(steps) == methods
    assert steps["none"]["ratio_vs_grpo"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    for m in methods:
        assert steps[m]["steps"] == 2 and steps[m]["tokens_per_step"]["median"] == 2 * 6  # forced length
    assert steps["none"]["importance_seconds"]["max"] < steps["oar-gp"]["importance_seconds"]["min"]
    # interleaved: A B C A B C
    assert [r["method"] for r in report["records"]] == methods * 2
    sc = report["scorers"]
    assert sc["oar_p_token_forwards"]["floor"] < sc["oar_p_token_forwards"]["full"]
    assert set(sc["recall_top20_of_oar_p"]) == {"oar-g", "oar-gp"}
    assert sc["oar_p_full_stride"] == 2
    for m in methods:
        assert f"| {m} |" in md
    assert "compute floor" in md and "recall" in md
    assert "'loss'" not in capsys.readouterr().out  # a table, not log dicts


def test_bench_smoke_embedded_model_dir(tiny_model_dir, tmp_path):
    report, md = _run(
        tmp_path,
        ["--model", str(tiny_model_dir), "--methods", "none,random", "--completion-len", "8", "--no-scorers"],
    )
    assert report["scorers"] is None and "| random |" in md


def test_pairwise_ratios_and_spread():
    recs = []
    for g, o in [(1.0, 2.0), (2.0, 3.0), (4.0, 12.0)]:
        recs.append({"method": "none", "step_seconds": g, "tokens": 10.0, "generate": 0.0, "peak_mib": 1.0})
        recs.append({"method": "oar-g", "step_seconds": o, "tokens": 10.0, "generate": 0.0, "peak_mib": None})
    s = bench.summarize(recs, ["none", "oar-g"], warmup=0)
    # per-repeat ratios 2, 1.5, 3: median 2 (a ratio of medians would say 3/2)
    assert s["oar-g"]["ratio_vs_grpo"] == pytest.approx({"median": 2.0, "min": 1.5, "max": 3.0})
    assert s["oar-g"]["peak_mib"] is None and s["none"]["peak_mib"]["median"] == 1.0
    s = bench.summarize(recs, ["none", "oar-g"], warmup=1)
    assert s["oar-g"]["ratio_vs_grpo"]["median"] == pytest.approx(2.25)
    with pytest.raises(RuntimeError, match="no measured steps"):
        bench.summarize(recs, ["none", "oar-g"], warmup=3)


def test_oarp_token_forwards_by_hand():
    model = tiny_qwen2(20, seed=0)
    p_ids, c_ids = torch.full((2, 3), 5), torch.full((2, 4), 6)
    p_mask, c_mask = torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    tf = oarp_token_forwards(model, [p_ids, p_mask, c_ids, c_mask])
    # row 0 ends at position 7, row 1 at 5 (last probe index + 1); clean = 7 + 5
    # suffixes: row 0, t = 0..3 -> 7 - (3 + t) = 4, 3, 2, 1; row 1, t = 0, 1 -> 2, 1
    assert tf == {"clean": 12, "floor": 12 + 10 + 3, "full": 12 + 4 * 7 + 2 * 5}


def test_shape_parameter_count():
    cfg, _ = qwen2_config("qwen2-tiny")
    from transformers import Qwen2ForCausalLM

    assert _count_params(cfg) == sum(p.numel() for p in Qwen2ForCausalLM(cfg).parameters())
    shape = build_shape("qwen2-tiny", prompt_len=3, completion_len=4, rows=2, seed=0, model_dir=None)
    assert len(shape.tokenizer(shape.dataset[0]["prompt"])["input_ids"]) == 3
    assert shape.reward(["t5 t6"]) == shape.reward(["t5 t6"]) and 0 <= shape.reward(["t5"])[0] < 1


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--methods", "oar-g"], "must include 'none'"),
        (["--methods", "none,oar-x"], "unknown method"),
        (["--methods", "none,none"], "twice"),
        (["--num-generations", "1"], "--num-generations"),
        (["--oar-gp-fraction", "0"], "--oar-gp-fraction"),
        (["--shape", "qwen2-30m", "--model", "x"], "--model goes with --shape embedded"),
    ],
)
def test_bench_argument_errors(argv, needle, capsys):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert needle in capsys.readouterr().err
