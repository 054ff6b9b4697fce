"""Worker for tests/test_multiprocess.py, run under `accelerate launch` (1 or 2 CPU processes, gloo).

Two optimizer steps of OARTrainer per credit mode on the tiny CPU recipe (configs/tiny-cpu.yaml: its
GRPO and OAR settings, the embedded arithmetic prompts), with the global batch fixed whatever the world
size (per-device batch = 16 / processes). Generation is replaced by a deterministic function of the
global row index and the step, because sampling draws from each rank's own RNG (a 2-process run cannot
sample what a 1-process run samples); everything after generation -- rewards, advantages, the scoring
passes, OAR, the loss, DDP -- is the real thing. Rows of the second half of the global batch (rank 1's
in a 2-process run) get identical completions within each group at step 0 (advantage 0: rank 1 has no
row to score), the first half at step 1 (rank 0 has none).

Writes <out>/<credit>-rank<r>.json: per generation batch the global row indices, prompt/completion ids,
completion mask and token advantages; the logged OAR metrics; whether this rank's parameters changed.

    accelerate launch --cpu --num_processes 2 tests/multiprocess_worker.py <out> oar-g oar-p
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import yaml

from oar_rl import data, distributed
from oar_rl.config import OARConfig
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2
from oar_rl.trainer import OARTrainer

ROOT = Path(__file__).resolve().parents[1]
GLOBAL_BATCH = 16
DIGITS_AND_TEXT = "0123456789 +=abc"


def digit_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """Deterministic toy reward with variance on a random model: the fraction of digit characters."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


class ScriptedTrainer(OARTrainer):
    """OARTrainer whose completions are a deterministic function of (step, global row)."""

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        tok = self.processing_class
        local = len(prompt_ids)
        step = int(self.state.global_step)
        G = self.args.num_generations
        out = []
        for i in range(local):
            row = self.accelerator.process_index * local + i
            degenerate = (row >= GLOBAL_BATCH // 2) == (step % 2 == 0)
            member = 0 if degenerate else row % G
            g = torch.Generator().manual_seed(1000 * step + 10 * (row // G) + member)
            n = self.args.max_completion_length
            text = "".join(DIGITS_AND_TEXT[int(j)] for j in torch.randint(0, 16, (n,), generator=g))
            out.append(tok(text, add_special_tokens=False)["input_ids"])
        return out, None


DUMMY_PASSES = [0]
_dummy_pass = distributed.dummy_pass


def counting_dummy_pass(model: torch.nn.Module, kind: int) -> None:
    DUMMY_PASSES[0] += 1
    _dummy_pass(model, kind)


def main(out_dir: str, credits: list[str]) -> None:
    distributed.dummy_pass = counting_dummy_pass  # ScoringSync looks it up at call time
    recipe = yaml.safe_load((ROOT / "configs" / "tiny-cpu.yaml").read_text())
    tokenizer = build_char_tokenizer()
    # prompts of one length and completions of one length: every rank pads to the same widths as the
    # one-process run, so the scoring passes see the same shapes (quantile cuts are discontinuous: a
    # last-ulp difference from a different padding width can move a token across τ)
    dataset = data.load("arithmetic")
    width = len(dataset[0]["prompt"])
    dataset = dataset.filter(lambda r: len(r["prompt"]) == width).select(range(recipe["limit"]))
    keys = set(OARConfig.__dataclass_fields__)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch
    for credit in credits:
        fields = {k: v for k, v in recipe.items() if k in keys}
        fields.update(
            credit=credit,
            output_dir=str(Path(out_dir) / credit),
            report_to=[],
            disable_tqdm=True,
            per_device_train_batch_size=GLOBAL_BATCH // world,
            perturbation_batch_size=8,
            # DeepSpeed picks its CPU accelerator itself; accelerate's use_cpu would bypass DeepSpeed
            use_cpu=os.environ.get("ACCELERATE_USE_DEEPSPEED", "false") != "true",
            # plain SGD: Adam turns last-ulp gradient differences (DDP's averaged all-reduce vs one
            # process's sum) on near-zero gradients into learning-rate-sized steps
            optim="sgd",
            learning_rate=0.1,
        )
        args = OARConfig(**fields)
        # float64: after one step the two runs' parameters differ in the last bits (all-reduce order), and
        # OAR-P's KL between two nearly equal distributions would magnify that in float32
        model = tiny_qwen2(len(tokenizer), seed=0).double()
        trainer = ScriptedTrainer(
            model=model,
            reward_funcs=digit_reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        before = [p.detach().clone() for p in trainer.model.parameters()]
        DUMMY_PASSES[0] = 0
        batches: list[dict[str, Any]] = []
        seam = trainer._generate_and_score_completions

        def spy(inputs, seam=seam, batches=batches, trainer=trainer):
            output = seam(inputs)
            local = output["completion_ids"].shape[0]
            offset = trainer.accelerator.process_index * local
            batches.append(
                {
                    "rows": list(range(offset, offset + local)),
                    "prompt_ids": output["prompt_ids"].tolist(),
                    "prompt_mask": output["prompt_mask"].tolist(),
                    "completion_ids": output["completion_ids"].tolist(),
                    "completion_mask": output["completion_mask"].tolist(),
                    "advantages": output["advantages"].float().tolist(),
                }
            )
            return output

        trainer._generate_and_score_completions = spy
        trainer.train()
        after = list(trainer.model.parameters())
        changed = any(not torch.equal(a, b.detach()) for a, b in zip(before, after, strict=True))
        record = {
            "world": world,
            "rank": trainer.accelerator.process_index,
            "batches": batches,
            "log_history": trainer.state.log_history,
            "params_changed": changed,
            "distributed_type": str(trainer.accelerator.distributed_type),
            "fsdp_version": trainer._dist.fsdp_version,
            "dummy_passes": DUMMY_PASSES[0],
        }
        path = Path(out_dir) / f"{credit}-rank{trainer.accelerator.process_index}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2:])
    # tear the process group down, then leave without the interpreter's shutdown: its C++ static
    # destructors can still abort a rank ("terminate called without an active exception": a joinable
    # std::thread destroyed) on a loaded machine, even after destroy_process_group. Every result file
    # is written (write, then rename) before this point.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
