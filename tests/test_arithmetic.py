"""The synthetic arithmetic task: reproducibility, correct worked solutions, an exact checker."""

from __future__ import annotations

import random
import re

import pytest

from oar_rl.data import arithmetic as A
from oar_rl.tiny import ALPHABET, build_char_tokenizer


def _reference_value(expression: str) -> int:
    """Python's own evaluation of `a+b*c-d` (same precedence, left-to-right): the slow, obvious reference."""
    assert re.fullmatch(r"\d+([+*-]\d+)+", expression), expression
    return eval(expression)  # only digits and + - * (asserted above)


def test_load_is_reproducible_and_prefix_stable():
    a = A.load("train", 30)
    b = A.load("train", 30)
    assert a.column_names == ["prompt", "answer", "solution"]
    assert a.to_dict() == b.to_dict()
    longer = A.load("train", 40).to_dict()
    assert {k: v[:30] for k, v in longer.items()} == a.to_dict()
    assert A.load("eval", 20).to_dict() == A.load("eval", 20).to_dict()
    assert A.load("eval", 20)["prompt"] != A.load("hard", 20)["prompt"]
    # A different seed gives different problems.
    assert [p.expression for p in A.generate(A.DEFAULT_CONFIG, 20, 1)] != [
        p.expression for p in A.generate(A.DEFAULT_CONFIG, 20, 2)
    ]


def test_heldout_splits_do_not_overlap_train():
    train = {p.expression for p in A.split_problems("train")}
    for split in ("eval", "hard"):
        held = A.split_problems(split, 200)
        assert not train & {p.expression for p in held}
    assert all(len(p.steps) == 3 for p in A.split_problems("hard", 50))


@pytest.mark.parametrize("split", ["train", "eval", "hard"])
def test_every_solution_is_correct(split):
    for p in A.split_problems(split, 300):
        value = _reference_value(p.expression)
        assert value == p.answer
        assert p.expression in p.prompt
        assert A.check_solution_arithmetic(p.solution)
        assert p.solution.endswith(f"<answer>{value}</answer>")
        assert A.check(p.solution, str(value))
        # Causal structure: each step's operands come from the prompt or from an earlier result.
        available = [int(x) for x in re.findall(r"\d+", p.expression)]
        for a, op, b, r in p.steps:
            for x in (a, b):
                assert x in available, (p, x)
                available.remove(x)
            available.append(r)
            assert f"{a}{op}{b}={r}." in p.solution
            assert 0 <= r <= A.DEFAULT_CONFIG.max_result
        assert available == [p.answer]
        assert set(p.prompt + p.solution) <= set(ALPHABET)


def test_solve_steps_hand_worked():
    # 37+15-8*2: the product first (16), then left to right 37+15=52, 52-16=36.
    assert A.solve_steps([37, 15, 8, 2], ["+", "-", "*"]) == [
        (8, "*", 2, 16),
        (37, "+", 15, 52),
        (52, "-", 16, 36),
    ]
    # 3*4*5-6: 3*4=12, 12*5=60, then 60-6=54.
    assert A.solve_steps([3, 4, 5, 6], ["*", "*", "-"]) == [
        (3, "*", 4, 12),
        (12, "*", 5, 60),
        (60, "-", 6, 54),
    ]
    with pytest.raises(ValueError, match="len"):
        A.solve_steps([1, 2], ["+", "+"])


def test_filler_knob():
    none = A.generate(A.ArithmeticConfig(filler_prob=0.0), 100, 0)
    lots = A.generate(A.ArithmeticConfig(filler_prob=1.0), 100, 0)
    assert not any(f in p.solution for p in none for f in A.FILLERS)
    assert all(any(f in p.solution for f in A.FILLERS) for p in lots)
    # Filler does not change the problems or the answers, only the text.
    assert [p.answer for p in none] != [] and all(A.check_solution_arithmetic(p.solution) for p in lots)


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("So 52-16=36.<answer>36</answer>", "36", True),
        ("<answer> 36 </answer>", "36", True),
        ("<answer>36</answer>", 36, True),
        ("<answer>1</answer> wait <answer>36</answer>", "36", True),  # the last tag counts
        ("<answer>36</answer> wait <answer>1</answer>", "36", False),
        ("<answer>37</answer>", "36", False),
        ("<answer>36.0</answer>", "36", False),
        ("<answer>3 6</answer>", "36", False),
        ("<answer>36", "36", False),  # unclosed
        ("36</answer>", "36", False),
        ("<answer></answer>", "36", False),
        ("", "36", False),
        ("the answer is 36", "36", False),
        ("<answer>-4</answer>", "-4", True),
        ("<answer>4</answer>", "-4", False),
        ("<answer>36x</answer>", "36", False),
        ("<ANSWER>36</ANSWER>", "36", False),
    ],
)
def test_checker_is_exact(completion, answer, expected):
    assert A.check(completion, answer) is expected


def test_checker_rejects_non_integer_gold():
    with pytest.raises(ValueError, match="gold"):
        A.check("<answer>1</answer>", "one")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_operands": 1},
        {"min_operands": 3, "max_operands": 2},
        {"max_value": 0},
        {"max_factor": 1},
        {"ops": ""},
        {"ops": "+/"},
        {"ops": "++"},
        {"filler_prob": 1.5},
        {"max_result": 5},
    ],
)
def test_bad_knobs_raise(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        A.ArithmeticConfig(**kwargs)


def test_bad_split_and_size():
    with pytest.raises(ValueError, match="valid splits"):
        A.load("test")
    with pytest.raises(ValueError, match="n="):
        A.generate(A.DEFAULT_CONFIG, -1, 0)


def test_tokenizer_round_trip():
    tok = build_char_tokenizer()
    rng = random.Random(0)
    problems = A.split_problems("eval", 50)
    texts = [p.prompt + p.solution for p in problems] + ["".join(rng.choice(ALPHABET) for _ in range(80))]
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)  # one token per character
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text
