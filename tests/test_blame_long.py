"""`oar-rl blame` on the long-chain regime (issue 33): restated totals, trap misreads and the `restate`
error kind of `first_error`, on hand-made completions and on the fallible teacher's demonstrations."""

from __future__ import annotations

import re

import pytest
import torch

from oar_rl.data import wordproblems as wp
from oar_rl.data.wordproblem_errors import first_error

# Sam has 12 pears; Sam gets 9 pears from Leo (a trap gain); Leo takes 8 pears from Sam (a trap loss);
# Sam buys 3 bags with 4 pears in each bag; Sam sells 5 pears; Sam finds 7 more pears.
STEPS = ((12, "+", 9, 21), (21, "-", 8, 13), (3, "*", 4, 12), (13, "+", 12, 25), (25, "-", 5, 20),
         (20, "+", 7, 27))  # fmt: skip


def long_text(eq: list[str], totals: list[str | None], answer: str) -> str:
    """A long-regime completion: equation j, then its restated total (None: not restated)."""
    says = ("That makes {} pears.", "So Sam has {} pears.", "He has {} pears now.")
    parts = ["Only the pears of Sam matter here. We can ignore the plums."]
    for j, (e, t) in enumerate(zip(eq, totals, strict=True)):
        parts.append(f"{'First, so' if j == 0 else 'Then this gives'} {e}.")
        if t is not None:
            parts.append(says[j % 3].format(t))
    return " ".join([*parts, "That is all.", f"<answer>{answer}</answer>"])


RIGHT = ["12+9=21", "21-8=13", "3*4=12", "13+12=25", "25-5=20", "20+7=27"]
TOTALS = ["21", "13", None, "25", "20", "27"]  # no total after the bags' product, as the teacher writes


def at(c: str, spans) -> list[str]:
    return [c[lo:hi] for lo, hi in spans]


def test_a_right_long_completion_is_correct_and_its_last_result_is_the_last_equations():
    c = long_text(RIGHT, TOTALS, "27")
    e = first_error(c, STEPS, 27, restate=True)
    assert (e.status, e.steps_written, e.steps_true) == ("correct", 6, 6)
    assert e.last_result[0] == c.index("20+7=27") + 5  # not the restated "27" after it
    # the short regime's parser (no restatements) cannot align it: unparseable, as before issue 33
    assert first_error(c, STEPS, 27).status == "unparseable"


def test_a_slip_is_located_at_the_result_and_its_restatement_is_not_a_second_error():
    eq, tot = list(RIGHT), list(TOTALS)
    eq[1:], tot[1:] = ["21-8=14", "3*4=12", "14+12=26", "26-5=21", "21+7=28"], ["14", None, "26", "21", "28"]
    c = long_text(eq, tot, "28")
    e = first_error(c, STEPS, 27, restate=True)
    assert (e.status, e.kind, e.step, e.before_last_step) == ("error", "slip", 1, True)
    assert e.spans == ((c.index("21-8=14") + 5, c.index("21-8=14") + 7),)
    assert at(c, [e.last_result]) == ["28"] and e.last_result[0] == c.index("21+7=28") + 5


@pytest.mark.parametrize(("step", "written", "carried"), [
    (0, "12-9=3", ["3+8=11"]),  # "Sam gets 9 pears from Leo" read as a loss (the other trap misread too)
    (1, "21+8=29", ["3*4=12", "29+12=41", "41-5=36", "36+7=43"]),  # "Leo takes 8 ..." read as a gain
])  # fmt: skip
def test_a_trap_misread_is_an_operator_error_at_the_trap_step(step, written, carried):
    eq = [*RIGHT[:step], written, *carried]
    tot = [re.split("=", x)[1] if "*" not in x else None for x in eq]
    c = long_text(eq, tot, tot[-1])
    e = first_error(c, STEPS, 27, restate=True)
    assert (e.status, e.kind, e.step) == ("error", "operator", step)
    assert at(c, e.spans) == [re.search(r"[+\-]", written)[0]]
    assert e.spans[0][0] == c.index(written) + len(re.split(r"[+\-]", written)[0])


def test_a_wrong_restated_total_is_a_restate_error_at_its_first_character():
    tot = list(TOTALS)
    tot[1] = "15"  # 21-8=13. So Sam has 15 pears.
    eq = [*RIGHT[:2], "3*4=12", "15+12=27", "27-5=22", "22+7=29"]
    c = long_text(eq, [*tot[:3], "27", "22", "29"], "29")
    e = first_error(c, STEPS, 27, restate=True)
    assert (e.status, e.kind, e.step, e.before_last_step) == ("error", "restate", 1, True)
    assert e.spans == ((c.index("has 15") + 4, c.index("has 15") + 6),)
    # carried or not, a wrong restatement is the error; a total restated after the product counts too
    c = long_text(RIGHT, [*TOTALS[:2], "13", *TOTALS[3:]], "27")
    e = first_error(c, STEPS, 27, restate=True)
    assert (e.kind, e.step, at(c, e.spans)) == ("restate", 2, ["13"])
    assert first_error(long_text(RIGHT, TOTALS, "26"), STEPS, 27, restate=True).status == "answer_copy"


@pytest.mark.parametrize(
    "completion",
    [
        long_text(RIGHT, TOTALS, "27").replace(
            "Only", "That makes 12 pears. Only"
        ),  # a total before any step
        long_text(RIGHT, TOTALS, "27").replace("That is all.", "I have 3 ideas."),  # a stray number
        long_text(RIGHT, TOTALS, "27").replace("That makes 21", "We keep 21"),  # not a restatement
        long_text(RIGHT, TOTALS, "27").replace("13+12=25", "13+=25"),  # an equation without its operand
        long_text(RIGHT, TOTALS, "27").replace("</answer>", ""),  # no closed answer span
    ],
)
def test_unparseable_long_completions_are_excluded_not_guessed(completion):
    assert first_error(completion, STEPS, 27, restate=True).status == "unparseable"


def _first_difference(a: str, b: str) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)


def test_the_teachers_slipped_and_misread_demonstrations_are_located_at_their_first_wrong_step():
    """The fallible teacher's demonstrations share prompt and phrasing with the clean stream (`generate`):
    where the texts first differ is the first wrong pivot, independently of the parser. Every demonstration
    with a wrong answer is an error located there (an operator exactly when the trap was misread); every
    clean one is correct. Slips that cancel (the answer right, a step wrong) are errors too."""
    n, seed = 400, 11
    clean = wp.generate(wp.LONG_CONFIG, n, seed)
    slipped = wp.generate(wp.LONG_CONFIG, n, seed, slip_prob=0.08, misread_prob=0.6)
    seen = {"correct": 0, "slip": 0, "operator": 0, "cancelled": 0}
    for p, q in zip(clean, slipped, strict=True):
        assert (p.prompt, p.steps, p.answer) == (q.prompt, q.steps, q.answer)
        e = first_error(q.solution, q.steps, q.answer, restate=True)
        if q.solution == p.solution:
            assert e.status == "correct"
            seen["correct"] += 1
            continue
        i = _first_difference(p.solution, q.solution)
        eqs = list(re.finditer(r"\d+[+\-*]\d+=\d+", p.solution))
        true_step = next(j for j, m in enumerate(eqs) if m.start() <= i < m.end())
        misread = q.solution[i] in "+-"
        assert (e.status, e.step, e.kind) == ("error", true_step, "operator" if misread else "slip")
        assert any(lo <= i < hi for lo, hi in e.spans)  # the first differing character is in the error
        told = int(re.search(r"<answer>(\d+)</answer>", q.solution)[1])
        seen["cancelled" if told == q.answer else e.kind] += 1
    assert min(seen.values()) >= 1 and seen["operator"] >= 40 and seen["slip"] >= 40, seen


class _Traj:
    def __init__(self, tok, completion: str, answer: str):
        self.completion, self.answer = completion, answer
        self.completion_ids = torch.tensor(tok(completion, add_special_tokens=False)["input_ids"])


def test_locate_maps_a_restate_error_to_its_tokens():
    from types import SimpleNamespace

    from oar_rl.analysis.blame import locate
    from oar_rl.shipped import load_task_model
    from oar_rl.tasks.base import exact_check

    _, tok, _ = load_task_model("wordproblems-long")
    wrong = long_text([*RIGHT[:2], "3*4=12", "15+12=27", "27-5=22", "22+7=29"],
                      ["21", "15", None, "27", "22", "29"], "29")  # fmt: skip
    texts = [long_text(RIGHT, TOTALS, "27"), wrong]
    problem = SimpleNamespace(steps=STEPS, answer=27)
    trajs = [_Traj(tok, t, "27") for t in texts]
    rows, counts, kinds = locate(trajs, [problem], 2, tok, exact_check, restate=True)
    assert dict(counts) == {"correct": 1, "wrong, first error before the last step": 1}
    assert dict(kinds) == {"restate": 1}
    ids = tok(wrong, add_special_tokens=False)["input_ids"]
    assert [tok.decode([ids[k]]) for k in rows[0]["error"]] == ["1", "5"]  # digits are one token each
    assert [tok.decode([ids[k]]) for k in rows[0]["last"]] == ["2", "9"]
    # without the long regime's parsing the same rollout cannot be aligned
    _, counts, _ = locate(trajs, [problem], 2, tok, exact_check)
    assert counts["wrong, unparseable"] == 1


def test_the_blame_page_calls_a_warm_start_shipped_only_when_the_package_holds_its_recipe(
    tmp_path, monkeypatch
):
    """The regime's model line: the committed records' own markdown; a warm start is called shipped only
    when the package holds that very recipe (SmolLM2's adapter ships; a built one of another recipe, or
    none, is not called shipped)."""
    import json
    from pathlib import Path

    from oar_rl import shipped
    from oar_rl.analysis import blame_report

    root = Path(__file__).resolve().parents[1] / "results"
    for folder, task in (
        ("blame", "word-problem"),
        ("blame-long", "`wordproblems-long`"),
        ("blame-smollm2", "`wordproblems-smollm2`"),
    ):
        rec = json.loads((root / folder / "blame.json").read_text())
        assert f"Model: the shipped {task} warm start" in blame_report.markdown(rec)
        assert blame_report.markdown(rec) == (root / folder / "blame.md").read_text()  # the committed page
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path)  # a package without it
    assert "Model: the `wordproblems-smollm2` warm start" in blame_report.markdown(rec)
    (tmp_path / "wordproblems-smollm2").mkdir()  # one of another recipe
    (tmp_path / "wordproblems-smollm2" / "oar_rl_manifest.json").write_text('{"recipe_hash": "0123"}')
    assert "Model: the `wordproblems-smollm2` warm start" in blame_report.markdown(rec)
