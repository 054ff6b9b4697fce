"""`oar-rl demo`: the quick study under a short name -- `oar-rl study --quick --task wordproblems`.

The one demo path (`make demo` runs the same study). Only the flags that make sense for a demo are
taken; each is handed to `oar-rl study` unchanged, so `oar-rl demo --out DIR` and
`oar-rl study --quick --task wordproblems --out DIR` write the same study.json and report.html.
"""

from __future__ import annotations

import sys

STUDY_ARGS = ("--quick", "--task", "wordproblems")
"""What `oar-rl demo` always passes to `oar-rl study`, ahead of the user's flags."""


def study_argv(argv: list[str]) -> list[str]:
    """`oar-rl demo` arguments -> the `oar-rl study` arguments that run the same thing."""
    from oar_rl.argparsing import add, new_parser

    p = new_parser(
        "oar-rl demo",
        "The quick study on the embedded word-problem task (shipped warm start, CPU, no download): "
        f"the same as `oar-rl study {' '.join(STUDY_ARGS)} --out DIR`, which is what `make demo` runs. "
        "Writes study.json, plots and report.html; rerun the same command to resume.",
    )
    add(p, "--out", default="demo_out", help="output directory")
    add(p, "--methods", help="comma-separated methods (default: grpo,oar-g,oar-p)")
    add(p, "--seeds", help="seeds per method (default: 2)")
    add(p, "--steps", type=int, help="optimizer steps per run (default: 16)")
    add(p, "--cache-dir", help="warm-start model cache (default: $OAR_RL_CACHE/models)")
    add(p, "--fresh", action="store_true", help="discard the results in --out first")
    add(p, "--threads", type=int, default=1, help="torch CPU threads (0 = torch's own choice)")
    a = p.parse_args(argv)
    out = [*STUDY_ARGS, "--out", a.out, "--threads", str(a.threads)]
    for flag in ("methods", "seeds", "steps", "cache_dir"):
        if getattr(a, flag) is not None:
            out += [f"--{flag.replace('_', '-')}", str(getattr(a, flag))]
    return out + (["--fresh"] if a.fresh else [])


def main(argv: list[str] | None = None) -> int:
    args = study_argv(list(sys.argv[1:] if argv is None else argv))
    from oar_rl.study.cli import main as study_main

    print(f"oar-rl demo: the quick study, i.e. oar-rl study {' '.join(args)}", file=sys.stderr, flush=True)
    return study_main(args)
