"""The leaderboard takes a user's own study (`python -m experiments.leaderboard --source NAME=DIR --out
PAGE.md`): a column group beside the committed regimes, its seeds labelled by how far they carry, never
written over the committed page; bad values are refused by name; a rule's blame and recall are found
under its own name or under the default probe (`rule/as-mean`), not only for oar-g and oar-p; and a page
written elsewhere links the committed docs pages from where it lies.

Made-up run files on temporary trees (as `tests/test_committed_tables.py`'s leaderboard tests); nothing
trains. The committed page itself is checked there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from experiments.leaderboard import leaderboard as lb
from experiments.leaderboard import sources

MODULE = {"module": "examples/credit_rules/my_rules.py", "sha256": "ab" * 32}
"""A user's --credit-module as the runs of its rules record it (`credit_module`)."""


def _run(folder: Path, variant: str, seed: int, acc: float, secs: float = 10.0, protocol: str = "p1") -> None:
    """One run file as an `oar-rl study` writes it (the fields the leaderboard reads); a rule that is not
    built in comes from the user's credit module."""
    folder.mkdir(parents=True, exist_ok=True)
    rec = {"variant": variant, "method": variant, "seed": seed, "overrides": {}, "protocol_hash": protocol,
           "key": f"{variant}/seed{seed}", "final": {"sampled": acc}, "train_seconds": secs}  # fmt: skip
    if variant.startswith("my-"):
        rec["credit_module"] = MODULE
    (folder / f"{variant}.seed{seed}.json").write_text(json.dumps(rec))


def _study(folder: Path, rule: str = "my-rule", seeds: int = 3, planned: int | None = None) -> Path:
    """An `oar-rl study --methods grpo,RULE` folder: `rule` 1, 2, 3… points ahead of GRPO on its seeds."""
    for seed in range(seeds):
        _run(folder / "runs", "grpo", seed, 0.5, secs=10.0)
        _run(folder / "runs", rule, seed, 0.5 + 0.01 * (seed + 1), secs=15.0)
    scope = {"methods": ["grpo", rule], "seeds": planned or seeds, "method_seeds": {}, "ablations": []}
    (folder / "study.json").write_text(json.dumps({"complete": planned is None, "scope": scope}))
    return folder


def _root(tmp_path: Path) -> Path:
    """A repository root whose committed short-chain screen has landed (grpo and oar-g, 5 seeds), and
    a committed page."""
    root = tmp_path / "repo"
    for seed in range(5):
        _run(root / "results/credit-screen/screen/runs", "grpo", 2000 + seed, 0.6, protocol="screen")
        _run(root / "results/credit-screen/screen/runs", "oar-g", 2000 + seed, 0.6, protocol="screen")
    (root / lb.PAGE).parent.mkdir(parents=True)
    (root / lb.PAGE).write_text("the committed page\n")
    return root


def _main(capsys, *argv: str) -> tuple[int, str]:
    rc = lb.main(list(argv))
    return rc, capsys.readouterr().err


def test_a_users_study_is_a_column_group_beside_the_committed_ones(tmp_path, capsys):
    """`--source mine=DIR`: the study's rule (a user's, by name) gets its Δ vs GRPO on the study's own 3
    seeds, labelled exploratory, not n/a; the committed regime stays beside it; the page says where the
    study and its credit module came from."""
    root, study = _root(tmp_path), _study(tmp_path / "my_study")
    out = tmp_path / "page.md"
    rc, err = _main(capsys, "--root", str(root), "--source", f"mine={study}", "--out", str(out))
    assert rc == 0, err
    text = out.read_text()
    assert "<th colspan='2'>wordproblems</th><th colspan='2'>mine</th>" in text  # the summary
    assert "## wordproblems: details" in text and "## mine: details" in text
    label = f"study {study}, test split"
    summary, short = [line for line in text.splitlines() if "<code>my-rule</code>" in line][:2]
    detail = next(line for line in text.splitlines() if "<code>my-rule</code>" in line and label in line)
    # diffs +1, +2, +3 pp: mean 2, sd 1, t(2) = 4.303 -> ±2.48; train time 15 s against 10 s
    assert summary.endswith("<td>no runs</td><td>+2.0 (−0.5, +4.5)</td><td>exploratory, 3 seeds</td></tr>")
    assert f"<td>+2.0 (−0.5, +4.5)</td><td>exploratory, 3 seeds</td><td>{label}</td>" in detail
    assert detail.endswith("<td>1.50×</td></tr>")
    assert "<td>n/a</td><td>0</td><td>no runs</td>" in short  # not in the committed regime
    grpo = next(line for line in text.splitlines() if "<code>grpo</code>" in line and label in line)
    assert f"<td>(reference)</td><td>exploratory, 3 seeds</td><td>{label}</td>" in grpo
    assert "**Your studies**" in text and "*exploratory* (fewer than 5 seeds" in text
    assert f"`--source mine={study}`" in text
    assert "credit module `examples/credit_rules/my_rules.py` (sha256 `abababababab`): `my-rule`" in text
    assert (root / lb.PAGE).read_text() == "the committed page\n"


def test_a_study_is_labelled_by_its_seeds_against_the_committed_sizes(tmp_path):
    """Exploratory under 5 seeds, screen-size under 10, confirmation-size from 10; a study still running
    says how many of its planned seeds are in."""
    assert sources.study_seeds_label(1) == "exploratory, 1 seed"
    assert sources.study_seeds_label(2, 3) == "exploratory, 2 of 3 planned seeds"
    assert sources.study_seeds_label(5, 5) == "screen-size, 5 seeds"
    assert sources.study_seeds_label(10) == "confirmation-size, 10 seeds"
    study = _study(tmp_path / "s", seeds=2, planned=6)
    regime = sources.study_regime(tmp_path, f"mine={study}", taken=())
    assert lb.accuracy_cells(tmp_path, regime, "my-rule")[:2] == [
        "+1.5 (-4.9, +7.9)",  # t(1) = 12.71 × 0.707 / √2
        "exploratory, 2 of 6 planned seeds",
    ]
    assert lb.accuracy_cells(tmp_path, regime, "oar-g")[:3] == ["n/a", "0", "no runs"]
    # a study made when the shared protocol recorded every credit module: the module is named all the same
    path = study / "runs" / "my-rule.seed0.json"
    rec = {**json.loads(path.read_text()), "protocol": {"credit_modules": [["old_rules.py", "cd" * 32]]}}
    path.write_text(json.dumps(rec))
    assert "credit module `old_rules.py` (sha256 `cdcdcdcdcdcd`)" in lb.page(tmp_path, (regime,))


def test_a_study_with_tuned_learning_rates_shows_its_rules_at_their_rates(tmp_path):
    """`oar-rl study --tune-lr` records each method's chosen rate as an override of its main variant: the
    rule's row was dropped (no default variant), silently. Now shown, and the evidence says so."""
    study = _study(tmp_path / "s")
    for path in (study / "runs").glob("*.json"):
        rec = json.loads(path.read_text())
        rec["overrides"] = {"learning_rate": 2e-4 if rec["variant"] == "grpo" else 4e-4}
        path.write_text(json.dumps(rec))
    _run(study / "runs", "my-rule[tau=0.2]", 0, 0.9)  # an ablation variant: not the rule's row
    path = study / "runs" / "my-rule[tau=0.2].seed0.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "overrides": {"tau": 0.2}}))
    regime = sources.study_regime(tmp_path, f"mine={study}", taken=())
    cells = lb.accuracy_cells(tmp_path, regime, "my-rule")
    assert cells[0] == "+2.0 (-0.5, +4.5)" and cells[2].endswith("each at its tuned learning rate")
    assert "my-rule" in lb.rules(tmp_path, (regime,)) and "my-rule[tau=0.2]" not in lb.rules(
        tmp_path, (regime,)
    )


def test_source_never_writes_the_committed_page(tmp_path, capsys):
    """With --source the page goes to --out, never to docs/results/leaderboard.md (nor is --check mixed
    with it)."""
    root, study = _root(tmp_path), _study(tmp_path / "my_study")
    for extra in ([], ["--out", str(root / lb.PAGE)], ["--check"]):
        rc, err = _main(capsys, "--root", str(root), "--source", f"mine={study}", *extra)
        assert rc == 2 and ("--out" in err), (extra, err)
        assert (root / lb.PAGE).read_text() == "the committed page\n"
    rc, err = _main(capsys, "--root", str(root), "--blame", "b.json", "--out", str(tmp_path / "p.md"))
    assert rc == 2 and "--source NAME=DIR" in err


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing", "is not a directory; pass an `oar-rl study --out DIR` folder"),
        ("no-equals", "expected NAME=DIR"),
        ("runs-folder", "it holds run files itself: pass the study folder above it"),
        ("no-runs", "has no runs/ folder"),
        ("empty", "has no run files yet"),
        (
            "duplicate",
            "the name 'mine' is taken; names in use: wordproblems, wordproblems-long at 4e-4, "
            "wordproblems-long at chosen rates, wordproblems-smollm2, mine",
        ),
        ("committed-name", "the name 'wordproblems' is taken"),
        ("not-a-run", "is not an `oar-rl study` run file (it lacks variant, seed"),
        ("two-protocols", "mixes run files of 2 protocols"),
        ("no-grpo", "has no grpo run; every Δ is paired to GRPO's run on the same seed (its rules: my-rule"),
        ("blinded", "is a pre-registered confirmation of the committed regime wordproblems"),
        ("blame-missing", "--blame 'nowhere.json': no such file; pass an `oar-rl blame --out DIR` record"),
        ("blame-unnamed", "with several --source, name the study it belongs to: --blame NAME=FILE"),
    ],
)
def test_a_bad_source_is_refused_naming_the_value_and_what_is_valid(tmp_path, capsys, case, expected):
    root, good = _root(tmp_path), _study(tmp_path / "good")
    d = tmp_path / "bad"
    src = [f"mine={d}"]
    extra: list[str] = []
    if case == "no-equals":
        src = [str(good)]
    elif case == "runs-folder":
        src = [f"mine={good / 'runs'}"]
    elif case == "no-runs":
        d.mkdir()
    elif case == "empty":
        (d / "runs").mkdir(parents=True)
    elif case == "duplicate":
        src = [f"mine={good}", f"mine={good}"]
    elif case == "committed-name":
        src = [f"wordproblems={good}"]
    elif case == "not-a-run":
        (d / "runs").mkdir(parents=True)
        (d / "runs" / "notes.json").write_text('{"hello": 1}')
    elif case == "two-protocols":
        _study(d)
        _run(d / "runs", "my-rule", 7, 0.5, protocol="p2")
    elif case == "no-grpo":
        _run(d / "runs", "my-rule", 0, 0.5)
    elif case == "blinded":  # the committed confirmation, still running: not read through --source either
        _study(root / "results/credit-screen/confirm")
        # refused by its path before any run file is opened: a file that would fail to parse is not reached
        (root / "results/credit-screen/confirm/runs/zz.json").write_text("not json")
        src = [f"c={root / 'results/credit-screen/confirm'}"]
    elif case == "blame-missing":
        src, extra = [f"mine={good}"], ["--blame", "nowhere.json"]
    elif case == "blame-unnamed":
        src, extra = [f"mine={good}", f"other={good}"], ["--blame", "b.json"]
    sources = [x for s in src for x in ("--source", s)]
    rc, err = _main(capsys, "--root", str(root), *sources, *extra, "--out", str(tmp_path / "p.md"))
    assert rc == 2, err
    assert expected in err
    value = {"blame-missing": "nowhere.json", "blame-unnamed": "b.json"}.get(case, src[-1])
    assert repr(value) in err  # the value named as given
    assert not (tmp_path / "p.md").exists()


def test_blame_and_recall_find_a_rule_under_its_name_then_under_the_default_probe(tmp_path, capsys):
    """A rule registered with probe=True (oar-p-span, a user's) is recorded as `rule/as-mean`; a rule
    without a probe plainly; oar-g's figures are those of `oar-g/as-mean`, as before. A study's own
    recall.json (the figures under "result", no bands before its format 2) is its default recall."""
    sig = {"w_error": [1.5, 1.4, 1.6], "w_last": [0.5, 0.4, 0.6], "error_minus_last": [1.0, 0.9, 1.1]}
    oar_g = {"oar-g/as-mean": {**sig, "w_error": [2.0]}, "oar-g/lt-logits": {**sig, "w_error": [9.0]}}
    blame = {"signals": {"oar-p-span/as-mean": sig, "my-rule": sig, **oar_g}}
    truth = {
        "recall": {"oar-p-span/as-mean": {"0.1": 0.4}, "my-rule": {"0.1": 0.2}, "oar-g/as-mean": {"0.1": 0.3},
                   "oar-g/lt-logits": {"0.1": 0.9}},
        "recall_ci95": {n: {"0.1": [0.1, 0.5]} for n in ("oar-p-span/as-mean", "my-rule", "oar-g/as-mean")},
        "paired_difference": {"oar-p-span/as-mean − position": {"0.1": [0.2, 0.1, 0.3]}},
    }  # fmt: skip
    (tmp_path / "blame.json").write_text(json.dumps(blame))
    (tmp_path / "recall.json").write_text(json.dumps({"ground_truth": truth}))
    regime = lb.Regime("r", "test", confirmed=(), blame="blame.json", recall="recall.json")
    assert lb.blame_cells(tmp_path, regime, "oar-p-span") == ["1.50 vs 0.50", "+1.00 (+0.90, +1.10)"]
    assert lb.blame_cells(tmp_path, regime, "my-rule") == ["1.50 vs 0.50", "+1.00 (+0.90, +1.10)"]
    assert lb.blame_cells(tmp_path, regime, "oar-g")[0] == "2.00 vs 0.50"  # as-mean, not lt-logits
    assert lb.recall_cells(tmp_path, regime, "oar-p-span") == ["0.40 (0.10, 0.50)", "+0.20 (+0.10, +0.30)"]
    assert lb.recall_cells(tmp_path, regime, "my-rule") == ["0.20 (0.10, 0.50)", "n/a"]
    assert lb.recall_cells(tmp_path, regime, "oar-g")[0] == "0.30 (0.10, 0.50)"
    assert lb.recall_cells(tmp_path, regime, "oar-gp") == ["n/a", "n/a"]
    # a probe rule's own reshaping (blame's `own_reshaping`) is under rule/as-mean too, and wins
    own_sig = {"w_error": [3.0], "w_last": [0.5], "error_minus_last": [2.5, 2.0, 3.0]}
    blame["own_reshaping"] = {"oar-p-span/as-mean": own_sig}
    (tmp_path / "blame.json").write_text(json.dumps(blame))
    assert lb.blame_cells(tmp_path, regime, "oar-p-span") == ["3.00 vs 0.50", "+2.50 (+2.00, +3.00)"]
    blame.pop("own_reshaping")
    (tmp_path / "blame.json").write_text(json.dumps(blame))
    # a study's own recall.json is its column group's recall, and --blame FILE its blame
    study = _study(tmp_path / "my_study", rule="oar-p-span")
    own = {"recall": {"oar-p-span/as-mean": {"0.1": 0.25}}}
    (study / "recall.json").write_text(json.dumps({"protocol_hash": "x", "result": {"ground_truth": own}}))
    (mine,) = sources.study_regimes(tmp_path, [f"mine={study}"], blame=[str(tmp_path / "blame.json")])
    assert lb.recall_cells(tmp_path, mine, "oar-p-span") == ["0.25", "n/a"]
    assert lb.blame_cells(tmp_path, mine, "oar-p-span")[0] == "1.50 vs 0.50"


def test_a_page_written_elsewhere_links_the_committed_pages_from_where_it_lies(tmp_path, capsys, monkeypatch):
    """The committed page links its docs pages by name (they lie beside it in docs/results/); a page
    written elsewhere with --out links the same pages relative to its own folder, so every link resolves
    (--root and --out relative to the current directory too)."""
    root, study = _root(tmp_path), _study(tmp_path / "my_study")
    docs = root / "docs" / "results"
    for name in ("credit-screen.md", "study.md", "blame.md", "cost.md"):
        (docs / name).write_text(f"# {name}\n")
    committed = lb.page(root)
    assert "([page](credit-screen.md))" in committed and "[study](study.md#recall)" in committed
    assert lb.page(root, out=root / lb.PAGE) == committed
    monkeypatch.chdir(tmp_path)
    for out, prefix in [
        (tmp_path / "pages" / "deep" / "mine.md", "../../repo/docs/results/"),
        (root / "mine.md", "docs/results/"),
        (docs / "mine.md", ""),
        (Path("pages/mine.md"), "../repo/docs/results/"),
    ]:
        rc, err = _main(capsys, "--root", "repo", "--source", f"mine={study}", "--out", str(out))
        assert rc == 0, err
        links = re.findall(r"\]\(([^)]+)\)", out.read_text())
        assert sorted(set(links)) == [
            f"{prefix}{name}"
            for name in ("blame.md", "cost.md", "credit-screen.md", "study.md", "study.md#recall")
        ]
        for link in links:
            assert (out.parent / link.partition("#")[0]).is_file(), (out, link)


def test_the_long_columns_are_named_by_their_rates_with_grpos_greedy_loss_from_the_run_files(tmp_path):
    """Issue 56: the 4e-4 column group says its rate, and the note under the summary gives GRPO's greedy
    loss there, recomputed here from the run files and the warm start; the chosen-rates group says which
    rules trained at which rate; Amendment 3's arms, landing in the same folder, are not rules' rows."""
    import statistics

    from experiments.leaderboard import regimes

    root = Path(__file__).resolve().parents[1]
    text = (root / lb.PAGE).read_text()
    runs = [json.loads(p.read_text()) for p in (root / regimes.LONG_RUNS).glob("*.json")]
    warm = 100 * json.loads((root / regimes.WARM_START_LONG).read_text())["test"]["greedy"]
    grpo = statistics.fmean(100 * r["final"]["greedy"] for r in runs if r["variant"] == "grpo")
    assert {r["learning_rate"] for r in runs} == {4e-4} and len(runs) == 50
    below = sum(100 * r["final"]["greedy"] < warm for r in runs)
    note = (f"- **wordproblems-long at 4e-4**: every rule at learning rate 4e-4, where GRPO does not learn: "
            f"its greedy accuracy ends {warm - grpo:.1f} points below the warm start's on the same test "
            f"sample ({grpo:.1f}% vs {warm:.1f}%), and {below} of the confirmation's 50 runs end "
            "below it.")  # fmt: skip
    assert note in text and "14.8 points" in note and "49 of" in note
    assert ("first-error, lowest-prob, random-departure, save-prefix at 1e-4; grpo, grpo-compute, entropy at "
            "2e-4") in text  # fmt: skip
    assert "<th colspan='2'>wordproblems-long at 4e-4</th>" in text
    # an arm outside a plan's fixed arms (Amendment 3's, at another rate) makes no row of its own
    folder = tmp_path / "results/credit-why/confirm/runs"
    folder.mkdir(parents=True)
    for name in ("grpo", "first-error", "first-error[lr=2e-4]", "grpo-seconds"):
        _run(folder, name, 400, 0.5)
    why = regimes.REGIMES[2]
    assert lb.rules(tmp_path, [why]) == ["grpo", "first-error"]


def test_train_time_is_compared_only_between_runs_of_one_machine():
    """The pretrained regime's runs come from two CPUs (its pre-registration's Amendment 2): the
    train-time cell pairs seeds whose two runs share a machine and thread count; runs made before run
    files recorded their machine are read as before, all of them."""
    from experiments.leaderboard.regimes import train_ratio

    xeon = {
        "cpu": "Intel(R) Xeon(R) Processor",
        "cpu_capability": "AVX512",
        "cpu_count": 2,
        "torch_threads": 1,
    }
    epyc = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "cpu_count": 2, "torch_threads": 2}
    grpo = {0: {"train_seconds": 100.0, "machine": xeon}, 1: {"train_seconds": 230.0, "machine": epyc}}
    oar = {0: {"train_seconds": 299.0, "machine": epyc}, 1: {"train_seconds": 299.0, "machine": epyc}}
    assert train_ratio(oar, grpo) == "1.30×"  # seed 1 only: seed 0's runs are of two CPUs
    grpo[1]["machine"] = xeon
    assert train_ratio(oar, grpo) == "n/a"
    unrecorded = {s: {"train_seconds": r["train_seconds"]} for s, r in grpo.items()}
    assert train_ratio(oar, unrecorded) == "1.81×"  # 299 / 165: as before machines were recorded
