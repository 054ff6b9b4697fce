"""`oar-rl bench` (oar_rl.bench.*): smoke runs print figures, which are never asserted; the
bookkeeping (one process per method, interleaving, worker failures, pairwise ratios, the generation
parity flag, token-forward counts, OAR-G's floor) is checked exactly."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
from pathlib import Path

import pytest
import torch

from bench_workers import fake_worker
from oar_rl.bench import cli as bench
from oar_rl.bench.scorers import oar_g_floor, oarp_token_forwards
from oar_rl.bench.shapes import _count_params, build_shape, qwen2_config
from oar_rl.bench.steps import BenchWorkerError, run_interleaved
from oar_rl.importance import gradient_importance
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
            "--problems",
            "1",
            "--samples",
            "2",
            "--threads",
            "1",
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
            "--credits",
            ",".join(methods),
        ],
    )
    steps = report["steps"]
    assert list(steps) == methods
    assert steps["none"]["ratio_vs_grpo"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    for m in methods:
        assert steps[m]["steps"] == 2 and steps[m]["tokens_per_step"]["median"] == 2 * 6  # forced length
    assert steps["none"]["importance_seconds"]["max"] < steps["oar-gp"]["importance_seconds"]["min"]
    # interleaved in rotating rounds: A B C, B C A, each method in a process of its own
    assert [r["method"] for r in report["records"]] == methods + methods[1:] + methods[:1]
    pids = {m: w["pid"] for m, w in report["workers"].items()}
    assert set(pids) == set(methods) and len(set(pids.values())) == 3 and os.getpid() not in pids.values()
    assert all(w["torch_threads"] == 1 for w in report["workers"].values())  # --threads 1
    for m in methods:
        assert steps[m]["generate_seconds_per_token"]["median"] > 0
    assert set(report["generation_parity"]["ratios"]) == set(methods)
    assert "Generation parity" in md
    sc = report["scorers"]
    assert sc["oar_p_token_forwards"]["floor"] < sc["oar_p_token_forwards"]["full"]
    assert set(sc["recall_top20_of_oar_p"]) == {"oar-g", "oar-gp", "oar-p-span"}
    assert sc["oar_p_span_over_oar_p"] > 0 and sc["span_tokens"] == 16
    assert sc["oar_p_full_stride"] == 2
    for m in methods:
        assert f"| {m} |" in md
    assert "compute floor" in md and "recall" in md
    assert {"oar-g floor: clean", "oar-g floor: noisy"} <= set(sc["seconds"])
    assert sc["oar_g_over_floor"] > 0 and "OAR-G compute floor" in md
    assert "'loss'" not in capsys.readouterr().out  # a table, not log dicts


def test_bench_scorers_only(tmp_path):
    report, md = _run(
        tmp_path, ["--shape", "qwen2-tiny", "--completion-len", "5", "--prompt-len", "3", "--scorers-only"]
    )
    assert report["steps"] is None and report["records"] == [] and report["generation_parity"] is None
    assert report["scorers"]["oar_g_floor_seconds"] > 0 and "scorer part only" in md


def test_bench_smoke_embedded_model_dir(tiny_model_dir, tmp_path):
    """The embedded shape (a model dir) end to end through the worker processes: every mode's records."""
    methods = ["none", "oar-g", "random", "first-error-k2"]
    report, md = _run(
        tmp_path,
        [
            "--model",
            str(tiny_model_dir),
            "--credits",
            ",".join(methods),
            "--completion-len",
            "8",
            "--no-scorers",
        ],
    )
    assert report["scorers"] is None and "| random |" in md
    assert [r["method"] for r in report["records"]] == methods + methods[1:] + methods[:1]
    for r in report["records"]:
        assert r["step_seconds"] > 0 and r["generate"] > 0 and r["tokens"] >= 1
        assert r["peak_mib"] is None or r["peak_mib"] >= 0  # the worker's own process
    by = {m: [r for r in report["records"] if r["method"] == m] for m in methods}
    assert all(r["importance"] > 0 for r in by["oar-g"])
    assert len({w["pid"] for w in report["workers"].values()}) == 4
    # first-error's search per step is recorded (the random model never answers right: its wrong rows
    # stop at the ends, one round when any was searched), and only for first-error
    assert all(r["search_rounds"] in (0, 1) for r in by["first-error-k2"])
    assert all("search_rounds" not in r for m in methods[:3] for r in by[m])
    assert "first-error's search per step" in md and "| first-error-k2 |" in md


def test_search_figures_per_step_by_hand():
    recs = []
    for g, (rounds, tokens) in zip([1.0, 2.0, 4.0], [(3, 300), (4, 500), (2, 100)], strict=True):
        recs.append({"method": "none", "step_seconds": g, "tokens": 10.0, "peak_mib": None})
        recs.append({"method": "first-error", "step_seconds": 2 * g, "tokens": 10.0, "peak_mib": None,
                     "search_rounds": rounds, "search_continuations": 9 * rounds,
                     "search_reused": 2 * rounds, "search_generated_tokens": tokens})  # fmt: skip
    s = bench.summarize(recs, ["none", "first-error"], warmup=0)
    assert s["first-error"]["search_rounds"] == {"median": 3, "min": 2, "max": 4}
    assert s["first-error"]["search_generated_tokens"] == {"median": 300, "min": 100, "max": 500}
    assert "search_rounds" not in s["none"]
    lines = bench.search_lines(s)
    assert (  # records made before issue 46 have no forwards or seconds of the search
        lines[-1] == "| first-error | 3 [2–4] | 27 [18–36] | 6 [4–8] | 300 [100–500] | – | – | – | – "
        "| 0.00 [0.00–0.00] | 2.00 [2.00–2.00] |"
    )
    assert bench.search_lines({"none": s["none"]}) == []
    for i, r in enumerate(r for r in recs if r["method"] == "first-error"):
        r.update(search_forwards=100 * (i + 1), search_pass_seconds=0.5, search_decode_seconds=1.0 + i,
                 search_check_seconds=0.25)  # fmt: skip
    line = bench.search_lines(bench.summarize(recs, ["none", "first-error"], warmup=0))[-1]
    assert line.startswith(
        "| first-error | 3 [2–4] | 27 [18–36] | 6 [4–8] | 300 [100–500] | 200 [100–300] | 0.50 [0.50–0.50] "
        "| 2.00 [1.00–3.00] | 0.25 [0.25–0.25] |"
    )


def _fake_args(methods, crash_method=None, crash_step=None, crash=None):
    return argparse.Namespace(
        methods=methods,
        warmup=1,
        repeats=2,
        threads=None,
        crash_method=crash_method,
        crash_step=crash_step,
        crash=crash,
    )


class _Bar:
    def set_description(self, msg):
        pass

    def update(self, n):
        pass


def test_worker_processes_take_turns():
    records, info = run_interleaved({}, _fake_args(["none", "oar-g", "oar-p"]), _Bar(), worker=fake_worker)
    # each round rotates the order: every method takes every place once in 3 rounds
    assert [(r["method"], r["step"]) for r in records] == [
        ("none", 0), ("oar-g", 0), ("oar-p", 0),
        ("oar-g", 1), ("oar-p", 1), ("none", 1),
        ("oar-p", 2), ("none", 2), ("oar-g", 2),
    ]  # fmt: skip
    assert {m: w["pid"] for m, w in info.items()} == {r["method"]: r["pid"] for r in records}
    assert len({w["pid"] for w in info.values()}) == 3
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(
    ("crash", "needle"),
    [
        ("exit", r"'oar-g' \(pid \d+\) died with exit code 3"),
        ("raise", r"(?s)'oar-g' failed.*ValueError: boom"),
    ],
)
def test_worker_failure_is_a_clear_error_not_a_hang(crash, needle):
    args = _fake_args(["none", "oar-g", "oar-p"], crash_method="oar-g", crash_step=1, crash=crash)
    with pytest.raises(BenchWorkerError, match=needle):
        run_interleaved({}, args, _Bar(), worker=fake_worker)
    assert not multiprocessing.active_children()  # the other workers were stopped


def _records(gen_per_token: dict[str, list[float]]) -> list[dict]:
    recs = []
    for i in range(3):
        for m, gens in gen_per_token.items():
            g = gens[i] * 10.0
            recs.append(
                {"method": m, "step_seconds": g + 1.0, "tokens": 10.0, "generate": g, "peak_mib": 1.0}
            )
    return recs


def test_generation_parity_flags_modes_off_by_more_than_ten_percent():
    recs = _records(
        {
            "none": [1.0, 2.0, 1.0],  # median 1.0
            "oar-g": [1.09, 0.5, 5.0],  # median 1.09: within 10%
            "oar-p": [1.2, 1.11, 0.1],  # median 1.11: flagged
            "oar-gp": [0.85, 0.89, 2.0],  # median 0.89: flagged (slower or faster alike)
        }
    )
    s = bench.summarize(recs, ["none", "oar-g", "oar-p", "oar-gp"], warmup=0)
    assert s["oar-p"]["generate_seconds_per_token"]["median"] == pytest.approx(1.11)
    parity = bench.generation_parity(s)
    assert parity["ratios"] == pytest.approx({"none": 1.0, "oar-g": 1.09, "oar-p": 1.11, "oar-gp": 0.89})
    assert parity["flagged"] == ["oar-p", "oar-gp"] and not parity["ok"]
    lines = "\n".join(bench.parity_lines(parity))
    assert "FAILED" in lines and "oar-p, oar-gp" in lines
    ok = bench.generation_parity(
        bench.summarize(_records({"none": [1, 1, 1], "oar-g": [1.05, 0.96, 1]}), ["none", "oar-g"], 0)
    )
    assert ok["ok"] and ok["flagged"] == [] and "OK" in bench.parity_lines(ok)[0]
    # GRPO's generation time 0: no ratio can be taken, which is flagged, never silently passed
    zero = bench.summarize(_records({"none": [0, 0, 0], "oar-g": [1, 1, 1]}), ["none", "oar-g"], 0)
    assert bench.generation_parity(zero)["flagged"] == ["none", "oar-g"]


def test_oar_g_floor_is_oar_gs_own_work():
    """The floor's two passes are OAR-G's work and nothing else: its gradient, dotted with the clean
    embeddings, gives OAR-G's scores (same noise); parameters' requires_grad is restored."""
    model = tiny_qwen2(40, seed=0, hidden_size=32).eval()
    g = torch.Generator().manual_seed(1)
    batch = [torch.randint(4, 40, (3, 5), generator=g), torch.ones(3, 5, dtype=torch.long)]
    batch += [torch.randint(4, 40, (3, 7), generator=g), torch.ones(3, 7, dtype=torch.long)]
    flags = [p.requires_grad for p in model.parameters()]
    clean, noisy = oar_g_floor(model, batch, noise_std=1e-2, seed=0)
    clean()
    grad = noisy()
    assert grad.shape == (3, 7, 32)
    assert [p.requires_grad for p in model.parameters()] == flags
    with torch.no_grad():
        floor_scores = (grad * model.get_input_embeddings()(batch[2])).sum(-1).abs()
    ref = gradient_importance(model, *batch, noise_std=1e-2, generator=torch.Generator().manual_seed(0))
    assert float(ref.min()) > 0
    torch.testing.assert_close(floor_scores, ref, rtol=1e-4, atol=1e-9)


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


@pytest.mark.parametrize("name", ["wordproblems", "wordproblems-long"])
def test_the_word_problem_shapes_are_the_shipped_warm_starts_on_their_tasks(name):
    """Each word-problem shape builds its task's shipped warm start, with gold answers for first-error."""
    from oar_rl.shipped import shipped_path

    shape = build_shape(name, prompt_len=0, completion_len=0, rows=3, seed=0, model_dir=None)
    assert Path(shape.make_model()) == shipped_path(name)
    assert len(shape.dataset) == 3 and all(row["answer"] for row in shape.dataset)
    assert ("long-chain" in shape.description) == (name == "wordproblems-long")
    args = bench._parse(["--shape", name, "--no-scorers"])
    assert args.completion_len == {"wordproblems": 160, "wordproblems-long": 320}[name]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--credits", "oar-g"], "must include grpo (or its alias none"),
        (["--credits", "none,oar-x"], "unknown rule"),
        (["--credits", "none,none"], "twice"),
        (["--samples", "1"], "--samples"),
        (["--oar-gp-fraction", "0"], "--oar-gp-fraction"),
        (["--shape", "qwen2-30m", "--model", "x"], "--model goes with --shape embedded"),
        (["--no-scorers", "--scorers-only"], "not allowed with"),
        (["--micro-batch", "0"], "--micro-batch must be >= 1, got 0"),
    ],
)
def test_bench_argument_errors(argv, needle, capsys):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert needle in capsys.readouterr().err


def test_generation_parity_matches_vllm_modes_with_vllms_grpo():
    """A mode generating with vLLM is held to grpo-vllm's generation time, not to `generate`'s."""
    recs = _records({"none": [1, 1, 1], "grpo-vllm": [0.43] * 3, "oar-g-vllm": [0.45] * 3, "oar-g": [1] * 3})
    parity = bench.generation_parity(bench.summarize(recs, ["none", "grpo-vllm", "oar-g-vllm", "oar-g"], 0))
    assert parity["ok"] and parity["flagged"] == []
    slow = _records({"none": [1, 1, 1], "grpo-vllm": [0.43] * 3, "oar-g-vllm": [0.6] * 3})
    parity = bench.generation_parity(bench.summarize(slow, ["none", "grpo-vllm", "oar-g-vllm"], 0))
    assert parity["flagged"] == ["oar-g-vllm"]
    alone = _records({"none": [1, 1, 1], "oar-g-vllm": [0.45] * 3})
    assert bench.generation_parity(bench.summarize(alone, ["none", "oar-g-vllm"], 0))["ok"]


def test_micro_batch_accumulates_one_optimizer_step_per_generation_batch(tmp_path):
    """--micro-batch: passes of at most that many rows, gradients accumulated over the step (as the study)."""
    from oar_rl.bench.steps import _make_trainer

    args = bench._parse(["--shape", "qwen2-tiny", "--problems", "2", "--samples", "4", "--micro-batch", "2"])
    shape = build_shape("qwen2-tiny", prompt_len=3, completion_len=4, rows=4, seed=0, model_dir=None)
    cfg = _make_trainer("none", shape, args, str(tmp_path)).args
    passes = (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps, cfg.steps_per_generation)
    assert passes == (2, 4, 4) and cfg.generation_batch_size == 8  # the step's 2 x 4 rows generated at once
    three = bench._parse(["--shape", "qwen2-tiny", "--problems", "2", "--samples", "4", "--micro-batch", "3"])
    cfg = _make_trainer("none", shape, three, str(tmp_path)).args  # at most 3 rows a pass: 4 passes of 2
    assert (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps) == (2, 4)
    whole = _make_trainer(
        "none", shape, bench._parse(["--shape", "qwen2-tiny", "--problems", "2"]), str(tmp_path)
    )
    assert (whole.args.per_device_train_batch_size, whole.args.gradient_accumulation_steps) == (8, 1)


def test_the_pretrained_regime_shape_is_its_tasks_warm_start(monkeypatch, tmp_path):
    """--shape wordproblems-smollm2 trains the regime's warm start (read through its task, as the study
    loads it) on the task's chat-template prompts, at the task's completion budget."""
    import dataclasses

    import transformers

    import oar_rl.tasks
    from oar_rl.tasks import WarmStart, get_task

    task = get_task("wordproblems-smollm2")
    seen = []

    def fake_load(variant, cache_dir):
        seen.append((variant, cache_dir))
        return WarmStart(None, None, tmp_path / "merged", "h", {})

    faked = dataclasses.replace(task, load_warm_start=fake_load)
    monkeypatch.setattr(oar_rl.tasks, "get_task", lambda name: faked if name == task.name else get_task(name))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda p: ("tok", p))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda p: torch.nn.Linear(2, 3))
    kw = dict(prompt_len=0, completion_len=0, rows=2, seed=0, model_dir=None, cache_dir="c")
    shape = build_shape("wordproblems-smollm2", **kw)
    assert seen == [("default", "c")] and shape.make_model() == str(tmp_path / "merged")
    assert shape.dataset[0]["prompt"] == task.dataset("train", limit=1)[0]["prompt"]
    assert shape.dataset[0]["prompt"].startswith("<|im_start|>system") and shape.num_parameters == 9
    assert bench._parse(["--shape", "wordproblems-smollm2", "--no-scorers"]).completion_len == 128
