"""`python -m experiments.cost SCRIPT [options]`: one of the cost scripts (each also runs on its own as
`python -m experiments.cost.SCRIPT`)."""

from __future__ import annotations

import importlib
import sys

SCRIPTS = {
    "importance_cost": "scorer time relative to one forward pass (OAR-P, OAR-G, OAR-GP, entropy)",
    "scoring_memory": "peak memory of the scoring passes relative to the training step",
    "generation_speed": "plain model.generate time per token of a bench shape",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SCRIPTS:
        print("usage: python -m experiments.cost {" + ",".join(SCRIPTS) + "} [options]", file=sys.stderr)
        for name, what in SCRIPTS.items():
            print(f"  {name}: {what}", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return int(importlib.import_module(f"experiments.cost.{argv[0]}").main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
