"""One flag style for every `oar-rl` command, the way TRL's scripts take them.

TRL (through `transformers.HfArgumentParser`) accepts every multi-word flag in both spellings,
`--max_new_tokens` and `--max-new-tokens`, and prints each default in `--help`. The argparse-based
commands (`eval`, `attribute`, `oracle`, `demo`) build their parsers with the helpers here so they do
the same; `train` (TRL's own parser) additionally gets TRL's dataset flag names as aliases and its
oar-rl options grouped under their own headings, ahead of TRL's ~300 options.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

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


def new_parser(prog: str, description: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """An `ArgumentParser` with the defaults-showing formatter."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    return argparse.ArgumentParser(prog=prog, description=description, **kwargs)


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

    known = [s for s in parser._option_string_actions if s.startswith("--")]
    parts = []
    for flag in unknown:
        if not flag.startswith("--"):
            continue
        name = flag.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        parts.append(f"{name} (did you mean {close[0]}?)" if close else name)
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
