"""A synthetic multi-step integer arithmetic task: the first embedded task.

A problem is an expression such as ``37+15-8*2``; its worked solution reads like a short reasoning
trace that computes every intermediate result and ends in ``<answer>N</answer>``::

    prompt:   "Compute 37+15-8*2."
    solution: "First 8*2=16. Then 37+15=52. Let me see. So 52-16=36.<answer>36</answer>"

The trace has a real causal structure, which is what token-level credit assignment is about: every
step's operands are either numbers from the prompt or results of earlier steps, so a wrong digit in
an intermediate result propagates to the answer, while the connective words ("First", "Then") and the
filler phrases ("Let me see.") do not change it.

Solution order: all multiplications first (left to right, with their results substituted), then the
additions and subtractions left to right -- ordinary operator precedence, one binary operation per
step. Every intermediate result is kept non-negative (problems that would go negative are redrawn), so
answers are plain digit strings.

There is no counterpart in the paper (which trains on DAPO-Math); the task exists so the method can
be demonstrated and tested end to end on a laptop CPU with a char-level model. All characters are in
`oar_rl.tiny.ALPHABET`.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from datasets import Dataset

Split = Literal["train", "eval", "hard"]

PROMPT_TEMPLATES = ("Compute {expr}.", "What is {expr}?", "Evaluate {expr}.", "Find {expr}.")
FIRST_WORDS = ("First", "Start with", "Begin with")
NEXT_WORDS = ("Then", "Next", "Now")
LAST_WORDS = ("So", "Finally", "Thus")
FILLERS = ("Let me see.", "Ok.", "Hmm.", "Good.", "Easy.", "Right.")

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_INT_RE = re.compile(r"\s*([+-]?\d+)\s*")


@dataclass(frozen=True)
class ArithmeticConfig:
    """Difficulty knobs of the arithmetic task (frozen: part of the warm-start recipe hash)."""

    min_operands: int = 3
    """Fewest numbers in an expression (>= 2)."""
    max_operands: int = 3
    """Most numbers in an expression (>= min_operands)."""
    max_value: int = 30
    """Operands of + and - are drawn from 1..max_value."""
    max_factor: int = 9
    """Operands of * are drawn from 2..max_factor (keeps products small)."""
    ops: str = "+-*"
    """Operators to use: a non-empty subset of '+-*'."""
    filler_prob: float = 0.3
    """Probability of a filler phrase after each step (filler does not affect the answer)."""
    max_result: int = 999
    """Problems with any intermediate result above this (or below 0) are redrawn."""

    def __post_init__(self) -> None:
        if self.min_operands < 2:
            raise ValueError(f"min_operands={self.min_operands} must be >= 2")
        if self.max_operands < self.min_operands:
            raise ValueError(f"max_operands={self.max_operands} must be >= min_operands={self.min_operands}")
        if self.max_value < 1:
            raise ValueError(f"max_value={self.max_value} must be >= 1")
        if self.max_factor < 2:
            raise ValueError(f"max_factor={self.max_factor} must be >= 2")
        if not self.ops or set(self.ops) - set("+-*") or len(set(self.ops)) != len(self.ops):
            raise ValueError(f"ops={self.ops!r} must be a non-empty subset of '+-*' without repeats")
        if not 0.0 <= self.filler_prob <= 1.0:
            raise ValueError(f"filler_prob={self.filler_prob} must be in [0, 1]")
        if self.max_result < self.max_value:
            raise ValueError(f"max_result={self.max_result} must be >= max_value={self.max_value}")

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_CONFIG = ArithmeticConfig()
HARD_CONFIG = ArithmeticConfig(min_operands=4, max_operands=4)
"""Held-out and harder: one more operand (three steps instead of two)."""

# (config, number of problems, seed) per split. Seeds differ so the splits are drawn independently;
# `load` also removes eval/hard problems whose expression occurs in the train split.
SPLITS: dict[str, tuple[ArithmeticConfig, int, int]] = {
    "train": (DEFAULT_CONFIG, 20_000, 1234),
    "eval": (DEFAULT_CONFIG, 500, 5678),
    "hard": (HARD_CONFIG, 500, 9012),
}


@dataclass(frozen=True)
class Problem:
    expression: str
    prompt: str
    solution: str
    answer: int
    steps: tuple[tuple[int, str, int, int], ...]
    """Each step as (left, op, right, result), in solution order."""


def _apply(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"unknown operator {op!r}; valid: '+', '-', '*'")


def _draw_expression(cfg: ArithmeticConfig, rng: random.Random) -> tuple[list[int], list[str]]:
    n = rng.randint(cfg.min_operands, cfg.max_operands)
    ops = [rng.choice(cfg.ops) for _ in range(n - 1)]
    nums = []
    for i in range(n):
        touches_mul = (i > 0 and ops[i - 1] == "*") or (i < n - 1 and ops[i] == "*")
        nums.append(rng.randint(2, cfg.max_factor) if touches_mul else rng.randint(1, cfg.max_value))
    return nums, ops


def solve_steps(nums: list[int], ops: list[str]) -> list[tuple[int, str, int, int]]:
    """The solution's steps for `nums[0] ops[0] nums[1] ...`: multiplications first, then left to right."""
    if len(ops) != len(nums) - 1:
        raise ValueError(f"need len(ops) == len(nums) - 1, got {len(ops)} ops for {len(nums)} numbers")
    nums, ops = list(nums), list(ops)
    steps = []
    while "*" in ops:
        i = ops.index("*")
        r = nums[i] * nums[i + 1]
        steps.append((nums[i], "*", nums[i + 1], r))
        nums[i : i + 2] = [r]
        del ops[i]
    acc = nums[0]
    for op, b in zip(ops, nums[1:], strict=True):
        r = _apply(acc, op, b)
        steps.append((acc, op, b, r))
        acc = r
    return steps


def make_problem(cfg: ArithmeticConfig, rng: random.Random) -> Problem:
    """Draw one problem (redrawing until every intermediate result is within [0, max_result])."""
    while True:
        nums, ops = _draw_expression(cfg, rng)
        steps = solve_steps(nums, ops)
        if all(0 <= s[3] <= cfg.max_result for s in steps):
            break
    expr = str(nums[0]) + "".join(f"{op}{b}" for op, b in zip(ops, nums[1:], strict=True))
    prompt = rng.choice(PROMPT_TEMPLATES).format(expr=expr)
    parts = []
    for k, (a, op, b, r) in enumerate(steps):
        if k == len(steps) - 1 and k > 0:
            word = rng.choice(LAST_WORDS)
        elif k == 0:
            word = rng.choice(FIRST_WORDS)
        else:
            word = rng.choice(NEXT_WORDS)
        parts.append(f"{word} {a}{op}{b}={r}.")
        if k < len(steps) - 1 and rng.random() < cfg.filler_prob:
            parts.append(rng.choice(FILLERS))
    answer = steps[-1][3]
    solution = " ".join(parts) + f"<answer>{answer}</answer>"
    return Problem(expr, prompt, solution, answer, tuple(steps))


def generate(cfg: ArithmeticConfig, n: int, seed: int) -> list[Problem]:
    """`n` problems drawn with a private RNG seeded by `seed` (reproducible, no global state)."""
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    rng = random.Random(seed)
    return [make_problem(cfg, rng) for _ in range(n)]


def to_dataset(problems: list[Problem]) -> Dataset:
    """A `datasets.Dataset` with columns prompt, answer (str), solution."""
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "prompt": [p.prompt for p in problems],
            "answer": [str(p.answer) for p in problems],
            "solution": [p.solution for p in problems],
        }
    )


def split_problems(split: str, n: int | None = None) -> list[Problem]:
    """The problems of a named split; eval/hard exclude expressions that occur in train."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    cfg, size, seed = SPLITS[split]
    size = size if n is None else n
    if size < 0:
        raise ValueError(f"n={n} must be >= 0")
    if split == "train":
        return generate(cfg, size, seed)
    train_exprs = {p.expression for p in _train_problems()}
    rng = random.Random(seed)
    out: list[Problem] = []
    while len(out) < size:
        p = make_problem(cfg, rng)
        if p.expression not in train_exprs:
            out.append(p)
    return out


_TRAIN_CACHE: list[Problem] | None = None


def _train_problems() -> list[Problem]:
    global _TRAIN_CACHE
    if _TRAIN_CACHE is None:
        cfg, size, seed = SPLITS["train"]
        _TRAIN_CACHE = generate(cfg, size, seed)
    return _TRAIN_CACHE


def load(split: str, n: int | None = None) -> Dataset:
    """The split ("train", "eval" or held-out, harder "hard") as a `Dataset` (prompt, answer, solution).

    Deterministic: the same split and `n` always give the same rows. `n` truncates or extends the
    split (a longer split continues the same random stream, so `load(s, n)` is a prefix of
    `load(s, m)` for n <= m).
    """
    return to_dataset(split_problems(split, n))


def extract_answer(completion: str) -> str | None:
    """The text inside the last `<answer>...</answer>` tag, or None when there is none."""
    found = _ANSWER_RE.findall(completion)
    return found[-1] if found else None


def check(completion: str, answer: str | int) -> bool:
    """Exact checker: the last `<answer>` tag holds an integer equal to `answer` (whitespace ignored).

    Anything else -- no tag, an unclosed tag, a non-integer, a float such as "36.0" -- is wrong.
    """
    inner = extract_answer(completion)
    if inner is None:
        return False
    m = _INT_RE.fullmatch(inner)
    if m is None:
        return False
    try:
        gold = int(str(answer).strip())
    except ValueError as e:
        raise ValueError(f"gold answer {answer!r} is not an integer") from e
    return int(m.group(1)) == gold


def check_solution_arithmetic(solution: str) -> bool:
    """True when every `a op b = r` step in a worked solution is arithmetically right (for tests/analysis)."""
    steps = re.findall(r"(\d+)([+*-])(\d+)=(\d+)", solution)
    return bool(steps) and all(_apply(int(a), op, int(b)) == int(r) for a, op, b, r in steps)
