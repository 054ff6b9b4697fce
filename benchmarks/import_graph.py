"""The import graph of `src/oar_rl`: layers, arrows, upward imports, cycles and file sizes.

    python benchmarks/import_graph.py            # the report
    python benchmarks/import_graph.py --edges    # and every arrow

Every `import` counts, module-level and inside functions (a function-level import is still a
dependency; it only defers it), and so does a string naming one of our modules (the CLI's and the
package's lazy `importlib.import_module` tables). `from pkg import name` points at `pkg.name` when
that is a module, else at `pkg`; importing a submodule is not counted as importing its package's `__init__`.

Layers: a module that imports nothing of ours is layer 0, any other is one above the highest module it
imports (a cycle's modules share a layer). Upward imports: arrows that run against the declared tiers
below (the order the design wants: utilities -> math -> probes/scorers -> trainer -> tasks ->
study/analysis -> CLI); an arrow inside a cycle is counted as a cycle, not here. `tests/test_layout.py`
keeps the tree at zero cycles, zero upward imports and no file over `MAX_LINES`.

The project's experiments (`experiments/`, beside the package) sit above all of it: the package imports
nothing of them (:func:`experiment_imports`), and they use only oar_rl's public names: no import of an
underscore module or name, and no underscore attribute of an oar_rl module they imported
(:func:`private_uses`). Their files are held to `MAX_LINES` too.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
PACKAGE = "oar_rl"
MAX_LINES = 500

# Declared tiers: an import may only point at the same tier or a lower one. The longest matching
# prefix wins, so a new module in a package takes the package's tier.
TIERS: dict[str, int] = {
    # 0 utilities: files, console, flags, model cache
    "oar_rl.io": 0,
    "oar_rl.console": 0,
    "oar_rl.argparsing": 0,
    "oar_rl.cache_check": 0,
    "oar_rl.machine": 0,
    "oar_rl.numerics": 0,  # CPU numerics profiles (issue 49)
    # 1 pure math, answer spans, data and rewards
    "oar_rl.reshape": 1,
    "oar_rl.metrics": 1,
    "oar_rl.answer_span": 1,
    "oar_rl.rewards": 1,
    "oar_rl.data": 1,
    # 2 model probes, scorers and sampling
    "oar_rl.model_parts": 2,
    "oar_rl.float64": 2,
    "oar_rl.probes": 2,
    "oar_rl.importance": 2,
    "oar_rl.distributed": 2,
    "oar_rl.sampling": 2,
    "oar_rl.roles": 2,
    "oar_rl.scoring": 2,  # ScoringContext: what every rule is given
    "oar_rl.rule_calls": 2,  # calling a rule: options, scorer, score checks (one-line errors)
    "oar_rl.credits": 2,
    "oar_rl.credit_names": 2,  # a rule's name as written: grpo and its alias none, the nearest names
    "oar_rl.credit_modules": 2,  # --credit-module: rules from the user's own file
    # 3 the TRL seam
    "oar_rl.config": 3,
    "oar_rl.credit_logging": 3,
    "oar_rl.trainer": 3,
    "oar_rl.vllm_sync": 3,  # the colocated vLLM engine on a CPU: reload_weights sync, engine options
    # 4 tasks, their warm starts, and models by name (`--model default`, fetched models)
    "oar_rl.tiny": 4,
    "oar_rl.fetch": 4,
    "oar_rl.model_identity": 4,  # a Hub id's commit, a local model's fingerprint (eval and train)
    "oar_rl.shipped": 4,
    "oar_rl.lora_sft": 4,  # a pretrained model's LoRA SFT warm start: recipe, build, verify, merge (issue 58)
    "oar_rl.tasks": 4,
    "oar_rl.options": 4,  # the shared command-line flags (names the tasks and warm starts)
    # 5 applications: training, evaluation, the cost benchmark, the study and the analyses
    "oar_rl.train": 5,
    "oar_rl.fetch_cli": 5,  # oar-rl fetch-model
    "oar_rl.warm_start": 5,  # oar-rl warm-start: build or verify a task's warm start
    "oar_rl.checkpoints": 5,  # oar-rl train's output directory and resume checks
    "oar_rl.train_data": 5,  # oar-rl train's dataset: columns and template checked before the model loads
    "oar_rl.eval": 5,
    "oar_rl.bench": 5,
    "oar_rl.study": 5,
    "oar_rl.analysis": 5,
    "oar_rl.gpu_check": 5,
    # 6 the command line and the public facade
    "oar_rl.cli": 6,
    "oar_rl": 6,
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def _targets(node: ast.AST, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == PACKAGE]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module.split(".")[0] != PACKAGE:
            return []
        out = []
        for alias in node.names:
            sub = f"{node.module}.{alias.name}"
            out.append(sub if sub in known else node.module)
        return out
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
        return [node.value]
    return []


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the set of our modules it imports (anywhere in the file)."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, known):
                while target not in known and "." in target:  # `import oar_rl.x.attr`
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layers(graph: dict[str, set[str]]) -> dict[str, int]:
    """Longest chain of imports below each module (a cycle's members share one layer)."""
    comp_of = {v: v for v in graph}
    for comp in cycles(graph):
        for v in comp:
            comp_of[v] = comp[0]
    memo: dict[str, int] = {}

    def depth(c: str) -> int:
        if c not in memo:
            memo[c] = 0  # guards the recursion; replaced below
            deps = {comp_of[w] for v in graph if comp_of[v] == c for w in graph[v]} - {c}
            memo[c] = 1 + max((depth(d) for d in deps), default=-1)
        return memo[c]

    return {v: depth(comp_of[v]) for v in graph}


def tier(name: str) -> int:
    best = max((p for p in TIERS if name == p or name.startswith(p + ".")), key=len, default=None)
    if best is None:
        raise KeyError(f"{name} has no declared tier in benchmarks/import_graph.py TIERS")
    return TIERS[best]


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    in_cycle = {(a, b) for comp in cycles(graph) for a in comp for b in comp}
    return sorted(
        (a, b) for a, deps in graph.items() for b in deps if tier(b) > tier(a) and (a, b) not in in_cycle
    )


def line_counts(root: Path = ROOT) -> dict[str, int]:
    return {name: len(path.read_text().splitlines()) for name, path in modules(root).items()}


def experiment_imports(root: Path = ROOT) -> list[str]:
    """`module:line` of every import of `experiments` (or string naming one of its modules) in the
    package: the package must run without the project's experiments (the wheel ships none)."""
    out = []
    for name, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                hit = any(a.name.split(".")[0] == "experiments" for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                hit = node.level == 0 and (node.module or "").split(".")[0] == "experiments"
            else:
                hit = isinstance(node, ast.Constant) and isinstance(node.value, str)
                hit = hit and node.value.startswith("experiments.") and " " not in node.value
            if hit:
                out.append(f"{name}:{node.lineno}")
    return out


def private_uses(experiments: Path = EXPERIMENTS) -> list[str]:
    """`file:line: name` of every private (underscore) name of oar_rl an experiment uses: an import of an
    underscore module or name from oar_rl, or an underscore attribute of an oar_rl module it imported."""
    out = []
    for path in sorted(experiments.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(experiments.parent).as_posix()
        bound: set[str] = set()  # local names of oar_rl modules
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == PACKAGE:
                        bound.add(a.asname or PACKAGE)
                        if any(part.startswith("_") for part in a.name.split(".")):
                            out.append(f"{rel}:{node.lineno}: {a.name}")
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] != PACKAGE:
                    continue
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if any(part.startswith("_") for part in full.split(".")):
                        out.append(f"{rel}:{node.lineno}: {full}")
                    bound.add(a.asname or a.name)  # a module or a name: attributes are checked either way
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                out.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
    return out


def unknown_modules(experiments: Path = EXPERIMENTS, root: Path = ROOT) -> list[str]:
    """`file:line: module` of every oar_rl or experiments module an experiment imports that does not exist
    (a function-level import of a moved module fails only when that function runs)."""
    known = set(modules(root)) | {module_name(p, experiments.parent) for p in experiments.rglob("*.py")}
    out = []
    for path in sorted(experiments.rglob("*.py")):
        rel = path.relative_to(experiments.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in (PACKAGE, "experiments") and name not in known:
                    out.append(f"{rel}:{node.lineno}: {name}")
    return out


def experiment_line_counts(experiments: Path = EXPERIMENTS) -> dict[str, int]:
    return {
        p.relative_to(experiments.parent).as_posix(): len(p.read_text().splitlines())
        for p in sorted(experiments.rglob("*.py"))
    }


def report(root: Path = ROOT, edges: bool = False) -> str:
    graph = import_graph(root)
    lines = line_counts(root)
    lay = layers(graph)
    circles = cycles(graph)
    up = upward(graph)
    out = [
        f"files: {len(graph)}  ({sum(lines.values())} lines)",
        f"layers: {max(lay.values()) + 1}",
        f"arrows: {sum(len(d) for d in graph.values())}",
        f"upward imports: {len(up)}",
        *(f"  {a} -> {b}  (tier {tier(a)} -> {tier(b)})" for a, b in up),
        f"cycles: {len(circles)}",
        *(f"  {' <-> '.join(c)}" for c in circles),
        f"files over {MAX_LINES} lines: {sum(n > MAX_LINES for n in lines.values())}",
        f"package imports of experiments/: {len(experiment_imports(root))}",
        *(f"  {x}" for x in experiment_imports(root)),
        f"private oar_rl names used by experiments/: {len(private_uses())}",
        *(f"  {x}" for x in private_uses()),
        "largest files:",
        *(f"  {n:5d}  {m}" for m, n in sorted(lines.items(), key=lambda kv: -kv[1])[:8]),
        "layers (bottom up):",
    ]
    for k in range(max(lay.values()) + 1):
        out.append(f"  {k}: " + ", ".join(sorted(m.removeprefix("oar_rl.") for m in lay if lay[m] == k)))
    if edges:
        out.append("arrows:")
        out.extend(f"  {a} -> {b}" for a in sorted(graph) for b in sorted(graph[a]))
    return "\n".join(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="list every import arrow")
    parser.add_argument("--root", type=Path, default=ROOT, help="the src directory holding oar_rl/")
    args = parser.parse_args()
    print(report(args.root.resolve(), edges=args.edges))
