"""Dataset loaders on tiny local fixtures in each Hub schema (tests/fixtures), templates, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oar_rl import data
from oar_rl.data import benchmarks
from oar_rl.data.templates import BOXED_TEMPLATE, apply_template

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixture_dir(monkeypatch):
    monkeypatch.setenv(benchmarks.DATA_DIR_ENV, str(FIXTURES))


# name -> (expected answers, a question fragment, columns kept from the source)
EXPECTED = {
    "gsm8k": (["19", "1234", "-3"], "Tom has 3 apples", {"raw_answer"}),
    "math500": ([r"\left( 3, \frac{\pi}{2} \right)", r"\frac{3}{4}"], "rectangular", {"solution", "level"}),
    "aime24": (["204", "25"], "ordered pairs", {"id", "url", "year"}),
    "aime25": (["70", "588"], "integer bases", {"id", "url"}),
    "amc23": (["27", "1.5"], "45$ miles", {"id", "url"}),
    "dapo-math": (["5", "5"], "What is $2+3$?", {"solution", "reward_model", "extra_info"}),
    "dapo-math-raw": (["5", "6", "42"], "What is $2+3$?", {"reward_model", "extra_info"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hub_schemas_from_fixtures(name, fixture_dir):
    answers, fragment, kept = EXPECTED[name]
    ds = data.load(name)
    assert ds.column_names[:2] == ["prompt", "answer"]
    assert kept <= set(ds.column_names)
    assert list(ds["answer"]) == answers
    assert all(isinstance(a, str) for a in ds["answer"])
    assert fragment in ds[0]["question"] and fragment in ds[0]["prompt"]
    assert ds[0]["prompt"] == apply_template(ds[0]["question"], "answer-tag")
    assert "<answer>" in ds[0]["prompt"]


def test_gsm8k_keeps_the_worked_solution(fixture_dir):
    ds = data.load("gsm8k", template=None)
    assert ds[1]["raw_answer"].endswith("#### 1,234")
    assert ds[0]["prompt"] == ds[0]["question"]  # template None: raw question
    with pytest.raises(ValueError, match="####"):
        benchmarks.gsm8k_answer("no marker here")


def test_gsm8k_style_local_file_is_reduced_to_the_final_answer(tmp_path):
    """A GSM8K copy passed by path (not by name): answer = the final answer, the solution kept (issue 9)."""
    path = tmp_path / "my_gsm8k_test.jsonl"
    path.write_text((FIXTURES / "gsm8k" / "test.jsonl").read_text())
    ds = data.load(str(path), template=None)
    assert list(ds["answer"]) == ["19", "1234", "-3"]
    assert ds[1]["raw_answer"].endswith("#### 1,234") and "<<1000+234=1234>>" in ds[1]["raw_answer"]
    # a column where only some rows are worked solutions is refused, naming a row without the marker
    rows = [{"question": "a", "answer": "1+1=2\n#### 2"}, {"question": "b", "answer": "7"}]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"'#### <answer>'\) in 1 of 2 rows, but row 1 has none: '7'"):
        data.load(str(mixed))
    # plain answers (and a '####' inside a longer line) are left alone
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"question": "a", "answer": "x #### 2"}) + "\n")
    assert list(data.load(str(plain))["answer"]) == ["x #### 2"]


def test_raw_dapo_is_deduplicated_and_unwrapped(fixture_dir):
    raw_file = FIXTURES / "dapo-math-raw" / "train.jsonl"
    ds = data.load("dapo-math", data_files=str(raw_file), template="boxed")  # raw schema, processed name
    assert list(ds["question"]) == ["What is $2+3$?", "What is $10-4$?", r"What is $7 \cdot 6$?"]
    assert list(ds["answer"]) == ["5", "6", "42"]
    assert [e["index"] for e in ds["extra_info"]] == ["a1", "a2", "a3"]  # first occurrence kept
    assert ds[0]["prompt"] == BOXED_TEMPLATE.format(question="What is $2+3$?")
    assert "Answer:" not in "".join(ds["prompt"])
    assert data.load("dapo-math-raw", limit=2, template=None)["question"] == [
        "What is $2+3$?",
        "What is $10-4$?",
    ]


def test_hub_path_calls_load_dataset(monkeypatch):
    """Without a local override, `datasets.load_dataset` is called with the spec's id, config and split."""
    import datasets

    calls = []
    real_load_dataset = datasets.load_dataset

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        files = {"gsm8k": "gsm8k/test", "dapo-math": "dapo-math/train", "amc23": "amc23/test"}
        key = next(k for k, v in benchmarks.HUB_DATASETS.items() if v.hub_id == path)
        return real_load_dataset("json", data_files=str(FIXTURES / f"{files[key]}.jsonl"), split="train")

    monkeypatch.delenv(benchmarks.DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert list(data.load("gsm8k")["answer"]) == ["19", "1234", "-3"]
    assert list(data.load("dapo-math", limit=1)["answer"]) == ["5"]
    assert list(data.load("amc23", "test")["answer"]) == ["27", "1.5"]
    assert calls == [
        ("openai/gsm8k", "main", "test"),
        ("open-r1/DAPO-Math-17k-Processed", "en", "train"),
        ("math-ai/amc23", None, "test"),
    ]


def test_specs_match_the_hub():
    specs = benchmarks.HUB_DATASETS
    assert (specs["gsm8k"].hub_id, specs["gsm8k"].config, specs["gsm8k"].default_split) == (
        "openai/gsm8k",
        "main",
        "test",
    )
    assert (
        specs["math500"].hub_id == "HuggingFaceH4/MATH-500" and specs["math500"].question_column == "problem"
    )
    assert specs["aime24"].hub_id == "HuggingFaceH4/aime_2024" and specs["aime24"].default_split == "train"
    assert specs["aime25"].hub_id == "yentinglin/aime_2025"
    assert specs["amc23"].hub_id == "math-ai/amc23" and specs["amc23"].question_column == "question"
    assert specs["dapo-math-raw"].hub_id == "BytedTsinghua-SIA/DAPO-Math-17k" and specs["dapo-math-raw"].dedup


def test_local_files_and_column_mapping(tmp_path):
    rows = [{"q": "What is 1+1?", "gold": 2, "extra": "x"}, {"q": "What is 2+2?", "gold": 4, "extra": "y"}]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = data.load(str(path), question_column="q", answer_column="gold", template="boxed")
    assert list(ds["answer"]) == ["2", "4"] and list(ds["extra"]) == ["x", "y"]
    assert ds[0]["prompt"].startswith("What is 1+1?\nPlease reason step by step")
    with pytest.raises(ValueError, match=r"no answer column .*columns found: \['q', 'gold', 'extra'\]"):
        data.load(str(path), question_column="q")
    with pytest.raises(ValueError, match="column 'nope' not found"):
        data.load(str(path), question_column="nope", answer_column="gold")

    # parquet, and default column names
    from datasets import Dataset

    pq = tmp_path / "mine.parquet"
    Dataset.from_dict({"problem": ["a", "b", "c"], "solution": ["1", "2", "3"]}).to_parquet(str(pq))
    ds = data.load(pq, template=None, limit=2)
    assert list(ds["prompt"]) == ["a", "b"] and list(ds["answer"]) == ["1", "2"]

    # a local file in the raw DAPO schema is recognised
    ds = data.load(str(FIXTURES / "dapo-math-raw" / "train.jsonl"), template=None)
    assert len(ds) == 3


def test_a_row_without_a_gold_is_an_error_naming_it(tmp_path):
    """A null gold became the text "None" (which math-verify parses, and "\\boxed{None}" matched)."""
    path = tmp_path / "golds.jsonl"
    rows = [{"problem": "q0", "answer": 2}, {"problem": "q1", "answer": None}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    missing = r"1 row\(s\) have no gold answer \(None/NaN in column 'answer'\), first rows \[1\]"
    with pytest.raises(ValueError, match=missing):
        data.load(str(path), template=None)
    with pytest.raises(ValueError, match="no gold"):
        data.benchmarks.answer_to_str(float("nan"))


def test_missing_answer_column_in_a_hub_schema(tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "x", "solution": "y"}) + "\n")
    with pytest.raises(
        ValueError, match=r"answer column 'answer' not found; columns found: \['problem', 'solution'\]"
    ):
        data.load("math500", data_files=str(bad))


def test_bad_names_and_arguments(fixture_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'gsm9k'; valid names: gsm8k, math500"):
        data.load("gsm9k")
    with pytest.raises(ValueError, match="unknown template 'latex'"):
        data.load("gsm8k", template="latex")
    with pytest.raises(ValueError, match="limit"):
        data.load("gsm8k", limit=0)
    with pytest.raises(ValueError, match="does not exist"):
        data.load(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="unsupported data file"):
        data.load("gsm8k", data_files=str(tmp_path / "x.csv"))
    with pytest.raises(ValueError, match="single split"):
        data.load(str(FIXTURES / "eval_local.jsonl"), "test")


def test_templates():
    assert apply_template("Q?", None) == "Q?" and apply_template("Q?", "none") == "Q?"
    assert apply_template("Q?", "boxed") == (
        "Q?\nPlease reason step by step, and put your final answer within \\boxed{}."
    )
    tagged = apply_template(" Q? ", "answer-tag")
    assert "User: Q?\nAssistant:" in tagged and "<answer>" in tagged and "</answer>" in tagged


def test_arithmetic_delegates():
    from oar_rl.data import arithmetic

    ds = data.load("arithmetic", "eval", limit=3)
    ref = arithmetic.load("eval")
    assert list(ds["prompt"]) == list(ref["prompt"])[:3] and list(ds["answer"]) == list(ref["answer"])[:3]
    with pytest.raises(ValueError, match="answer-tag"):
        data.load("arithmetic", template="boxed")


def test_olympiad_and_math_style_golds_are_the_final_answer_or_an_error(tmp_path):
    """OlympiadBench's schema (`solution` a list of worked solutions, `final_answer` a list): the gold was
    the worked solutions' text (answers were tried before final_answer), or str() of a list."""
    path = tmp_path / "olympiad.jsonl"
    rows = [
        {"question": "q0", "solution": ["We have x=3, so $x=3$."], "final_answer": ["$3$"]},
        {"question": "q1", "solution": ["Since a^2-1 is even, $a=7$ works."], "final_answer": ["$7$"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert list(data.load(str(path), template=None)["answer"]) == ["$3$", "$7$"]
    rows[1]["final_answer"] = ["$2$", "$3$"]  # a multi-answer problem: which one to score is a guess
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"row 1, column 'final_answer': a gold answer is a list of 2"):
        data.load(str(path), template=None)
    with pytest.raises(ValueError, match=r"a gold answer is a dict"):
        benchmarks.answer_to_str({"a": 1})
    # a MATH-style file with only worked solutions: refused unless the column is named
    math = tmp_path / "math.jsonl"
    long = "We expand the square and collect the terms, which gives a quadratic in x; so \\boxed{4}."
    math.write_text("".join(json.dumps({"problem": f"p{i}", "solution": long}) + "\n" for i in range(3)))
    with pytest.raises(ValueError, match=r"column 'solution' holds worked solutions .*answer_column="):
        data.load(str(math), template=None)
    assert data.load(str(math), template=None, answer_column="solution")["answer"][0] == long


def test_a_split_less_data_dir_file_stands_for_the_default_split_only(tmp_path, monkeypatch):
    """$OAR_RL_DATA_DIR/gsm8k.jsonl was returned for every split: `oar-rl train --dataset gsm8k` (split
    train) would have trained on a copy of the test set."""
    monkeypatch.setenv(benchmarks.DATA_DIR_ENV, str(tmp_path))
    rows = [{"question": "Tom has 3 apples. How many?", "answer": "He has 3.\n#### 3"}]
    (tmp_path / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert list(data.load("gsm8k")["answer"]) == ["3"]  # the default split, test
    assert list(data.load("gsm8k", "test")["answer"]) == ["3"]
    with pytest.raises(ValueError, match=r"split 'train' asked for, but .* has only .*gsm8k\.jsonl"):
        data.load("gsm8k", "train")
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 2))
    assert len(data.load("gsm8k", "train")) == 2
