"""`oar-rl demo`: the quick study under a short name -- `oar-rl study --quick --task wordproblems`.

The one demo path (`make demo` runs the same study). Only the flags that make sense for a demo are
taken; each is handed to `oar-rl study` unchanged, so `oar-rl demo --out DIR` and
`oar-rl study --quick --task wordproblems --out DIR` write the same study.json and report.html.
"""

from __future__ import annotations

import argparse
import sys

STUDY_ARGS = ("--quick", "--task", "wordproblems")
"""What `oar-rl demo` always passes to `oar-rl study`, ahead of the user's flags."""


def build_parser() -> argparse.ArgumentParser:
    """The `oar-rl demo` parser."""
    from oar_rl.argparsing import add, add_renaming, new_parser
    from oar_rl.options import shared_parser
    from oar_rl.study.config import PRESETS

    quick = PRESETS["quick"]
    p = new_parser(
        "oar-rl demo",
        "The quick study on the embedded word-problem task (shipped warm start, CPU, no download): "
        f"the same as `oar-rl study {' '.join(STUDY_ARGS)} --out DIR`, which is what `make demo` runs. "
        "Writes study.json, plots and report.html; rerun the same command to resume.",
        parents=[shared_parser("out", "threads", "cache-dir", out={"default": "demo_out"})],
    )
    add_renaming(p, "--credits", "--methods", dest="methods",
                 help=f"credit rules, comma-separated (default: {','.join(quick.methods)})")  # fmt: skip
    add(p, "--seeds", help=f"seeds per method (default: {quick.seeds})")
    add(p, "--steps", type=int, help=f"optimizer steps per run (default: {quick.steps})")
    add(p, "--fresh", action="store_true", help="discard the results in --out first")
    return p


def study_argv(argv: list[str]) -> list[str]:
    """`oar-rl demo` arguments -> the `oar-rl study` arguments that run the same thing."""
    a = build_parser().parse_args(argv)
    out = [*STUDY_ARGS, "--out", a.out, "--threads", str(a.threads)]
    for dest, flag in (("methods", "--credits"), ("seeds", "--seeds"), ("steps", "--steps"),
                       ("cache_dir", "--cache-dir")):  # fmt: skip
        if getattr(a, dest) is not None:
            out += [flag, str(getattr(a, dest))]
    return out + (["--fresh"] if a.fresh else [])


def main(argv: list[str] | None = None) -> int:
    args = study_argv(list(sys.argv[1:] if argv is None else argv))
    from oar_rl.study.cli import main as study_main

    print(f"oar-rl demo: the quick study, i.e. oar-rl study {' '.join(args)}", file=sys.stderr, flush=True)
    return study_main(args)
