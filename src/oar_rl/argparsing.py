"""One flag style for every `oar-rl` command, the way TRL's scripts take them.

TRL (through `transformers.HfArgumentParser`) accepts every multi-word flag in both spellings,
`--max_new_tokens` and `--max-new-tokens`, and prints each default in `--help`. The argparse-based
commands (`eval`, `attribute`, `oracle`, `demo`) build their parsers with the helpers here so they do
the same; `train` (TRL's own parser) additionally gets TRL's dataset flag names as aliases and its
oar-rl options grouped under their own headings, ahead of TRL's ~300 options.

Every parser takes whole flag names only (`allow_abbrev=False`: `study --seed 3` is not `--seeds 3`) and
reports a bad command line in one line, a misspelt flag with the nearest valid one (:class:`Parser`). A
flag renamed for one vocabulary across the commands keeps its old name for one release
(:func:`add_deprecated`: it works, with a one-line notice), or, where the old name meant something
else, is an error naming the new one (:func:`add_renamed`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

DATASET_ALIASES: dict[str, tuple[str, ...]] = {
    "dataset": ("dataset_name",),
    "dataset_split": ("dataset_train_split",),
}
"""oar-rl's data flag -> the names TRL's scripts use for it (accepted on the command line and in YAML)."""


class HelpFormatter(argparse.HelpFormatter):
    """Shows every option's default ("(default: ...)") unless its help already has "(default".

    Flags that default to None or False (optional values, switches) show none: "default: None" says
    nothing a reader can use.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "(default" in text.lower()
            or default is None
            or default is False
            or default is argparse.SUPPRESS
        ):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, list | tuple) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})"


def flag_names(name: str, *aliases: str) -> list[str]:
    """'--max-new-tokens' -> ['--max-new-tokens', '--max_new_tokens'] (plus both spellings of aliases)."""
    out: list[str] = []
    for n in (name, *aliases):
        base = n.lstrip("-")
        out += ["--" + base.replace("_", "-"), "--" + base.replace("-", "_")]
    return list(dict.fromkeys(out))


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` that takes no abbreviated flag and says what is wrong in one line.

    argparse prints the whole usage (18 lines for `oar-rl study`) before the line that matters; here an
    unknown flag is named with the nearest valid one (`unknown option(s): --seed (did you mean
    --seeds?)`), and any other error is `PROG: error: MESSAGE (PROG --help: the options)`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        words = message[len(prefix) :].split() if message.startswith(prefix) else []
        unknown = unknown_flags_message(self, words)
        hint = "" if unknown else f" ({self.prog} --help: the options)"
        self.exit(2, f"{self.prog}: error: {unknown or message}{hint}\n")


def new_parser(prog: str, description: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """A :class:`Parser` (whole flag names only, one-line errors) with the defaults-showing formatter."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    return Parser(prog=prog, description=description, **kwargs)


def add(parser: Any, name: str, *aliases: str, **kwargs: Any) -> argparse.Action:
    """`parser.add_argument` under both spellings of `name` (and of each alias); dest is `name`'s."""
    kwargs.setdefault("dest", name.lstrip("-").replace("-", "_"))
    return parser.add_argument(*flag_names(name, *aliases), **kwargs)


def dealias_config(config: dict[str, Any], aliases: dict[str, Sequence[str]]) -> dict[str, Any]:
    """A YAML recipe's keys with alias names (e.g. TRL's `dataset_name`) renamed to oar-rl's.

    ValueError when a key is given under two names, since one would silently win.
    """
    out = dict(config)
    for name, names in aliases.items():
        for alias in names:
            if alias in out:
                if name in out:
                    raise ValueError(f"the config gives both {name!r} and its alias {alias!r}; keep one")
                out[name] = out.pop(alias)
    return out


def group_options(
    parser: argparse.ArgumentParser, groups: Iterable[tuple[str, str | None, Iterable[str]]]
) -> None:
    """Move the options whose dest is listed into titled groups shown first in `--help`.

    `groups`: (title, description, dests). Parsing is unchanged; only the help layout moves.
    """
    moved: list[argparse._ArgumentGroup] = []
    for title, description, dests in groups:
        wanted = set(dests)
        group = parser.add_argument_group(title, description)
        parser._action_groups.remove(group)
        for old in parser._action_groups:
            keep = []
            for action in old._group_actions:
                (group._group_actions if action.dest in wanted else keep).append(action)
            old._group_actions[:] = keep
        moved.append(group)
    # after the positionals/"options" group holding -h, before everything else (TRL's options)
    parser._action_groups[2:2] = moved


def unknown_flags_message(parser: argparse.ArgumentParser, unknown: Iterable[str]) -> str:
    """'unknown option --datset (did you mean --dataset?)' for every flag in `unknown` (values skipped)."""
    import difflib

    known: dict[str, str] = {}  # a flag -> the flag to suggest (an old name: its new one)
    for flag, action in parser._option_string_actions.items():
        new = getattr(action, "new", None)  # _Deprecated: the new action; _Renamed: the new name
        new = new.option_strings[0] if isinstance(new, argparse.Action) else new
        if flag.startswith("--") and (action.help != argparse.SUPPRESS or new):
            known[flag] = new or flag
    parts = []
    for flag in unknown:
        if not flag.startswith("--"):
            continue
        name = flag.split("=", 1)[0]
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
        parts.append(f"{name} (did you mean {known[close[0]]}?)" if close else name)
    return "unknown option(s): " + ", ".join(parts) if parts else ""


class _Renamed(argparse.Action):
    """A flag that was renamed: using it is an error that names the new flag (never a silent no-op)."""

    def __init__(self, option_strings, dest, new: str = "", why: str = "", **kwargs):
        kwargs.update(nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        super().__init__(option_strings, dest=argparse.SUPPRESS, **kwargs)
        self.new, self.why = new, why

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was renamed {self.new}{f' ({self.why})' if self.why else ''}")


def add_renamed(parser: Any, old: str, new: str, why: str = "") -> argparse.Action:
    """Hidden flag `old` (both spellings) whose use exits with "OLD was renamed NEW (why)"."""
    return parser.add_argument(*flag_names(old), action=_Renamed, new=new, why=why)


class _Deprecated(argparse.Action):
    """An old name of a flag, kept for one release: it sets the new flag's value and says so, one line."""

    def __init__(self, option_strings, dest, new: argparse.Action | None = None, **kwargs):
        kwargs.update(help=argparse.SUPPRESS, default=argparse.SUPPRESS)
        super().__init__(option_strings, dest=dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        new = self.new.option_strings[0]
        when = "the old name goes in the next release"
        print(f"{parser.prog}: {option_string} is deprecated, use {new} ({when})", file=sys.stderr)
        self.new(parser, namespace, values, new)


def add_deprecated(parser: Any, old: str, new: argparse.Action) -> argparse.Action:
    """Hidden flag `old` (both spellings): an alias of the flag `new` (an action) that prints "OLD is
    deprecated, use NEW" when used."""
    kwargs: dict[str, Any] = {"nargs": new.nargs, "type": new.type, "choices": new.choices}
    if new.nargs == 0:  # a switch: no value to convert
        kwargs = {"nargs": 0}
    return parser.add_argument(
        *flag_names(old), action=_Deprecated, new=new, dest=new.dest, metavar=new.metavar, **kwargs
    )


def add_renaming(parser: Any, name: str, old: str | Sequence[str], **kwargs: Any) -> argparse.Action:
    """`add(parser, name, **kwargs)`, with each old name in `old` kept as a deprecated alias of it."""
    action = add(parser, name, **kwargs)
    for o in [old] if isinstance(old, str) else old:
        add_deprecated(parser, o, action)
    return action


TRL_DEBUG_VALUES = ("underflow_overflow", "tpu_metrics_debug")
"""Values of TRL's own `train --debug` (transformers' DebugOption), left to TRL."""


def pop_debug(argv: list[str]) -> tuple[bool, list[str]]:
    """(whether `--debug` was given, `argv` without it). A `--debug` followed by one of TRL's debug values
    (`train --debug underflow_overflow`) is TRL's and stays; OAR_RL_DEBUG=1 also asks for tracebacks."""
    import os

    rest, debug = [], os.environ.get("OAR_RL_DEBUG", "") not in ("", "0")
    for i, arg in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if arg == "--debug" and not any(v in nxt for v in TRL_DEBUG_VALUES):
            debug = True
        else:
            rest.append(arg)
    return debug, rest


def run_command(name: str, main_: Callable[[list[str]], int | None], argv: list[str]) -> int:
    """`main_(argv)` of command `name`, a ValueError it raises (a bad value, a credit rule's failure:
    `oar_rl.scoring.RuleError`) printed as one line, `oar-rl NAME: error: MESSAGE`; with `--debug` the
    traceback instead."""
    debug, argv = pop_debug(argv)
    try:
        return int(main_(argv) or 0)
    except ValueError as err:
        if debug:
            raise
        _close_bars()
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"oar-rl {name}: error: {message} (--debug: the traceback)", file=sys.stderr)
        return 1


def _close_bars() -> None:
    """Close the progress bars still open (a run stopped mid-step), so an error line starts a line."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()
