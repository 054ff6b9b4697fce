"""pass@k against the exact closed form; `oar-rl eval` end to end on a tiny random Qwen2; resume."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from conftest import another_version, hub_cache
from oar_rl.eval import evaluation
from oar_rl.eval import sampling as eval_sampling
from oar_rl.eval.config import EvalConfig
from oar_rl.eval.evaluation import evaluate, main, mean_at_n, pass_at_k

FIXTURES = Path(__file__).parent / "fixtures"
LOCAL = str(FIXTURES / "eval_local.jsonl")  # answers 2, 4, 7, 10


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The definition: 1 - C(n-c, k) / C(n, k), in exact rational arithmetic (C(m, k) = 0 for m < k)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


# ---------------------------------------------------------------------------------------------------- math


def test_pass_at_k_matches_the_closed_form():
    checked = 0
    for n in range(1, 17):
        for c in range(n + 1):
            for k in range(1, n + 1):
                got = pass_at_k(n, c, k)
                assert abs(got - float(exact_pass_at_k(n, c, k))) < 1e-12, (n, c, k, got)
                checked += 1
    assert checked > 800
    # large n: the product form stays accurate where the binomials are huge
    for n, c, k in [(200, 3, 32), (1024, 1, 1), (1024, 700, 64), (64, 0, 32), (64, 64, 64), (500, 17, 100)]:
        assert abs(pass_at_k(n, c, k) - float(exact_pass_at_k(n, c, k))) < 1e-12


def test_pass_at_k_hand_worked():
    # n=4, c=1, k=2: C(3,2)/C(4,2) = 3/6, so pass@2 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5, abs=1e-15)
    # pass@1 = c/n; c = 0 -> 0; c = n -> 1; n - c < k -> 1
    assert pass_at_k(32, 8, 1) == pytest.approx(0.25, abs=1e-15)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 8, 1) == 1.0 and pass_at_k(8, 1, 8) == 1.0


def test_pass_at_k_vectorised_and_mean_at_n():
    rng = np.random.default_rng(0)
    n = 32
    cs = rng.integers(0, n + 1, size=50)
    for k in (1, 5, 32):
        vec = pass_at_k(n, cs, k)
        assert vec.shape == (50,)
        assert np.allclose(vec, [float(exact_pass_at_k(n, int(c), k)) for c in cs], atol=1e-12, rtol=0)
    assert pass_at_k(n, [[0, 32], [1, 2]], 2).shape == (2, 2)
    assert mean_at_n(cs, n) == pytest.approx(float(pass_at_k(n, cs, 1).mean()), abs=1e-12)
    assert mean_at_n([1, 3], 4) == 0.5


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (4, 1, 5, "k=5 must be <= n=4"),
        (4, 1, 0, "k must be >= 1"),
        (4, 5, 1, r"c must be in \[0, n=4\]"),
        (4, -1, 1, r"c must be in \[0, n=4\]"),
        (0, 0, 1, "n must be >= 1"),
        (-3, 0, 1, "n must be >= 1"),
        (4, [0, 5], 1, r"every c must be in \[0, n=4\]"),
        (4, [0.5], 1, "integers"),
        (4.0, 1, 1, "n must be an integer"),
    ],
)
def test_pass_at_k_bad_input(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


# ---------------------------------------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    from oar_rl.tiny import build_char_tokenizer, tiny_qwen2

    path = tmp_path_factory.mktemp("tiny-model")
    tok = build_char_tokenizer()
    tiny_qwen2(len(tok), seed=0, hidden_size=32, num_layers=1).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _args(model: str, out: Path, *extra: str) -> list[str]:
    return [
        "--model", model, "--benchmarks", LOCAL, "--samples", "3", "--k", "1,2", "--max-new-tokens", "6",
        "--batch-size", "3", "--temperature", "1.0", "--verify-workers", "1", "--out", str(out), *extra,
    ]  # fmt: skip


class FakeSampler:
    """Returns `correct[answer]` right answers then wrong ones, so every c is known in advance."""

    def __init__(self, correct: dict[str, int]) -> None:
        self.correct, self.calls = correct, []

    def generate(self, prompts, n, seed):
        self.calls.append((len(prompts), n, seed))
        out = []
        for p in prompts:
            answer = {"1+1": "2", "2+2": "4", "3+4": "7", "5+5": "10"}[p]
            good = self.correct[answer]
            out.append([f"<answer>{answer}</answer>"] * good + ["<answer>-1</answer>"] * (n - good))
        return out


def test_scores_and_aggregates_exactly(tmp_path):
    sampler = FakeSampler({"2": 0, "4": 1, "7": 3, "10": 4})
    config = EvalConfig(
        model=str(tmp_path), out=str(tmp_path / "out"), benchmarks=[LOCAL], n=4, k=[1, 4], template="none",
        batch_size=8, verify_workers=1,
    )  # fmt: skip
    (tmp_path / "config.json").write_text("{}")  # a model dir is checked for, never loaded here
    results = evaluate(config, sampler=sampler)
    bench = results["benchmarks"]["eval_local"]
    cs = [0, 1, 3, 4]
    assert bench["num_problems"] == 4 and bench["num_scored"] == 4
    assert bench["pass@1"] == pytest.approx(np.mean(cs) / 4, abs=1e-12)
    expected4 = np.mean([float(exact_pass_at_k(4, c, 4)) for c in cs])  # = 3/4: only c=0 fails
    assert bench["pass@4"] == pytest.approx(expected4, abs=1e-12) and expected4 == 0.75
    assert results["average"]["pass@4"] == bench["pass@4"]
    assert results["avg"] == pytest.approx((bench["pass@1"] + bench["pass@4"]) / 2, abs=1e-12)
    # 8 sequences per call, n = 4: two problems per generate call
    assert [c[:2] for c in sampler.calls] == [(2, 4), (2, 4)]
    records = [json.loads(line) for line in (tmp_path / "out" / "eval_local.jsonl").read_text().splitlines()]
    assert [r["c"] for r in records] == cs
    assert records[2]["verdicts"] == [1.0, 1.0, 1.0, 0.0] and records[2]["answer"] == "7"
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| Method | eval_local P@1 | eval_local P@4 | Avg |" in md
    assert f"| {100 * bench['pass@1']:.1f} | 75.0 |" in md


def test_an_unparseable_gold_leaves_its_problem_unscored_even_with_an_empty_completion(tmp_path):
    """Review of 2026-11-26: an empty completion scored 0.0 without the gold being read, so the problem
    of an unparseable gold counted as scored with c = 0."""
    bench = tmp_path / "golds.jsonl"
    rows = [{"problem": "1+1", "answer": "2"}, {"problem": "2+2", "answer": r"\frac{no gold here}"}]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))

    class Sampler:
        def generate(self, prompts, n, seed):
            return [["", r"<answer>2</answer>"] for _ in prompts]

    config = EvalConfig(
        model=str(tmp_path), out=str(tmp_path / "out"), benchmarks=[str(bench)], n=2, k=[1], template="none",
        batch_size=4, verify_workers=1,
    )  # fmt: skip
    (tmp_path / "config.json").write_text("{}")
    (result,) = evaluate(config, sampler=Sampler())["benchmarks"].values()
    assert (result["num_scored"], result["unscored"], result["pass@1"]) == (1, [1], 0.5)


def test_chat_prompts_keep_the_template_s_one_bos(tmp_path):
    """Under --chat the rendered template already holds the BOS: tokenizing it must not add a second
    (Llama-style tokenizers add one by default)."""
    import torch
    from tokenizers import processors

    from oar_rl.tiny import build_char_tokenizer, tiny_qwen2

    tok = build_char_tokenizer()
    bos = tok.bos_token_id
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    tok.chat_template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert tok("1+1")["input_ids"] == [bos, *tok("1+1", add_special_tokens=False)["input_ids"]]
    config = EvalConfig(
        model=str(tmp_path), out=str(tmp_path / "out"), benchmarks=[LOCAL], n=1, k=[1], template="none",
        chat=True, max_new_tokens=2, temperature=0.0,
    )  # fmt: skip
    sampler = eval_sampling.TransformersSampler.__new__(eval_sampling.TransformersSampler)
    sampler.config, sampler.tokenizer, sampler.device = config, tok, torch.device("cpu")
    sampler.model = tiny_qwen2(len(tok), seed=0).eval()
    assert sampler.prompt_lengths(["1+1", "12+3"]) == [4, 5]  # <s>1+1, <s>12+3
    seen, generate = [], sampler.model.generate
    sampler.model.generate = lambda **kw: seen.append(kw["input_ids"]) or generate(**kw)
    sampler.generate(["1+1"], 1, seed=0)
    assert seen[0].tolist() == [[bos, *tok("1+1", add_special_tokens=False)["input_ids"]]]


def test_eval_end_to_end_and_resume(tiny_model_dir, tmp_path, monkeypatch):
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(_args(tiny_model_dir, full)) == 0
    results = json.loads((full / "results.json").read_text())
    bench = results["benchmarks"]["eval_local"]
    assert bench["template"] == results["config"]["template"] != "none"  # a file benchmark gets the template
    records = [json.loads(x) for x in (full / "eval_local.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    for r in records:
        assert len(r["completions"]) == 3 and len(r["verdicts"]) == 3
        assert r["c"] == sum(v == 1.0 for v in r["verdicts"])
    cs = np.array([r["c"] for r in records])
    assert bench["pass@2"] == pytest.approx(float(pass_at_k(3, cs, 2).mean()), abs=1e-12)
    assert (full / "results.md").read_text().startswith("| Method | eval_local P@1 | eval_local P@2 | Avg |")

    # interrupted after 2 problems (batch size 3 = n: one problem per generate call)
    real_generate = eval_sampling.TransformersSampler.generate
    calls = {"n": 0}

    def interrupting_generate(self, prompts, n, seed):
        if calls["n"] == 2:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real_generate(self, prompts, n, seed)

    monkeypatch.setattr(eval_sampling.TransformersSampler, "generate", interrupting_generate)
    assert main(_args(tiny_model_dir, part)) == 130
    assert len((part / "eval_local.jsonl").read_text().splitlines()) == 2
    assert not (part / "results.json").exists()
    with open(part / "eval_local.jsonl", "a") as f:
        f.write('{"index": 2, "prompt": "torn')  # a crash in the middle of a write
    monkeypatch.setattr(eval_sampling.TransformersSampler, "generate", real_generate)
    assert main(_args(tiny_model_dir, part)) == 0
    resumed = [json.loads(x) for x in (part / "eval_local.jsonl").read_text().splitlines()]
    assert resumed == records  # same completions, verdicts and counts as the uninterrupted run
    assert json.loads((part / "results.json").read_text()) == results

    # a finished run is not sampled again; --k only changes the report
    def must_not_sample(*args, **kwargs):
        raise AssertionError("nothing left to sample")

    monkeypatch.setattr(evaluation, "build_sampler", must_not_sample)
    assert main(_args(tiny_model_dir, part, "--k", "3")) == 0
    assert json.loads((part / "results.json").read_text())["benchmarks"]["eval_local"][
        "pass@3"
    ] == pytest.approx(float(pass_at_k(3, cs, 3).mean()), abs=1e-12)


def test_resume_inside_a_multi_problem_batch(tiny_model_dir, tmp_path, monkeypatch):
    """Two problems per generate call; the run dies after the first of them is written. The resumed run
    regenerates that batch with the same seed, keeps the written problem, and matches a clean run."""
    full, part = tmp_path / "full", tmp_path / "part"
    args = lambda out: [*_args(tiny_model_dir, out), "--batch-size", "6"]  # noqa: E731
    assert main(args(full)) == 0
    real_append = evaluation.append_record
    written = {"n": 0}

    def dying_append(path, record):
        if written["n"] == 1:
            raise KeyboardInterrupt
        written["n"] += 1
        real_append(path, record)

    monkeypatch.setattr(evaluation, "append_record", dying_append)
    assert main(args(part)) == 130
    assert [json.loads(x)["index"] for x in (part / "eval_local.jsonl").read_text().splitlines()] == [0]
    monkeypatch.setattr(evaluation, "append_record", real_append)
    assert main(args(part)) == 0
    assert (part / "eval_local.jsonl").read_text() == (full / "eval_local.jsonl").read_text()
    assert (part / "results.json").read_text() == (full / "results.json").read_text()


def test_changed_configuration_is_refused(tiny_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert main([*_args(tiny_model_dir, out), "--problems", "1"]) == 0
    before = (out / "eval_local.jsonl").read_text()
    assert main([*_args(tiny_model_dir, out), "--problems", "1", "--temperature", "0.7"]) == 2
    err = capsys.readouterr().err
    assert "different configuration" in err and "temperature 1.0 -> 0.7" in err
    assert (out / "eval_local.jsonl").read_text() == before


def test_resume_refuses_a_changed_gold_another_model_version_and_a_changed_timeout(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """Only the prompt was compared on resume: verdicts scored against an old gold, or produced by an
    earlier model saved to the same directory, were kept."""
    import shutil

    bench = tmp_path / "bench.jsonl"
    rows = [json.loads(line) for line in Path(LOCAL).read_text().splitlines() if line.strip()]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    out = tmp_path / "out"
    args = [*_args(str(model), out), "--benchmarks", str(bench), "--problems", "1"]
    assert main(args) == 0
    assert main(args) == 0  # the same: resumes (nothing to do)
    rows[0]["answer"] = 999
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(args) == 2
    assert "problem 0 was scored against the gold '2', the dataset now gives '999'" in capsys.readouterr().err
    rows[0]["answer"] = 2
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    another_version(model)
    assert main(args) == 2
    assert "another version of the model" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "out2")]) == 0
    assert main([*args, "--out", str(tmp_path / "out2"), "--verify-timeout", "3"]) == 2
    assert "verify_timeout None -> 3.0" in capsys.readouterr().err


def test_a_hub_model_is_pinned_to_one_commit_and_a_resume_at_another_is_refused(
    tiny_model_dir, tmp_path, monkeypatch, capsys, offline_hub
):
    """A Hub id was not fingerprinted: a resume after the branch moved would sample the remaining problems
    from the new upload. Offline here: the commit comes from the cache's refs (the Hub is asked online)."""
    import shutil

    cache = offline_hub
    old, new = "a" * 40, "b" * 40
    hub_cache(cache, "org/tiny", old, Path(tiny_model_dir))
    out = tmp_path / "out"
    args = [*_args("org/tiny", out), "--problems", "1"]
    assert main(args) == 0
    assert f"commit {old}" in capsys.readouterr().out
    meta = json.loads((out / "eval_local.meta.json").read_text())
    assert meta["model_fingerprint"] == f"hub:{old}" and meta["config"]["model"] == "org/tiny"

    changed = tmp_path / "changed"
    shutil.copytree(tiny_model_dir, changed)
    another_version(changed)
    hub_cache(cache, "org/tiny", new, changed)  # the branch moved
    resume = [*args[:-2], "--problems", "2"]
    assert main(resume) == 2
    err = capsys.readouterr().err
    assert f"hub:{old} -> hub:{new}" in err and "pin --revision" in err
    import transformers

    revisions: list[str | None] = []
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):

        def spy(*a, _load=cls.from_pretrained, **kw):
            revisions.append(kw.get("revision"))
            return _load(*a, **kw)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    assert main([*resume, "--revision", old]) == 0  # pinned to the commit it sampled from: resumes
    assert revisions and set(revisions) == {old}  # every loader got the pinned commit, not the branch
    assert len((out / "eval_local.jsonl").read_text().splitlines()) == 2
    assert main([*args, "--out", str(tmp_path / "o2"), "--revision", "main"]) == 0
    assert (
        json.loads((tmp_path / "o2" / "eval_local.meta.json").read_text())["model_fingerprint"]
        == f"hub:{new}"
    )

    meta_path = tmp_path / "o2" / "eval_local.meta.json"  # a run recorded before fingerprints existed
    meta_path.write_text(json.dumps(json.loads(meta_path.read_text()) | {"model_fingerprint": None}))
    with pytest.warns(UserWarning, match="cannot be checked against it"):
        assert main([*args, "--out", str(tmp_path / "o2"), "--revision", old]) == 0
    assert json.loads(meta_path.read_text())["model_fingerprint"] == f"hub:{old}"  # checked from now on
    assert main([*args, "--out", str(tmp_path / "o2")]) == 2

    _no_sampling(monkeypatch)
    assert main([*args, "--out", str(tmp_path / "o3"), "--model", "org/missing"]) == 2
    assert "cannot resolve the Hub model 'org/missing' at its default branch" in capsys.readouterr().err
    assert main([*_args(str(tiny_model_dir), tmp_path / "o4"), "--revision", old]) == 2
    assert "applies to a Hub id" in capsys.readouterr().err


def test_vllm_gets_the_pinned_commit_for_model_and_tokenizer(tiny_model_dir, monkeypatch):
    import sys
    import types

    from transformers import AutoTokenizer

    made: dict = {}

    class FakeLLM:
        def __init__(self, **kw):
            made.update(kw)

        def get_tokenizer(self):
            return AutoTokenizer.from_pretrained(tiny_model_dir)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM, SamplingParams=dict))
    config = EvalConfig(model="org/tiny", out="x", backend="vllm", chat=False, revision="c" * 40)
    eval_sampling.VLLMSampler(config)
    assert made["model"] == "org/tiny" and made["revision"] == made["tokenizer_revision"] == "c" * 40


def _no_sampling(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("sampling must not start on bad input")

    monkeypatch.setattr(evaluation, "build_sampler", fail)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--k", "1,4"], r"every k must be in \[1, --samples 3\], got \[4\]"),
        (["--benchmarks", "gsm9k"], "unknown benchmark 'gsm9k'"),
        (["--model", "/nonexistent/model"], "--model /nonexistent/model: no such local directory"),
        (["--top-p", "0"], r"--top-p must be in \(0, 1\], got 0.0"),
        (["--samples", "0", "--k", "1"], "--samples must be >= 1"),
        (["--benchmarks", "missing.jsonl"], "does not exist"),
        (["--k", "1,1"], r"--k repeats a value: \[1, 1\]"),
        (["--temperature", "nan"], "--temperature must be a finite number >= 0, got nan"),
        (["--verify-timeout", "nan"], "--verify-timeout must be a finite number of seconds > 0, got nan"),
        (
            ["--benchmarks", "wordproblems", "--template", "boxed"],
            "--template boxed does not apply to wordproblems",
        ),
    ],
)
def test_bad_input_exits_2_before_sampling(change, message, tiny_model_dir, tmp_path, monkeypatch, capsys):
    _no_sampling(monkeypatch)
    args = _args(tiny_model_dir, tmp_path / "out")
    for flag, value in zip(change[::2], change[1::2], strict=True):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not (tmp_path / "out" / "results.json").exists()


def test_empty_dataset_and_missing_vllm(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import importlib.util

    _no_sampling(monkeypatch)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    monkeypatch.setattr(
        "oar_rl.data.load",
        lambda *a, **k: __import__("datasets").Dataset.from_dict({"prompt": [], "answer": []}),
    )
    args = _args(tiny_model_dir, tmp_path / "out")
    args[args.index("--benchmarks") + 1] = str(empty)
    assert main(args) == 2
    assert "is empty" in capsys.readouterr().err
    monkeypatch.undo()
    _no_sampling(monkeypatch)
    if importlib.util.find_spec("vllm") is None:
        assert main([*_args(tiny_model_dir, tmp_path / "out"), "--backend", "vllm"]) == 2
        assert "needs vLLM" in capsys.readouterr().err


def test_chat_needs_a_chat_template(tiny_model_dir, tmp_path, capsys):
    assert main([*_args(tiny_model_dir, tmp_path / "out"), "--chat"]) == 2
    assert "has no chat template" in capsys.readouterr().err
    assert not (tmp_path / "out" / "eval_local.meta.json").exists()


def test_argparse_rejects_bad_choices(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["--model", "m", "--out", str(tmp_path), "--backend", "tgi"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["--model", "m", "--out", str(tmp_path), "--k", "one"])


def test_embedded_tasks_are_benchmarks_of_their_named_splits():
    """A registered task's name is a benchmark (oar_rl.tasks): its held-out split unless told, the same
    rows as its generator gives (arithmetic: what `data.load` always gave eval)."""
    from oar_rl import data
    from oar_rl.data import wordproblems

    assert evaluation.parse_benchmark("arithmetic") == ("arithmetic", "eval", "arithmetic-eval")
    assert evaluation.parse_benchmark("arithmetic:hard") == ("arithmetic", "hard", "arithmetic-hard")
    assert evaluation.parse_benchmark("wordproblems") == ("wordproblems", "eval", "wordproblems-eval")
    got = evaluation.load_benchmark("arithmetic", "eval", "answer-tag", 5)
    assert got[:] == data.load("arithmetic", "eval", template=None, limit=5)[:]
    rows = evaluation.load_benchmark("wordproblems", "eval", "answer-tag", 3)
    assert rows["prompt"] == [p.prompt for p in wordproblems.split_problems("eval", 3)]
    with pytest.raises(ValueError, match="split 'hard' is not valid for task 'wordproblems'"):
        evaluation.load_benchmark("wordproblems", "hard", None, 3)


def test_plan_batches():
    # problems x samples per call never exceed the batch size; every problem gets exactly n samples
    for num, n, bs in [(5, 3, 7), (4, 4, 4), (3, 10, 4), (1, 1, 1), (7, 2, 64)]:
        calls = evaluation.plan_batches(num, n, bs)
        assert all(len(idx) * m <= max(bs, 1) for idx, m, _ in calls)
        got = {i: 0 for i in range(num)}
        for idx, m, _ in calls:
            for i in idx:
                got[i] += m
        assert got == {i: n for i in range(num)}


# ---------------------------------------------------------------------------------------------------- issue 9


@pytest.fixture(scope="module")
def short_model_dir(tmp_path_factory) -> str:
    """A tiny Qwen2 with only 24 positions."""
    from oar_rl.tiny import build_char_tokenizer, tiny_qwen2

    path = tmp_path_factory.mktemp("short-model")
    tok = build_char_tokenizer()
    tiny_qwen2(len(tok), seed=0, hidden_size=32, num_layers=1, max_position_embeddings=24).save_pretrained(
        path
    )
    tok.save_pretrained(path)
    return str(path)


def test_prompt_longer_than_the_positions_is_refused_before_sampling(
    short_model_dir, tmp_path, monkeypatch, capsys
):
    bench = tmp_path / "long.jsonl"
    rows = [{"question": "1+1", "answer": "2"}, {"question": "what is " + "1+" * 12 + "1", "answer": "13"}]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [*_args(short_model_dir, tmp_path / "out"), "--template", "none"]
    args[args.index("--benchmarks") + 1] = str(bench)

    def must_not_sample(*a, **k):
        raise AssertionError("sampling must not start")

    monkeypatch.setattr(eval_sampling.TransformersSampler, "generate", must_not_sample)
    assert main(args) == 2
    err = capsys.readouterr().err
    # 24 positions - 6 new tokens = 18 prompt tokens at most; problem 1 has more (one token per character)
    assert "1 prompt(s) do not fit the model" in err
    assert "must be <= 24 positions (max_position_embeddings of" in err and "at most 18 tokens" in err
    assert re.search(r"too long: long problem 1 \(\d+ tokens\)\.", err) and "--truncate-prompts" in err
    assert not (tmp_path / "out" / "long.meta.json").exists()
    args[args.index("--max-new-tokens") + 1] = "30"
    assert main(args) == 2
    assert (
        "--max-new-tokens 30 leaves no room for a prompt: the model has 24 positions"
        in capsys.readouterr().err
    )

    # --truncate-prompts (either spelling) keeps the last 18 tokens and samples
    monkeypatch.undo()
    args[args.index("--max-new-tokens") + 1] = "6"
    seen = []
    real_generate = eval_sampling.TransformersSampler.generate

    def spy(self, prompts, n, seed):
        seen.append(self.tokenizer(prompts, truncation=True, max_length=self.prompt_budget())["input_ids"])
        return real_generate(self, prompts, n, seed)

    monkeypatch.setattr(eval_sampling.TransformersSampler, "generate", spy)
    for flag, out in (("--truncate-prompts", "a"), ("--truncate_prompts", "b")):
        args[args.index("--out") + 1] = str(tmp_path / out)
        assert main([*args, flag]) == 0
        records = [json.loads(x) for x in (tmp_path / out / "long.jsonl").read_text().splitlines()]
        assert [len(r["completions"]) for r in records] == [3, 3]
        meta = json.loads((tmp_path / out / "long.meta.json").read_text())
        assert meta["config"]["truncate_prompts"] is True
    assert max(len(ids) for call in seen for ids in call) == 18


def test_gsm8k_file_by_path_is_scored_on_the_final_answer(tmp_path):
    """A GSM8K copy passed as a file (not by name): the gold is '19', not the worked solution."""
    bench = tmp_path / "gsm8k_copy.jsonl"
    bench.write_text((FIXTURES / "gsm8k" / "test.jsonl").read_text())

    class Right:
        def generate(self, prompts, n, seed):
            return [["<answer>19</answer>", "<answer>1234</answer>", "<answer>-3</answer>"][:n]] * len(
                prompts
            )

    (tmp_path / "config.json").write_text("{}")
    config = EvalConfig(
        model=str(tmp_path), out=str(tmp_path / "out"), benchmarks=[str(bench)], n=3, k=[1], template="none",
        verify_workers=1,
    )  # fmt: skip
    results = evaluate(config, sampler=Right())
    records = [json.loads(x) for x in (tmp_path / "out" / "gsm8k_copy.jsonl").read_text().splitlines()]
    assert [r["answer"] for r in records] == ["19", "1234", "-3"]
    assert [r["verdicts"] for r in records] == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert results["benchmarks"]["gsm8k_copy"]["pass@1"] == pytest.approx(1 / 3)


def test_position_limit_of_model_configs():
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    from oar_rl.eval.sampling import config_position_limit

    assert config_position_limit(Qwen2Config(max_position_embeddings=4096)) == (
        4096,
        "max_position_embeddings",
    )
    assert config_position_limit(GPT2Config(n_positions=1000))[0] == 1000  # GPT-2 names it n_positions
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    limit, source = config_position_limit(Qwen2Config(max_position_embeddings=32768, rope_scaling=yarn))
    assert limit == 131072 and "yarn" in source
    llama3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
              "low_freq_factor": 1.0, "high_freq_factor": 4.0}  # fmt: skip
    assert (
        config_position_limit(LlamaConfig(max_position_embeddings=131072, rope_scaling=llama3))[0] == 131072
    )

    class NoLimit:
        pass

    assert config_position_limit(NoLimit()) is None


def test_the_hub_is_asked_for_the_commit_first_and_the_cache_read_when_it_cannot_answer(
    tiny_model_dir, tmp_path, monkeypatch
):
    import types

    import huggingface_hub
    from huggingface_hub import constants

    from oar_rl.model_identity import resolve_hub_commit

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    asked: list = []

    def answer(self, repo_id, *, revision=None, timeout=None, **kw):
        asked.append((repo_id, revision, timeout))
        return types.SimpleNamespace(sha="d" * 40)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", answer)
    assert resolve_hub_commit("org/tiny", "v1") == "d" * 40 and asked == [("org/tiny", "v1", 15.0)]
    assert resolve_hub_commit("org/tiny", "e" * 40) == "e" * 40 and len(asked) == 1  # a commit: not asked

    def unreachable(self, repo_id, **kw):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    with pytest.raises(ValueError, match=r"the Hub could not be asked: OSError: no network"):
        resolve_hub_commit("org/tiny", None)
    hub_cache(tmp_path / "hub", "org/tiny", "a" * 40, Path(tiny_model_dir))
    assert resolve_hub_commit("org/tiny", None) == "a" * 40  # the cache's refs/main
