"""Issue 47 item 3: the result rows of README.md and of the results index print the committed figures.

Each row of the "Results so far" table (README.md) and of docs/results/index.md names its sources below;
every decimal figure the row prints (signed where it is signed, `−` read as `-`) must appear in one of
them, so a figure typed in by hand or left behind by a rerun fails here. Integers (seeds, samples,
percent shares) are not checked; the model sizes the rows name are counted from the shipped models, and
GRPO's gain over the warm start is recomputed from the v2 study's run files, and the long regime's 4e-4
GRPO greedy drop from its confirmation's run files and issue 48's warm start.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDY = "results/study-wordproblems-v2/tables.md"
SHORT_CONFIRM = "results/credit-screen/confirm.md"
LONG_CONFIRM = "results/credit-long/confirm.md"
LONG_RUNS = "results/credit-long/confirm/runs"
LEADERBOARD = "docs/results/leaderboard.md"
WHY_ANSWERS = "results/credit-why/answers.md"  # issue 48's confirmation, generated from its run files
SOURCES: dict[str, tuple[str, ...]] = {  # the start of a row's question -> the files its figures come from
    "Does OAR beat GRPO": (STUDY, SHORT_CONFIRM, "results/bench-cpu-256/bench.md"),
    "Does OAR's credit land on the pivot": (STUDY,),
    "Does its ranking find causal": ("results/real-model/recall.md",),
    "Does its importance ranking find": ("results/real-model/recall.md",),
    "Where does OAR put the blame": ("results/blame/blame.md",),
    "Where does the credit go": ("results/blame/blame.md",),
    "Why does OAR lose": (SHORT_CONFIRM, LEADERBOARD, "results/credit-screen/screen.md"),
    "Does that hold on long chains": (LONG_CONFIRM, LEADERBOARD, WHY_ANSWERS),
    "Does the verdict hold on long": (LONG_CONFIRM, LEADERBOARD, WHY_ANSWERS),
    "What does it cost": ("results/bench-cpu-256/bench.md",),
    "How does every credit rule do": (),
}
NUMBER = re.compile(r"(?<![\w.])([+-]?)(\d+\.\d+)(?![\d])")


def _rows(path: str) -> list[tuple[str, str]]:
    """(question, answer) of each row of the page's first table whose header starts `| question |`."""
    text = (ROOT / path).read_text()
    table = text[text.index("| question |") :].split("\n\n")[0].splitlines()[2:]
    return [tuple(c.strip() for c in row.strip("|").split(" | ")[:2]) for row in table]


def _grpo_gain() -> str:
    """GRPO's mean final sampled accuracy over the v2 study's seeds minus the warm start's, in points."""
    folder = ROOT / "results/study-wordproblems-v2"
    finals = [json.loads(p.read_text())["final"]["sampled"] for p in folder.glob("runs/grpo.seed*.json")]
    warm = json.loads((folder / "study.json").read_text())["warm_start"]["accuracy"]["sampled"]
    return f"+{100 * (sum(finals) / len(finals) - warm):.1f}"


def _long_grpo_greedy_drop() -> str:
    """The warm start's greedy accuracy on the long confirmation's test sample minus GRPO's mean final
    greedy accuracy over that confirmation's seeds (learning rate 4e-4), in points."""
    finals = [json.loads(p.read_text())["final"]["greedy"] for p in ROOT.glob(f"{LONG_RUNS}/grpo.seed*.json")]
    warm = json.loads((ROOT / "results/credit-why/warm_start.json").read_text())["test"]["greedy"]
    return f"{100 * (warm - sum(finals) / len(finals)):.1f}"


def _found(sign: str, number: str, text: str) -> bool:
    lead = re.escape(sign) if sign else r"[+-]?"
    return re.search(rf"(?<![\w.]){lead}{re.escape(number)}(?![\d])", text) is not None


@pytest.mark.parametrize("page", ["README.md", "docs/results/index.md"])
def test_every_figure_of_a_result_row_is_in_its_sources(page):
    rows = _rows(page)
    assert len(rows) >= 6
    for question, answer in rows:
        key = next((k for k in SOURCES if question.startswith(k)), None)
        assert key is not None, f"{page}: row {question!r} names no sources in this test: add them"
        text = "\n".join((ROOT / f).read_text() for f in SOURCES[key]).replace("−", "-")
        if key == "Does OAR beat GRPO":
            text += f"\n{_grpo_gain()} (GRPO's gain over the warm start)"
        if key in ("Does that hold on long chains", "Does the verdict hold on long"):
            text += f"\n{_long_grpo_greedy_drop()} (GRPO's greedy drop below the warm start at 4e-4)"
        missing = [s + n for s, n in NUMBER.findall(answer.replace("−", "-")) if not _found(s, n, text)]
        assert not missing, f"{page}, {question!r}: {missing} are in none of {SOURCES[key]}"


def test_the_model_sizes_the_rows_name_are_the_shipped_models():
    from oar_rl.shipped import load_task_model

    pages = {page: (ROOT / page).read_text() for page in ("README.md", "docs/results/index.md")}
    for task in ("wordproblems", "wordproblems-long"):
        model, _, _ = load_task_model(task)
        size = f"{round(sum(p.numel() for p in model.parameters()) / 1000)}k-parameter"
        for page, text in pages.items():
            named = set(re.findall(r"\d+k-parameter", text))
            assert size in named, f"{page}: the {task} model has {size}s; the page names {sorted(named)}"


def test_the_figures_of_a_drifted_row_would_fail():
    text = (ROOT / STUDY).read_text()
    assert _found("-", "2.7", text) and not _found("-", "2.8", text) and not _found("+", "2.7", text)
