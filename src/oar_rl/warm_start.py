"""`oar-rl warm-start`: build (or check) a task's warm start ahead of the commands that train from it.

    oar-rl warm-start --task wordproblems-smollm2 --threads 2   # the pretrained regime's LoRA SFT, ~25 min
    oar-rl warm-start --task wordproblems                       # the shipped one: verified, path printed

Loads the task's warm start exactly as `oar-rl study --task T` does (`Task.load_warm_start`): a cached
one is verified against its recipe (a mismatch is refused, never loaded), a missing one is built with a
progress bar, a shipped one is checked by sha256. The last line says what was loaded and where:
`warm start <task>/<variant>: recipe <hash>, <directory>`.
"""

from __future__ import annotations

import sys
import time


def build_parser():
    """The `oar-rl warm-start` parser."""
    from oar_rl.argparsing import add, new_parser
    from oar_rl.options import shared_parser

    p = new_parser(
        "oar-rl warm-start",
        "build a task's warm start into the model cache (or verify a cached or shipped one) and print where "
        "it is; the commands that train from it (oar-rl study --task ...) load the same one",
        parents=[
            shared_parser(
                "task",
                "threads",
                "cache-dir",
                task={"default": None, "required": True},
                cache_dir={
                    "help": "model cache: the base model and the built warm starts (default: "
                    "$OAR_RL_CACHE/models, else ~/.cache/oar-rl/models)"
                },
            )
        ],
    )
    add(
        p,
        "--warm-start",
        default="default",
        help="which of the task's warm starts (wordproblems-smollm2: default, or test: 2 steps, for tests)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from oar_rl.options import apply_threads
    from oar_rl.tasks import get_task

    apply_threads(a.threads)
    task = get_task(a.task)
    if a.warm_start not in task.warm_starts:
        raise ValueError(
            f"--warm-start {a.warm_start!r} is not valid for task {task.name!r}; valid: "
            + ", ".join(task.warm_starts)
        )
    t0 = time.perf_counter()
    ws = task.load_warm_start(a.warm_start, a.cache_dir)  # a refused one raises: one line (oar_rl.cli)
    seconds = time.perf_counter() - t0
    print(f"warm start {task.name}/{a.warm_start}: recipe {ws.recipe_hash}, {ws.path} ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
