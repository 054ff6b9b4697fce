"""One GRPO (or any credit mode's) run on the word-problem testbed, outside the study: a quick pilot.

Trains with the study's own training function (`oar_rl.study.training.train_policy`) from the shipped
warm start or a saved model, measures sampled accuracy on the validation split every ``--every`` steps,
then the final sampled and greedy accuracy on more validation problems. docs/history.md's "Why RL barely
moved the first warm start" table was made with it. Run:

    python -m experiments.rl_pilot --lr 3e-4 --prompts 16 --steps 30 --out pilot.json
    python -m experiments.rl_pilot --model DIR --lr 1e-4 --prompts 32 --out pilot.json   # another warm start

Validation problems only: the study's test split stays untouched by pilots.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.rl_pilot", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--lr", type=float, required=True, help="Adam learning rate (constant)")
    p.add_argument("--prompts", type=int, default=16, help="prompts per step (default 16)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (default 8)")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    p.add_argument("--every", type=int, default=5, help="curve every N steps (default 5)")
    p.add_argument("--credit", default="none", help="credit mode (default none = GRPO)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", help="a saved word-problem model directory (default: the shipped warm start)")
    p.add_argument("--curve-problems", type=int, default=200, help="validation problems x 2 for the curve")
    p.add_argument("--final-problems", type=int, default=500, help="validation problems x 2 at the end")
    p.add_argument("--config", default="{}", help="extra OARConfig fields as JSON, e.g. '{\"beta\": 0.04}'")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="JSON file for the run's figures")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)

    from datasets import Dataset

    from oar_rl.io import write_text_atomic
    from oar_rl.study.training import HeldOutEval, heldout_accuracy, train_policy
    from oar_rl.tasks.wordproblems import WORDPROBLEMS as task

    if a.model:
        from oar_rl.tiny import load_model_dir

        model, tok = load_model_dir(Path(a.model))
        path = a.model
    else:
        from oar_rl.shipped import load_task_model

        model, tok, path = load_task_model("wordproblems")
    val = task.prompts("validation", max(a.curve_problems, a.final_problems))
    train = task.prompts("train", 2 * a.steps * a.prompts)

    def acc(m, n: int, greedy: bool = False) -> float:
        return heldout_accuracy(m, tok, val[:n], task.check, temperature=0.0 if greedy else 1.0,
                                samples=1 if greedy else 2, seed=1234, max_new_tokens=160)  # fmt: skip

    t0 = time.perf_counter()
    start = acc(model, a.curve_problems)
    curve = HeldOutEval(lambda m: acc(m, a.curve_problems), a.every, a.steps)
    with tempfile.TemporaryDirectory() as work:
        trained, history, seconds = train_policy(
            path, Dataset.from_list(train), task.reward, credit=a.credit, seed=a.seed, steps=a.steps,
            prompts_per_step=a.prompts, num_generations=a.group, learning_rate=a.lr,
            max_completion_length=160, temperature=1.0, workdir=work, callbacks=[curve],
            show_progress=False, answer_pattern=task.answer_pattern, **json.loads(a.config),
        )  # fmt: skip
    record = {
        "args": vars(a),
        "curve": {"0": start, **{str(k): v for k, v in curve.curve.items()}},
        "final_sampled": acc(trained, a.final_problems),
        "final_greedy": acc(trained, a.final_problems, greedy=True),
        "reward": [h["reward"] for h in history if "reward" in h],
        "entropy": [h["entropy"] for h in history if "entropy" in h],
        "train_seconds": seconds - curve.seconds,
        "wall_seconds": time.perf_counter() - t0,
    }
    write_text_atomic(Path(a.out), json.dumps(record, indent=1))
    pts = " ".join(f"{k}:{100 * v:.1f}" for k, v in record["curve"].items())
    print(f"curve (step:%) {pts}")
    print(f"final {100 * record['final_sampled']:.1f}% sampled, {100 * record['final_greedy']:.1f}% greedy "
          f"({a.final_problems} validation problems); {record['wall_seconds']:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
