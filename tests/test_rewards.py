"""Rewards: math-verify accuracy (table of cases), the killable worker pool, format reward, safe_reward."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from oar_rl import rewards
from oar_rl.rewards import (
    accuracy_reward,
    answer_char_span,
    as_number,
    completion_text,
    extract_prediction,
    format_reward,
    make_accuracy_reward,
    safe_reward,
)

# (completion, gold, expected reward)
ACCURACY_CASES: list[tuple[str, str, float | None]] = [
    ("<answer>19</answer>", "19", 1.0),
    ("<answer>20</answer>", "19", 0.0),
    ("<answer>1,234</answer>", "1234", 1.0),
    ("19", "19", 1.0),  # a bare number is its own prediction
    ("1,234", "1234", 1.0),
    ("<answer> -3 </answer>", "-3", 1.0),
    ("<answer>19.0</answer>", "19", 1.0),
    (r"My answer is \boxed{\frac{1}{3}}", r"\frac{1}{3}", 1.0),  # TRL's docstring example
    (r"My answer is \boxed{\frac{1}{2}}", r"\frac{1}{3}", 0.0),
    (r"<answer>\frac{1}{2}</answer>", "0.5", 1.0),
    (r"<answer>0.5</answer>", r"\frac12", 1.0),
    (r"<answer>(3, \frac{\pi}{2})</answer>", r"\left( 3, \frac{\pi}{2} \right)", 1.0),  # MATH-500 style
    (r"<answer>(3, \pi)</answer>", r"\left( 3, \frac{\pi}{2} \right)", 0.0),
    (r"The answer is $x^2+1$.", "x^2+1", 1.0),
    (r"so \boxed{3} first, but finally <answer>4</answer>", "4", 1.0),  # the answer tag wins
    (r"<think>19 or 20?</think><answer>20</answer>", "20", 1.0),
    (r"<answer>\sqrt{2}</answer>", r"\sqrt{2}", 1.0),
    (r"<answer>\sqrt{3}</answer>", r"\sqrt{2}", 0.0),
    ("The answer is 19", r"\frac{1}{2}", 0.0),  # no tag, no LaTeX: nothing to extract
    ("<answer>1</answer>", "???", None),  # unparseable gold -> skipped by TRL
    ("", "19", 0.0),  # empty completion: 0.0, not None
    ("   ", "???", None),  # ... but an unparseable gold is None for every completion, empty or not
]

# Review of 2026-11-26: a hedge between numbers scored 1.0 (the unwrapped parse took its last number);
# one number with prose words is still read; a later prose "final answer is ..." does not override a box.
HEDGE_CASES: list[tuple[str, str, float | None]] = [
    ("<answer>2 or 5</answer>", "5", 0.0),
    ("<answer>7, 5</answer>", "5", 0.0),
    ("<answer>x = 3, y = 5</answer>", "5", 0.0),
    ("<answer>I think 3 but maybe 5</answer>", "5", 0.0),
    (r"\boxed{3 \text{ or } 5}", "5", 0.0),
    (r"\boxed{\pm 5}", "5", 0.0),
    ("<answer>5 dollars</answer>", "5", 1.0),
    ("<answer>The answer is 5</answer>", "5", 1.0),
    ("<answer>12 apples</answer>", "12", 1.0),
    ("<answer>x = 5</answer>", "5", 1.0),
    (r"\boxed{5 \text{ cm}}", "5", 1.0),
    ("The final answer is **42**.", "42", 1.0),
    (r"\boxed{42}" + "\n\nI verified that the final answer is consistent with the constraints.", "42", 1.0),
    (r"$\boxed{42}$" + "\nChecking whether the final answer is an integer: yes.", "42", 1.0),
    ("The final answer is B.", r"\text{(B)}", 1.0),
]


# Defect 7 (issue 9): real benchmark golds and the answer-extraction rule. Each case scored wrong on main.
BENCHMARK_CASES: list[tuple[str, str, float | None]] = [
    # MATH-500 golds with an escaped dollar: None for every completion before
    (r"<answer>\$32,\!348</answer>", r"\$32,\!348", 1.0),
    (r"<answer>32348</answer>", r"\$32,\!348", 1.0),
    (r"The total is \boxed{32,348}.", r"\$32,\!348", 1.0),
    (r"<answer>32347</answer>", r"\$32,\!348", 0.0),
    (r"<answer>\$18.90</answer>", r"\$18.90", 1.0),
    (r"So \boxed{18.9}", r"\$18.90", 1.0),
    (r"So \boxed{\$18.91}", r"\$18.90", 0.0),
    (r"He pays \boxed{\$36}.", r"\$36", 1.0),
    (r"<answer>35</answer>", r"\$36", 0.0),
    (r"<answer>x+\$1</answer>", r"\$36", 0.0),  # not a plain number: math-verify path
    # brace-less LaTeX: the same inside \boxed{} as inside <answer> (0 in \boxed{} before)
    (r"So \boxed{\frac43}.", r"\frac{4}{3}", 1.0),
    (r"So \boxed{\frac43}.", r"\frac{3}{4}", 0.0),
    (r"So \boxed{\frac 59}.", r"\frac{5}{9}", 1.0),
    (r"So \boxed{\frac 59}.", r"\frac{9}{5}", 0.0),
    (r"So \boxed{\sqrt5}.", r"\sqrt{5}", 1.0),
    (r"So \boxed{\sqrt5}.", r"\sqrt{6}", 0.0),
    (r"So \boxed{11\sqrt2}.", r"11\sqrt{2}", 1.0),
    (r"So \boxed{11\sqrt2}.", r"12\sqrt{2}", 0.0),
    (r"$\boxed\frac43$", r"\frac{4}{3}", 1.0),  # brace-less \boxed: up to the end of the math run
    (r"$\boxed 7$", "7", 1.0),
    (r"So \boxed{\frac{4}{3}}.", r"\frac43", 1.0),  # brace-less gold
    # one rule: the marker that ends last wins, whatever the prompt format
    (r"First \boxed{3}, then \boxed{4}. So the final answer is $5$.", "5", 1.0),
    (r"First \boxed{3}, then \boxed{4}. So the final answer is $5$.", "4", 0.0),
    (r"\boxed{4} ... Final Answer: The final answer is $\boxed{\frac12}$. I hope it is correct.", "0.5", 1.0),
    (r"\boxed{4} ... The final answer is 6.", "6", 1.0),
    (r"the final answer is 3? No. <answer>4</answer>", "3", 0.0),
    (r"<answer>4</answer> To check: \boxed{5}", "5", 1.0),
    (r"<answer>The answer is \boxed{\frac{2}{3}}</answer>", r"\frac23", 1.0),
]


@pytest.mark.parametrize("fmt", ["answer", "boxed", "final"])
@pytest.mark.parametrize(
    ("body", "gold", "wrong"),
    [(r"\frac43", r"\frac{4}{3}", "1.34"), (r"\frac 59", "5/9", r"\frac{9}{5}"),
     (r"\sqrt5", r"\sqrt{5}", r"\sqrt{6}"), (r"11\sqrt2", r"11\sqrt{2}", r"11\sqrt{3}"),
     (r"\$32,\!348", "32348", "32,349")],
)  # fmt: skip
def test_every_prompt_format_scores_an_answer_the_same(fmt, body, gold, wrong):
    wrap = {
        "answer": "<think>so \\boxed{{0}}</think> <answer>{}</answer>",
        "boxed": "maybe \\boxed{{0}}, so finally \\boxed{{{}}}",
        "final": "maybe \\boxed{{0}}. The final answer is ${}$. I hope it is correct.",
    }[fmt]
    assert accuracy_reward([wrap.format(body), wrap.format(wrong)], [gold, gold]) == [1.0, 0.0]


def test_benchmark_golds_and_extraction_rule():
    got = accuracy_reward([c for c, _, _ in BENCHMARK_CASES], [g for _, g, _ in BENCHMARK_CASES])
    mismatches = [(c, g, e, r) for (c, g, e), r in zip(BENCHMARK_CASES, got, strict=True) if r != e]
    assert not mismatches


def test_unparseable_gold_is_none_with_a_warning_naming_it(caplog):
    metrics = {}
    with caplog.at_level(logging.WARNING, logger="oar_rl.rewards"):
        got = accuracy_reward(
            ["<answer>1</answer>", "<answer>2</answer>", "<answer>3</answer>"],
            [r"\frac{unparseable}", r"\frac{unparseable}", "3"],
            log_metric=lambda k, v: metrics.__setitem__(k, v),
        )
    assert got == [None, None, 1.0]
    assert r"gold answer '\\frac{unparseable}' cannot be parsed" in caplog.text
    assert "2 completion(s) score None" in caplog.text
    assert metrics == {"rewards/accuracy_reward/unparseable_gold_frac": pytest.approx(2 / 3)}


@pytest.fixture(scope="module")
def hang_reward():
    """An accuracy reward whose worker hangs on a marker; a short timeout and a single worker."""
    fn = make_accuracy_reward(timeout=2.0, workers=1, _scorer="oar_rl.rewards.verify:score_with_test_hang")
    fn([r"<answer>\frac12</answer>"], ["0.5"])  # start the worker outside the timed parts
    return fn


def test_accuracy_table():
    completions = [c for c, _, _ in ACCURACY_CASES]
    golds = [g for _, g, _ in ACCURACY_CASES]
    got = accuracy_reward(completions, golds)
    expected = [e for _, _, e in ACCURACY_CASES]
    mismatches = [(c, g, e, r) for (c, g, e), r in zip(ACCURACY_CASES, got, strict=True) if r != e]
    assert got == expected, mismatches


def test_conversational_and_trl_kwargs():
    logged = {}
    completions = [
        [{"role": "assistant", "content": r"My answer is \boxed{\frac{1}{3}}"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "<answer>7</answer>"}]}],
        [{"role": "assistant", "content": "<answer>8</answer>"}],
    ]
    got = accuracy_reward(
        prompts=["p"] * 3,
        completions=completions,
        completion_ids=[[1]] * 3,
        answer=[r"\frac{1}{3}", "7", "7"],
        trainer_state=None,
        log_extra=lambda name, values: logged.__setitem__(name, values),
        log_metric=lambda *a, **k: None,
    )
    assert got == [1.0, 1.0, 0.0]
    assert logged["extracted_answer"] == [r"\frac{1}{3}", "7", "8"]


def test_hedges_and_prose_after_the_answer():
    got = accuracy_reward([c for c, _, _ in HEDGE_CASES], [g for _, g, _ in HEDGE_CASES])
    assert [(c, r) for (c, _, e), r in zip(HEDGE_CASES, got, strict=True) if r != e] == []


def test_a_gold_that_is_none_or_nan_is_an_error_not_the_text_none():
    assert accuracy_reward([r"\boxed{None}"], ["None"]) == [1.0]  # the text "None" is a gold like any
    for missing in (None, float("nan")):
        with pytest.raises(ValueError, match=r"gold answer 1 of the batch is (None|nan).*no gold"):
            accuracy_reward([r"\boxed{5}", r"\boxed{None}"], ["5", missing])


def test_solution_column_fallback_and_missing_gold():
    assert accuracy_reward(["<answer>5</answer>"], solution=["5"]) == [1.0]
    with pytest.raises(ValueError, match="answer"):
        accuracy_reward(["<answer>5</answer>"], prompts=["p"])
    with pytest.raises(ValueError, match="2 completions but 1 gold"):
        accuracy_reward(["a", "b"], ["1"])


def test_numbers_do_not_need_the_pool(monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("the pool must not be used for plain numbers")

    monkeypatch.setattr(rewards.pool, "get_pool", no_pool)
    got = accuracy_reward(["<answer>12</answer>", "12", r"\boxed{1,200}", "", "<answer>-0.50</answer>"],
                          ["12", "13", "1200", "5", "-.5"])  # fmt: skip
    assert got == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_extraction_helpers():
    assert extract_prediction("x <answer> 1 </answer> y <answer>2</answer>") == ("2", "answer")
    assert extract_prediction(r"a \boxed{\frac{1}{2}} b \boxed{x^{2}}") == ("x^{2}", "boxed")
    assert extract_prediction("  plain  ") == ("plain", None)
    # one rule: the last-ending marker, then the rule again inside it
    assert extract_prediction(r"\boxed{1} <answer>2</answer> \boxed{3}") == ("3", "boxed")
    assert extract_prediction(r"<answer>so \boxed{\frac{1}{2}}</answer>") == (r"\frac{1}{2}", "boxed")
    assert extract_prediction(r"\boxed{1}. The final answer is $\boxed{2}$.") == ("2", "boxed")
    assert extract_prediction(r"The final answer is: $$x^{2}$$") == ("x^{2}", "final")
    assert extract_prediction(r"The final answer is 3.5. I hope it is correct.") == ("3.5", "final")
    assert extract_prediction(r"The final answer is $\$5$") == (r"\$5", "final")  # an escaped $ is no end
    # prose after "final answer is" is no marker: not a sentence, but a digit, a \command or one word
    assert extract_prediction(r"\boxed{4}. The final answer is right.") == ("4", "boxed")
    assert extract_prediction(r"\boxed{4}. The final answer is not obvious.") == ("4", "boxed")
    assert extract_prediction(r"The final answer is (C).") == ("(C)", "final")
    assert extract_prediction(r"The final answer is \pi over two.") == (r"\pi over two", "final")
    assert extract_prediction(r"\boxed{\{1, 2\}}") == (r"\{1, 2\}", "boxed")  # escaped braces
    assert extract_prediction(r"\boxed{3} then <answer>4 (cut off") == ("3", "boxed")  # unclosed: no marker
    assert extract_prediction(r"\boxed{3} then \boxed{4 (cut off") == ("3", "boxed")
    assert extract_prediction(r"\[\boxed 12\]") == ("12", "boxed")
    text = "<think>\\boxed{3}</think> <answer> 😀 is \\boxed{ 4 } </answer>\n"
    start, end, kind = answer_char_span(text)
    assert (text[start:end], kind) == ("4", "boxed") and text[start - 2 : start] == "{ "
    assert answer_char_span("  no marker ") == (2, 11, None)
    assert as_number(r"\$32,\!348") == 32348 and as_number(r"$18.90$") == Fraction(189, 10)
    assert as_number(r"1{,}000") == 1000 and as_number("1,2") is None and as_number(r"\frac12") is None
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) == "a"
    with pytest.raises(ValueError, match="string or a list"):
        completion_text(3)  # type: ignore[arg-type]


def test_factory_name_and_bad_arguments():
    assert accuracy_reward.__name__ == "accuracy_reward"
    assert make_accuracy_reward(timeout=3.0, workers=1).__name__ == "accuracy_reward"
    with pytest.raises(ValueError, match="timeout"):
        make_accuracy_reward(timeout=0)
    with pytest.raises(ValueError, match="workers"):
        make_accuracy_reward(workers=0)


@pytest.mark.timeout(120)
def test_hang_costs_one_reward_and_the_pool_survives(hang_reward, caplog):
    pool = rewards.get_pool(2.0, 1)
    timeouts, restarts = pool.timeouts, pool.restarts
    completions = [
        r"<answer>\frac{1}{2}</answer>",
        "<answer>__oar_rl_test_hang__</answer>",
        r"<answer>\sqrt{4}</answer>",
    ]
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="oar_rl.rewards"):
        got = hang_reward(completions, ["0.5", r"\frac{1}{2}", "2"])
    elapsed = time.monotonic() - start
    # one 2 s timeout + restarting a worker (an import of sympy on a busy 2-core machine)
    assert elapsed < 2.0 + 30.0
    assert got == [1.0, 0.0, 1.0]
    assert pool.timeouts == timeouts + 1 and pool.restarts >= restarts + 1
    assert "no math-verify answer" in caplog.text
    # the replacement worker still scores
    assert hang_reward([r"<answer>\frac{3}{4}</answer>", "<answer>x</answer>"], ["0.75", "y"]) == [1.0, 0.0]


@pytest.mark.timeout(120)
def test_worker_crash_costs_one_reward(hang_reward):
    got = hang_reward(["<answer>__oar_rl_test_crash__</answer>", r"<answer>\pi</answer>"], ["1", r"\pi"])
    assert got == [0.0, 1.0]


@pytest.mark.timeout(120)
def test_called_from_a_thread(hang_reward):
    out: list = []
    errors: list = []

    def target():
        try:
            out.append(hang_reward([r"<answer>\frac{2}{4}</answer>", "<answer>__oar_rl_test_hang__</answer>"],
                                   ["0.5", "1"]))  # fmt: skip
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and not errors
    assert out == [[1.0, 0.0]]


FORMAT_CASES: list[tuple[str, float]] = [
    ("<answer>4</answer>", 1.0),
    ("2+2 is 4. <answer>4</answer>\n", 1.0),
    ("<think>2+2</think> <answer>4</answer>", 1.0),
    ("<think>2+2</think>so <answer>4</answer>", 1.0),
    ("", 0.0),
    ("4", 0.0),
    ("<answer></answer>", 0.0),  # empty answer
    ("<answer>4</answer><answer>5</answer>", 0.0),  # two answers
    ("<answer>4</answer> and more text", 0.0),  # text after the answer
    ("<answer>4", 0.0),  # unclosed
    ("<answer><answer>4</answer>", 0.0),
    ("x <think>a</think><answer>4</answer>", 0.0),  # think block must open the completion
    ("<think>a</think><think>b</think><answer>4</answer>", 0.0),
    ("<think>a<answer>4</answer>", 0.0),
]


def test_format_reward_table():
    got = format_reward([c for c, _ in FORMAT_CASES])
    assert got == [e for _, e in FORMAT_CASES], [
        (c, e, g) for (c, e), g in zip(FORMAT_CASES, got, strict=True) if e != g
    ]
    assert format_reward([[{"role": "assistant", "content": "<answer>1</answer>"}]]) == [1.0]


def test_safe_reward_scores_only_the_failing_completion_none(caplog):
    def picky_reward(completions, answer, **kwargs):
        if any("bad" in c for c in completions):
            raise RuntimeError("boom")
        return [float(c == a) for c, a in zip(completions, answer, strict=True)]

    metrics = {}
    wrapped = safe_reward(picky_reward)
    assert wrapped.__name__ == "picky_reward"
    with caplog.at_level(logging.WARNING, logger="oar_rl.rewards"):
        out = wrapped(
            completions=["1", "bad", "3"],
            answer=["1", "2", "4"],
            trainer_state=None,
            log_metric=lambda k, v: metrics.__setitem__(k, v),
        )
    assert out == [1.0, None, 0.0]
    assert metrics == {"rewards/picky_reward/failed_frac": pytest.approx(1 / 3)}
    assert "picky_reward raised on 1 of 3 completions" in caplog.text and "boom" in caplog.text
    assert safe_reward(format_reward)(["<answer>1</answer>"]) == [1.0]


def test_safe_reward_is_not_silent_when_a_reward_always_fails():
    def broken_reward(completions, **kwargs):
        raise RuntimeError("boom")

    wrapped = safe_reward(broken_reward, max_failed_batches=2)
    assert wrapped(completions=["a", "b"]) == [None, None]
    with pytest.raises(RuntimeError, match=r"broken_reward failed on every completion .*boom"):
        wrapped(completions=["a"])
    # a batch that partly succeeds resets the streak
    flaky = safe_reward(lambda completions, **kw: [1.0 / int(c) for c in completions], max_failed_batches=2)
    assert flaky(completions=["0"]) == [None]
    assert flaky(completions=["0", "2"]) == [None, 0.5]
    assert flaky(completions=["0"]) == [None]
    with pytest.raises(ValueError, match="max_failed_batches"):
        safe_reward(broken_reward, max_failed_batches=0)


SCRIPT = """
import sys
from oar_rl.rewards import make_accuracy_reward
with open(sys.argv[1], "a") as f:  # top-level side effect: counts how often this script runs
    f.write("ran\\n")
{body}
"""
CALL = (
    'print("RESULT", make_accuracy_reward(workers=1)('
    '[r"\\\\boxed{{\\\\frac{{1}}{{2}}}}", "x"], ["0.5", "0.5"]))'
)


def _run_script(tmp_path: Path, body: str, method: str) -> tuple[subprocess.CompletedProcess, int]:
    script, runs = tmp_path / "user_script.py", tmp_path / "runs.txt"
    script.write_text(textwrap.dedent(SCRIPT.format(body=body)))
    env = {**os.environ, "OAR_RL_VERIFY_START_METHOD": method}
    src = str(Path(rewards.__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(script), str(runs)], env=env, capture_output=True, text=True, timeout=240
    )
    return proc, len(runs.read_text().splitlines()) if runs.exists() else 0


@pytest.mark.timeout(300)
def test_pool_in_a_script_without_main_guard(tmp_path):
    """The default (fork on Linux) works in an unguarded script and never re-runs it."""
    proc, runs = _run_script(tmp_path, CALL, "fork")
    assert proc.returncode == 0, proc.stderr
    assert "RESULT [1.0, 0.0]" in proc.stdout
    assert runs == 1


@pytest.mark.timeout(300)
def test_spawn_pool_without_main_guard_says_what_to_do(tmp_path):
    """spawn re-runs the main script in each worker: an unguarded script gets the fix, not a restart loop."""
    proc, _ = _run_script(tmp_path, CALL, "spawn")
    assert proc.returncode != 0
    assert "RuntimeError: math-verify workers (spawn) could not run" in proc.stderr
    assert 'if __name__ == "__main__":' in proc.stderr and "OAR_RL_VERIFY_START_METHOD=fork" in proc.stderr
    # with the guard, spawn works
    proc, _ = _run_script(tmp_path, 'if __name__ == "__main__":\n    ' + CALL, "spawn")
    assert proc.returncode == 0, proc.stderr
    assert "RESULT [1.0, 0.0]" in proc.stdout


def test_bad_start_method(monkeypatch):
    monkeypatch.setenv("OAR_RL_VERIFY_START_METHOD", "threads")
    with pytest.raises(ValueError, match="valid start methods: fork, spawn, forkserver"):
        rewards.VerifierPool(workers=1, timeout=1.0)
