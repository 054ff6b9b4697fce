"""`oar-rl fetch-model`: a known model (or a .gguf file) as a plain model directory in the cache.

The command line of `oar_rl.fetch` (kept apart from it so that the tasks, which fetch their base models,
do not import the shared flags, which list the tasks).
"""

from __future__ import annotations

import sys

from oar_rl.fetch import KNOWN_MODELS, fetch_model, gguf_model_dir


def build_parser():
    """The `oar-rl fetch-model` parser."""
    from oar_rl.argparsing import new_parser
    from oar_rl.options import shared_parser

    p = new_parser(
        "oar-rl fetch-model",
        "write a known model (or a .gguf file) as a plain HF directory in the model cache; print its path",
        parents=[shared_parser("cache-dir", "threads")],
    )
    p.add_argument("name", help=f"one of {', '.join(KNOWN_MODELS)}, or a path to a .gguf file")
    return p


def main(argv: list[str] | None = None) -> int:
    from oar_rl.options import apply_threads

    a = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    apply_threads(a.threads)  # the de-quantisation runs in torch
    try:
        if a.name.endswith(".gguf"):
            path = gguf_model_dir(a.name, a.cache_dir)
        else:
            path = fetch_model(a.name, a.cache_dir)
    except (ValueError, OSError) as exc:
        print(f"oar-rl fetch-model: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
