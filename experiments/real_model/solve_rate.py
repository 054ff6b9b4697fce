"""How often SmolLM2-135M-Instruct solves the one-step word problems itself: the measurement behind the
real-model page's "it rarely solves even one-step problems when it samples" (why its trajectories are
reference solutions, and why `--own` needs thousands of samples for a few dozen correct ones).

The problems are `--own`'s (`make_own_problems`: "has a, buys b more", a, b in 1..9, asked for a boxed
answer), under the chat template, 96 new tokens, checked as the study checks them (the rewarded answer,
compared as an exact number). Greedy on the first problems, then one sample per problem at each
temperature; every count comes with its Wilson 95% interval.

    python -m experiments.real_model.solve_rate --out results/real-model   # writes solve_rate.json/.md
"""

from __future__ import annotations

import json
import math
import time
from fractions import Fraction
from pathlib import Path

import torch

from experiments.real_model.recall import make_own_problems
from oar_rl.analysis.attribute import load_model, sample_trajectories
from oar_rl.io import ensure_writable_dir, write_text_atomic
from oar_rl.rewards.extract import as_number, extract_prediction

SETTINGS = ((0.0, 30), (0.7, 48), (1.0, 64))
"""(temperature, problems): greedy on 30, one sample on each of 48 at 0.7 and 64 at 1.0."""


def check(text: str, gold: str) -> bool:
    pred, kind = extract_prediction(text)
    return kind is not None and as_number(pred) == Fraction(gold)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of k successes in n."""
    p, d = k / n, 1 + z * z / n
    mid, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


def main(argv: list[str] | None = None) -> int:
    from oar_rl.argparsing import add, new_parser
    from oar_rl.fetch import resolve_model

    p = new_parser("python -m experiments.real_model.solve_rate", __doc__.split("\n\n")[0])
    add(p, "--model", default="smollm2-135m", help="model (default: the fetched SmolLM2-135M-Instruct)")
    add(p, "--seed", type=int, default=0)
    add(p, "--threads", type=int, default=1)
    add(p, "--out", default="results/real-model", help="directory for solve_rate.json and solve_rate.md")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    out = ensure_writable_dir(a.out)
    t0 = time.perf_counter()
    model, tok = load_model(resolve_model(a.model))
    ds = make_own_problems(max(n for _, n in SETTINGS), a.seed)
    rows = []
    for temperature, n in SETTINGS:
        trajs = sample_trajectories(
            model, tok, ds["prompt"][:n], ds["answer"][:n], chat=True, temperature=temperature,
            max_new_tokens=96, seed=a.seed,
        )  # fmt: skip
        k = sum(check(t.completion, t.answer) for t in trajs)
        rows.append({"temperature": temperature, "problems": n, "correct": k, "wilson95": wilson(k, n),
                     "example": trajs[0].completion})  # fmt: skip
        print(f"T = {temperature}: {k} of {n} correct", flush=True)
    record = {"model": a.model, "seed": a.seed, "threads": a.threads, "rows": rows,
              "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    write_text_atomic(Path(out) / "solve_rate.json", json.dumps(record, indent=2) + "\n")
    lines = [
        f"SmolLM2's own solve rate on `--own`'s one-step problems (seed {a.seed}; "
        f"`python -m experiments.real_model.solve_rate`, {record['seconds']} s):",
        "",
        "| decoding | correct | Wilson 95% |",
        "|---|---:|---:|",
    ]
    for r in rows:
        name = "greedy" if r["temperature"] == 0 else f"T = {r['temperature']}"
        low, high = r["wilson95"]
        lines.append(f"| {name} | {r['correct']} of {r['problems']} | {low:.2f}–{high:.2f} |")
    write_text_atomic(Path(out) / "solve_rate.md", "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
