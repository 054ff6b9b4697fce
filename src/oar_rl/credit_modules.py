"""`--credit-module PATH_OR_MODULE`: load credit rules from the user's own file or module.

A credit module is a Python file (``my_rules.py``) or an importable module (``my_pkg.rules``; the current
directory is put on `sys.path` for it, as `oar-rl train` does for a reward function's module) that calls
``oar_rl.register_credit(...)`` when imported (docs/guides/own-credit-rule.md). Every command that takes a
credit mode loads it before the mode is validated: `OARConfig(credit_module=[...])` (so `oar-rl train`, its
YAML recipes and the Python API), `oar-rl study`, `blame`, `attribute`, `oracle` and `bench` (whose worker
processes load it again). :func:`load_credit_module` imports each module once per process and returns what was
loaded: the spec as given, the file's path and the sha256 of its source, and the rules it registered -- the
study records them on each run of the module's rules (not in its shared protocol, so a rule can join a
study and reuse its GRPO runs), and refuses a stored run whose module's code has changed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

FLAG = "--credit-module"


@dataclass(frozen=True)
class CreditModule:
    """One loaded credit module."""

    spec: str
    """As given: a .py path or a dotted module name."""
    path: str
    """The source file, resolved."""
    sha256: str
    """sha256 of the source file's bytes; with helper files (the user's own modules its rules' scorers
    come from), of every file's name and bytes."""
    rules: tuple[str, ...]
    """The credit rules it registered."""

    def record(self) -> dict[str, str]:
        """What a run file records: the spec as given and the source's sha256."""
        return {"module": self.spec, "sha256": self.sha256}


LOADED: dict[str, CreditModule] = {}
"""Loaded modules by resolved source path (each is imported once per process)."""


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec or Path(spec).is_file()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_credit_module(spec: str) -> CreditModule:
    """Import the credit module `spec` (a .py path or a dotted module name) once; ValueError naming it
    when it cannot be found or imported, or registers no rule."""
    from oar_rl import credits

    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{FLAG} needs a .py file or a dotted module name, got {spec!r}")
    spec = spec.strip()
    before = set(credits.CREDIT_MODES)
    if _is_path(spec):
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"{FLAG} {spec}: no such file ({path})")
        if str(path) in LOADED:
            return LOADED[str(path)]
        module = _imported_from(path)  # imported already (e.g. by the user's script): not run twice
        if module is not None:
            return _record(spec, path, module, before, cached=True)
        name = f"oar_rl_credit_module_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        loader = importlib.util.spec_from_file_location(name, path)
        if loader is None or loader.loader is None:
            raise ValueError(f"{FLAG} {spec}: not a Python source file")
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        try:
            loader.loader.exec_module(module)
        except Exception as err:
            sys.modules.pop(name, None)
            raise ValueError(f"{FLAG} {spec}: importing it failed: {type(err).__name__}: {err}") from err
    else:
        cached = spec in sys.modules
        cwd_importable()  # `--credit-module my_rules` next to the user's recipe, under the console script
        try:
            module = importlib.import_module(spec)
        except Exception as err:
            raise ValueError(
                f"{FLAG} {spec}: cannot import it ({type(err).__name__}: {err}); give a .py file or an "
                "importable dotted module name"
            ) from err
        path = Path(getattr(module, "__file__", "") or "").resolve()
        if not path.is_file():
            raise ValueError(f"{FLAG} {spec}: the module has no source file to record")
        if str(path) in LOADED:
            return LOADED[str(path)]
        return _record(spec, path, module, before, cached)
    return _record(spec, path, module, before, cached=False)


def cwd_importable() -> None:
    """Put the current directory first on `sys.path`, as `python -m` and `python script.py` do (the
    `oar-rl` console script does not): a dotted module in it (a credit module, a reward function of
    `oar-rl train`) imports by its name."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def _imported_from(path: Path) -> ModuleType | None:
    """A module in `sys.modules` whose source file is `path`, or None."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return module
    return None


def _record(spec: str, path: Path, module: ModuleType, before: set[str], cached: bool) -> CreditModule:
    """The loaded module's record: the rules it registered now, or when it was imported before. A module
    imported before whose rules were unregistered since (`unregister_credit`) is reloaded once."""
    from oar_rl import credits

    def rules_now() -> tuple[str, ...]:
        return tuple(
            n
            for n, mode in credits.CREDIT_MODES.items()
            if n not in before or module.__name__ in mode.modules
        )

    rules = rules_now()
    if not rules and cached:
        try:  # its own loader (a file loaded by path has no finder for importlib.reload)
            module.__spec__.loader.exec_module(module)
        except Exception as err:
            raise ValueError(f"{FLAG} {spec}: reloading it failed: {type(err).__name__}: {err}") from err
        rules = rules_now()
    if not rules:
        raise ValueError(
            f"{FLAG} {spec}: the module registered no credit rule; call oar_rl.register_credit(...) in it "
            "(docs/guides/own-credit-rule.md)"
        )
    loaded = CreditModule(spec, str(path), _digest(path, _helper_files(module, rules)), rules)
    LOADED[str(path)] = loaded
    return loaded


def _helper_files(module: ModuleType, rules: tuple[str, ...]) -> list[Path]:
    """The source files of the user's own modules, other than `module`, that its rules come from (a
    scorer in a helper module, a partial of one): outside this package, the interpreter's library and
    installed packages (those carry their own versions)."""
    import sysconfig

    from oar_rl import credits

    skip = [Path(__file__).resolve().parent]
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if sysconfig.get_path(key):
            skip.append(Path(sysconfig.get_path(key)).resolve())
    files: dict[str, Path] = {}
    for rule in rules:
        for name in credits.CREDIT_MODES[rule].modules:
            file = getattr(sys.modules.get(name), "__file__", None)
            if name == module.__name__ or not file:
                continue
            path = Path(file).resolve()
            if not any(path.is_relative_to(root) for root in skip):
                files[str(path)] = path
    return [files[k] for k in sorted(files)]


def _digest(path: Path, helpers: list[Path]) -> str:
    """sha256 of the module's source, or, when its rules come from helper files too, of every file's name
    and bytes (so a changed helper changes the recorded sha256 and a study refuses the old runs; a module
    without helpers keeps its hash)."""
    if not helpers:
        return _sha256(path)
    h = hashlib.sha256()
    for p in (path, *helpers):
        h.update(f"{p.name}\0".encode() + p.read_bytes() + b"\0")
    return h.hexdigest()


def load_credit_modules(specs: Iterable[str] | None) -> list[CreditModule]:
    """:func:`load_credit_module` of each spec, in order (None: none)."""
    return [load_credit_module(s) for s in specs or ()]


def specs_in_argv(argv: Sequence[str]) -> list[str]:
    """The values of every ``--credit-module X [Y ...]`` / ``--credit-module=X`` (and ``--credit_module``)
    in `argv`, repeats accumulated: loaded before a parser whose choices list the credit rules is built.
    After the flag, every argument up to the next option (one starting with '-') is a value, as
    `oar-rl train`'s ``nargs='+'`` reads them; after ``=``, the one value."""
    out: list[str] = []
    names = (FLAG, "--credit_module")
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in names:
            while i < len(argv) and not (argv[i].startswith("-") and argv[i] != "-"):
                out.append(argv[i])
                i += 1
        elif arg.startswith(tuple(n + "=" for n in names)):
            out.append(arg.split("=", 1)[1])
    return out


def add_flag(parser) -> None:
    """`--credit-module X [Y ...]` (both spellings; repeats accumulate) on an argparse parser or group, read
    as `oar-rl train` reads it (`specs_in_argv`): a flat list of specs."""
    from oar_rl.argparsing import add

    add(
        parser,
        FLAG,
        action="extend",
        nargs="+",
        default=None,
        metavar="PATH_OR_MODULE",
        help="one or more .py files or dotted modules that register credit rules with oar_rl.register_credit "
        "(repeatable; docs/guides/own-credit-rule.md); their rules become valid credit modes",
    )
