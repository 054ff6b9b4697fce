"""Peak memory of OAR's scoring passes relative to the training step, in a real OARTrainer run (CPU).

Runs `--steps` optimizer steps of OARTrainer per credit mode with the tiny CPU recipe's settings
(configs/tiny-cpu.yaml: tiny random Qwen2, char tokenizer, 8 completions per device, 16 tokens) and a
digit-fraction reward (the recipe's math rewards are all 0 on a random model, so nothing would be
scored). Two phases are profiled with the PyTorch profiler's memory timeline (``profile_memory=True``):

- scoring: ``OARTrainer._assign_credit`` (every importance pass of one generation batch);
- training step: ``Trainer.training_step`` after TRL's ``_prepare_inputs`` (generation, rewards,
  scoring) has run: the forward and backward of the policy loss on the same batch, the optimizer step
  excluded.

Reported per phase: the peak of the bytes allocated during the phase above what was allocated when it
began (parameters, optimizer state and the batch are not counted), the max over steps, and the
ratio scoring / training step. CPU tensor allocations only (what the profiler records).
``torch.profiler.profile._memory_profile`` is a private PyTorch API; the figure is an allocation count,
not a wall-clock timing, so it does not depend on machine load.

    python -m experiments.cost.scoring_memory                           # tiny recipe, entropy/oar-g/oar-p
    python -m experiments.cost.scoring_memory --completion-length 64 --hidden-size 128 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml
from torch.profiler import ProfilerActivity, profile

from oar_rl import data
from oar_rl.config import OARConfig
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2
from oar_rl.trainer import OARTrainer

ROOT = Path(__file__).resolve().parents[2]


def digit_reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def peak_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(fn(), peak bytes allocated during fn above the level at its start)."""
    from torch.profiler._memory_profiler import Action

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        result = fn()
    live = peak = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if action == Action.CREATE:
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    return result, peak


def measure(credit: str, opts: argparse.Namespace, out_dir: str) -> dict[str, Any]:
    recipe = yaml.safe_load((ROOT / "configs" / "tiny-cpu.yaml").read_text())
    keys = set(OARConfig.__dataclass_fields__)
    fields = {k: v for k, v in recipe.items() if k in keys}
    fields.update(
        credit=credit,
        output_dir=out_dir,
        report_to=[],
        disable_tqdm=True,
        max_steps=opts.steps,
        max_completion_length=opts.completion_length,
    )
    args = OARConfig(**fields)
    tokenizer = build_char_tokenizer()
    model = tiny_qwen2(len(tokenizer), seed=0, hidden_size=opts.hidden_size, num_layers=opts.layers)
    trainer = OARTrainer(
        model=model,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=data.load("arithmetic", limit=recipe["limit"]),
        processing_class=tokenizer,
    )
    peaks: dict[str, list[int]] = {"scoring": [], "training_step": []}
    assign, step, prepare = trainer._assign_credit, trainer.training_step, trainer._prepare_inputs

    def assign_measured(*a: Any, **k: Any) -> Any:
        result, peak = peak_bytes(lambda: assign(*a, **k))
        peaks["scoring"].append(peak)
        return result

    def step_measured(model: Any, inputs: Any, *a: Any) -> Any:
        # TRL generates and scores inside training_step (its _prepare_inputs): do that first, unprofiled
        # here (the scoring is profiled on its own), then profile the loss forward/backward alone
        prepared = prepare(inputs)
        trainer._prepare_inputs = lambda x: x
        try:
            result, peak = peak_bytes(lambda: step(model, prepared, *a))
        finally:
            trainer._prepare_inputs = prepare
        peaks["training_step"].append(peak)
        return result

    trainer._assign_credit = assign_measured
    trainer.training_step = step_measured
    trainer.train()
    scoring, training = max(peaks["scoring"]), max(peaks["training_step"])
    return {
        "credit": credit,
        "scoring_peak_bytes": scoring,
        "training_step_peak_bytes": training,
        "ratio": scoring / training if training else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m experiments.cost.scoring_memory",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--credits", nargs="+", default=["entropy", "oar-g", "oar-p"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--completion-length", type=int, default=16, help="max_completion_length")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for credit in opts.credits:
            rows.append(measure(credit, opts, os.path.join(tmp, credit)))
    print(f"{'credit':<8} {'scoring peak':>14} {'train-step peak':>16} {'ratio':>7}")
    for r in rows:
        print(
            f"{r['credit']:<8} {r['scoring_peak_bytes'] / 2**10:>11.1f} KiB "
            f"{r['training_step_peak_bytes'] / 2**10:>12.1f} KiB {r['ratio']:>7.2f}"
        )
    if opts.json is not None:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        tmp_path = opts.json.with_suffix(".tmp")
        tmp_path.write_text(json.dumps({"settings": vars(opts) | {"json": str(opts.json)}, "rows": rows}))
        tmp_path.replace(opts.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
