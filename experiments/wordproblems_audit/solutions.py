"""Worked solutions read against the reader's own reading of the prompt (`reader.Story`), text only.

`check_reference`: a clean reference solution must write, in the story's order, one equation per step
(a bags event is k*m=p then acc+p=r) whose operands are the running total and the event's number, whose
operator is the event's direction and whose result is the arithmetic's; in the long regime (`restate`)
each change of the stock is followed by its running total; no other number; one answer span at the end
saying the gold answer; the prompt's names, items and the asked person's pronoun only; and the clauses
before the equations either say no direction (the long regime's neutral clauses) or the operator's.

`read_teacher`: a fallible teacher's demonstration, step by step against the story: each written
operator that is not the event's, at a trap-worded event, is a misread; each result off by 1 or 2 from its
own written operands is a slip; the running total the teacher carries is its own (earlier slips and
misreads included). Anything else is `bad`, counted and never guessed.
"""

from __future__ import annotations

import re
from collections import Counter

from experiments.wordproblems_audit.reader import HE, SHE, Story, pronoun

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_EQUATION = re.compile(r"(\d+)([+\-*])(\d+)=(\d+)\.")
ITEM_WORDS = ("apples", "pears", "plums", "eggs", "cards", "stamps", "shells", "coins")
LOSS_WORDS = ("gives some away", "fewer", "take them away", "go down", "are gone")
GAIN_WORDS = ("gets more", "adds the new", "go up", "we add them", "come in")
"""Words that tell a step's direction (the short regime's clauses); the long regime's say neither."""


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def split_answer(solution: str) -> tuple[str, str] | None:
    """(reasoning, answer text), or None unless there is one answer span with nothing after it."""
    spans = list(_ANSWER.finditer(solution))
    if len(spans) != 1 or solution[spans[0].end() :].strip():
        return None
    return solution[: spans[0].start()], spans[0][1]


def _gaps(reasoning: str, eqs: list[re.Match]) -> list[str]:
    """The text before the first equation, then the text after each equation up to the next one."""
    cuts = [0, *[e.start() for e in eqs], len(reasoning)]
    ends = [0, *[e.end() for e in eqs]]
    return [reasoning[ends[i] : cuts[i + 1]] for i in range(len(eqs) + 1)]


def check_reference(story: Story, solution: str, gold: int, *, restate: bool, neutral: bool) -> Counter:
    """Counts of each check that fails on one clean solution (empty: it passes); also `steps` and
    `restates`, the number of equations and running totals checked."""
    bad: Counter = Counter()
    parts = split_answer(solution)
    if parts is None:
        bad["answer_span"] += 1
        return bad
    reasoning, told = parts
    eqs = list(_EQUATION.finditer(reasoning))
    want = story.steps()
    gaps = _gaps(reasoning, eqs)
    if len(eqs) != len(want):
        bad["step_count"] += 1
    acc = story.start
    for j, (e, (wa, wop, wb, wr)) in enumerate(zip(eqs, want, strict=False)):
        a, op, b, r = int(e[1]), e[2], int(e[3]), int(e[4])
        bad["operand"] += (a, b) != (wa, wb)
        bad["operator"] += op != wop
        bad["result"] += r != _apply(a, op, b) or r != wr or r < 0
        rest = [int(x) for x in re.findall(r"\d+", gaps[j + 1])]
        if wop == "*":
            bad["stray_number"] += bool(rest)
        else:
            bad["restated_total"] += rest != ([r] if restate else [])
            acc = r
        clause = gaps[j].lower()  # the text before this equation
        says_loss = any(w in clause for w in LOSS_WORDS)
        says_gain = any(w in clause for w in GAIN_WORDS)
        if neutral:
            bad["direction_word"] += says_loss or says_gain
        else:  # a loss says so; a gain says so unless it adds a bags' product; a product says neither
            after_bag = j > 0 and want[j - 1][1] == "*"
            bad["direction_word"] += says_loss != (wop == "-") or says_gain != (wop == "+" and not after_bag)
    bad["stray_number"] += bool(re.findall(r"\d+", gaps[0]))
    bad["answer_tag"] += told.strip() != str(gold) or acc != gold
    wrong = "he" if pronoun(story.name) == "she" else "she"
    bad["pronoun"] += bool(re.search(rf"\b{wrong}\b", reasoning, re.I))
    bad["name"] += any(
        w in SHE | HE and w not in story.people for w in re.findall(r"\b[A-Z][a-z]+\b", reasoning)
    )
    bad["item"] += any(re.search(rf"\b{it}\b", reasoning) and it not in story.items for it in ITEM_WORDS)
    out = Counter({k: v for k, v in bad.items() if v})
    out["steps"] = len(eqs)
    out["restates"] = sum(e[2] != "*" for e in eqs) if restate else 0
    return out


def read_teacher(story: Story, solution: str, *, restate: bool) -> dict:
    """One demonstration's misreads and slips: {'results', 'slips', 'misreads', 'misread_kinds',
    'told', 'bad'} (`bad`: what is neither a slip nor a misread)."""
    parts = split_answer(solution)
    if parts is None:
        return {
            "results": 0,
            "slips": 0,
            "misreads": 0,
            "misread_kinds": [],
            "told": None,
            "bad": ["answer span"],
        }
    reasoning, told = parts
    eqs = list(_EQUATION.finditer(reasoning))
    want, traps = story.steps(), story.trap_steps()
    bad: list[str] = []
    if len(eqs) != len(want):
        return {
            "results": len(eqs),
            "slips": 0,
            "misreads": 0,
            "misread_kinds": [],
            "told": told,
            "bad": [f"{len(eqs)} equations for {len(want)} steps"],
        }
    gaps = _gaps(reasoning, eqs)
    acc, bag, slips, misreads, kinds = story.start, None, 0, 0, []
    for j, (e, (ta, top, tb, _), trap) in enumerate(zip(eqs, want, traps, strict=True)):
        a, op, b, r = int(e[1]), e[2], int(e[3]), int(e[4])
        if op == "*" or top == "*":
            if (a, op, b) != (ta, top, tb):
                bad.append(f"step {j}: bag equation {a}{op}{b}")
        else:
            after_bag = j > 0 and want[j - 1][1] == "*"
            if a != acc or b != (bag if after_bag else tb):
                bad.append(f"step {j}: operands {a}, {b} (carried total {acc})")
            if op != top:
                if trap:
                    misreads += 1
                    kinds.append(trap)
                else:
                    bad.append(f"step {j}: operator {op} at a step that is not a trap")
        true = _apply(a, op, b)
        if r != true:
            if abs(r - true) in (1, 2):
                slips += 1
            else:
                bad.append(f"step {j}: result {r} for {a}{op}{b}")
        if r < 0:
            bad.append(f"step {j}: negative result")
        rest = [int(x) for x in re.findall(r"\d+", gaps[j + 1])]
        if op == "*":
            bag = r
            if rest:
                bad.append(f"step {j}: number after a product")
        else:
            acc = r
            if rest != ([r] if restate else []):
                bad.append(f"step {j}: restated {rest} after {r}")
    if told.strip() != str(acc):
        bad.append(f"answer {told!r} is not the last total {acc}")
    return {
        "results": len(eqs),
        "slips": slips,
        "misreads": misreads,
        "misread_kinds": kinds,
        "told": told,
        "bad": bad,
    }
