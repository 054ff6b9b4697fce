"""The source tree's shape: no import circle, no import against the declared tiers, no file over 500 lines;
the package imports none of the project's experiments, which use only its public names.

The graph and the tiers are `benchmarks/import_graph.py`'s (run it for the full report).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("import_graph", ROOT / "benchmarks" / "import_graph.py")
graph_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(graph_mod)


def test_no_import_cycles():
    assert graph_mod.cycles(graph_mod.import_graph()) == []


def test_imports_only_run_downward():
    graph = graph_mod.import_graph()
    for name in graph:
        graph_mod.tier(name)  # every module has a declared tier (KeyError names the one that has none)
    assert graph_mod.upward(graph) == []


def test_no_source_file_over_the_limit():
    sizes = graph_mod.line_counts()
    assert {m: n for m, n in sizes.items() if n > graph_mod.MAX_LINES} == {}


def test_the_graph_sees_function_level_and_lazy_imports(tmp_path):
    pkg = tmp_path / "oar_rl"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('_LAZY = {"x": "oar_rl.b"}\n')
    (pkg / "a.py").write_text("def f():\n    from oar_rl.sub import c\n")
    (pkg / "b.py").write_text("import oar_rl.a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from oar_rl import b\n")
    graph = graph_mod.import_graph(tmp_path)
    assert graph["oar_rl"] == {"oar_rl.b"}
    assert graph["oar_rl.a"] == {"oar_rl.sub.c"}
    assert graph_mod.cycles(graph) == [["oar_rl.a", "oar_rl.b", "oar_rl.sub.c"]]


def test_the_package_imports_no_experiment():
    assert graph_mod.experiment_imports() == []


def test_experiments_use_only_public_names():
    assert graph_mod.private_uses() == []
    assert graph_mod.unknown_modules() == []  # e.g. a function-level import of a module that moved
    sizes = graph_mod.experiment_line_counts()
    assert sizes and {f: n for f, n in sizes.items() if n > graph_mod.MAX_LINES} == {}


def test_the_experiment_checks_see_what_they_forbid(tmp_path):
    pkg = tmp_path / "src" / "oar_rl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from experiments.x import plan\n")
    (pkg / "b.py").write_text('X = {"y": "experiments.leaderboard"}\nY = "see experiments. here"\n')
    assert graph_mod.experiment_imports(tmp_path / "src") == ["oar_rl.a:2", "oar_rl.b:1"]
    exp = tmp_path / "experiments" / "e"
    exp.mkdir(parents=True)
    (exp / "m.py").write_text(
        "import oar_rl._hidden\n"
        "from oar_rl.tiny import _load, build_char_tokenizer\n"
        "from oar_rl import tiny as t\n"
        "x = t._cache, t.tiny_qwen2, oar_rl.__name__\n"
    )
    assert graph_mod.private_uses(tmp_path / "experiments") == [
        "experiments/e/m.py:1: oar_rl._hidden",
        "experiments/e/m.py:2: oar_rl.tiny._load",
        "experiments/e/m.py:4: t._cache",
    ]
