"""A run's first steps to full precision, with the machine they ran on: a **fingerprint** (issue 49).

`python -m oar_rl.study.fingerprint --plan PLAN --arm grpo --seed 300 --steps 2` (or, for the project's
plans, `python -m experiments.credit_long fingerprint --arm grpo --seed 300 --steps 2`) trains the
plan's run of that arm and seed exactly as the screen does (`oar_rl.study.screen_plan.run_inputs` and
`oar_rl.study.runner.train_variant`, the same warm start, prompts and protocol) and stops after `--steps`
generation batches. Per step it keeps the loss, grad norm, reward and its spread, the policy's entropy,
the mean completion length (all as TRL logged them, float64 in JSON: every digit) and the sha256, sum and
absolute sum of the weights after the step, so two machines can be compared digit by digit before a
30-step run has had time to amplify a last-digit difference into a different accuracy.

The record names the machine (`oar_rl.machine.machine_info` and `numerics_info`: CPU model and SIMD
flags, the kernels torch dispatches to, `torch.__config__.show()`, the settings that change CPU kernels)
and is written atomically (`--json`). `--against FILE` compares it with a committed run file's history
(loss, grad norm, reward, entropy, completion length; the run files keep no weights) or another
fingerprint (every field) and says where they first differ. `--numerics PROFILE` runs it under a CPU
numerics profile (`oar_rl.numerics`; default: the plan's). `python -m oar_rl.study.fingerprint --kernel`
is the one-second version: one training step's kernels on the warm start, no generation
(:func:`kernel_fingerprint`; what `tests/test_fingerprint.py` compares across machines).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from oar_rl.io import write_text_atomic
from oar_rl.machine import machine_info, numerics_info
from oar_rl.numerics import PROFILES, apply
from oar_rl.study.screen_plan import ScreenPlan, load_plan, protocol, run_inputs

FORMAT = 1
LOGGED = {
    "loss": "loss",
    "grad_norm": "grad_norm",
    "reward": "reward",
    "reward_std": "reward_std",
    "entropy": "entropy",
    "mean_length": "completions/mean_length",
}
"""Fingerprint field -> TRL's log key (the run files' `history` rows keep the same keys)."""


def weights_digest(model) -> dict[str, Any]:
    """sha256 of every parameter's bytes (in `named_parameters` order, with names and shapes), and their
    float64 sum and absolute sum (which say how far apart two digests that differ are)."""
    import torch

    h = hashlib.sha256()
    total = absolute = 0.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = p.detach().cpu().contiguous()
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
            h.update(t.numpy().tobytes())
            t64 = t.double()
            total += float(t64.sum())
            absolute += float(t64.abs().sum())
    return {"weights_sha256": h.hexdigest(), "weights_sum": total, "weights_abs_sum": absolute}


class StepFingerprint(TrainerCallback):
    """After every optimizer step: the weights' digest (`self.digests` {step: digest}); stops training
    after `steps` steps."""

    def __init__(self, steps: int) -> None:
        if steps < 1:
            raise ValueError(f"steps={steps} must be >= 1")
        self.steps = steps
        self.digests: dict[int, dict[str, Any]] = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = int(state.global_step)
        if model is not None:
            self.digests[step] = weights_digest(model)
        if step >= self.steps:
            control.should_training_stop = True
        return control


def fingerprint(
    plan: ScreenPlan, arm: str, seed: int, steps: int, kind: str = "confirm", cache_dir: str | None = None
) -> dict[str, Any]:
    """The first `steps` steps of the plan's run (`kind`, `arm`, `seed`), as the screen trains it."""
    from oar_rl.study.config import protocol_hash
    from oar_rl.study.runner import train_variant

    if kind not in plan.eval:
        raise ValueError(f"kind {kind!r}: the plan {plan.name!r} has {', '.join(plan.eval)}")
    chosen = plan.arm(arm)
    task, s, ws, train_rows = run_inputs(kind, plan, cache_dir)
    cb = StepFingerprint(steps)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="oar-rl-fingerprint-") as work:
        _, history, seconds, _ = train_variant(
            task, ws, s, chosen.variant(), seed, train_rows, Path(work), [cb], learning_rate=s.learning_rate
        )
    rows = []
    for h in history:
        step = int(h.get("step", 0))
        if step in cb.digests and "loss" in h:
            logged = {k: h.get(key) for k, key in LOGGED.items()}
            rows.append({"step": step, **logged, "step_time": h.get("step_time"), **cb.digests[step]})
    return {
        "fingerprint_format": FORMAT,
        "plan": plan.name,
        "task": plan.task,
        "kind": kind,
        "arm": arm,
        "seed": seed,
        "protocol_hash": protocol_hash(protocol(kind, plan)),
        "steps": rows,
        "train_seconds": seconds,
        "wall_seconds": time.perf_counter() - t0,
        "machine": {**machine_info(), **numerics_info()},
    }


def kernel_fingerprint(task: str = "wordproblems-long", rows: int = 8, length: int = 256) -> dict[str, Any]:
    """One training step's kernels without generation, in about a second: the shipped warm start of
    `task` (eager attention, as the runs train it) on `rows` × `length` seeded random tokens, a
    policy-gradient loss with seeded per-row advantages, backward, gradient clipping at 1 and one AdamW
    step at 4e-4 (TRL's optimizer and clipping): the loss, the grad norm and the weights' digest. It runs
    the matmuls (MKL), the reductions and the optimizer's vector kernels (ATen) a run's step does, at
    the long regime's sequence length, so it tells two machines' (or two settings') rounding apart."""
    import torch

    from oar_rl.shipped import load_task_model

    model, _, _ = load_task_model(task)
    model.config._attn_implementation = "eager"
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, length), generator=g)  # (B, T)
    adv = torch.randn(rows, 1, generator=g)  # (B, 1)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=4e-4)
    logits = model(input_ids=ids).logits[:, :-1].float()  # (B, T-1, V)
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    loss = -(adv * logp).mean()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return {
        "task": task,
        "shape": [rows, length],
        "loss": loss.item(),
        "grad_norm": grad_norm.item(),
        **weights_digest(model),
        "machine": {**machine_info(), **numerics_info()},
    }


KERNEL_KEYS = ("loss", "grad_norm", "weights_sha256", "weights_sum", "weights_abs_sum")


def _rows(fp: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """{step: values} of a run file (its history), a fingerprint (its steps) or a kernel fingerprint (0)."""
    if "history" in fp:
        return {
            int(h["step"]): {k: h.get(key) for k, key in LOGGED.items()} for h in fp["history"] if "step" in h
        }
    if "steps" in fp:
        return {int(r["step"]): r for r in fp["steps"]}
    return {0: {"step": 0, **{k: fp.get(k) for k in KERNEL_KEYS}}}


def differences(fp: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Where fingerprint `fp` and `other` (a fingerprint, or a run file with a `history`) differ, step by
    step: one line per differing value ('step 1 loss: -0.0146237881854 vs -0.0146237770095'); empty if
    every value they share is identical. A run file has no weights, so only the logged values count; two
    kernel fingerprints (:func:`kernel_fingerprint`) compare as one step 0."""
    theirs = _rows(other)
    out = []
    for row in _rows(fp).values():
        them = theirs.get(row["step"])
        if them is None:
            continue
        for k, v in row.items():
            if k in ("step", "step_time") or k not in them or them[k] is None:
                continue
            if v != them[k]:
                out.append(f"step {row['step']} {k}: {v!r} vs {them[k]!r}")
    return out


def describe_machine(m: dict[str, Any]) -> str:
    """'AMD EPYC (AVX512; ATEN_CPU_CAPABILITY=avx2)': the CPU and the settings that change its kernels."""
    env = ", ".join(f"{k}={v}" for k, v in sorted((m.get("numerics_env") or {}).items()))
    return f"{m.get('cpu', '?')} ({m.get('cpu_capability', '?')}{'; ' + env if env else ''})"


def main(argv: list[str] | None = None, plan: ScreenPlan | None = None, prog: str | None = None) -> int:
    """The command line; given `plan` (an experiment's `__main__`), no `--plan`."""
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog=prog or "python -m oar_rl.study.fingerprint",
        description=__doc__.split("\n\n")[0],
    )
    if plan is None:
        p.add_argument("--plan", default=None, help="the plan: module:ATTR or a .py file that defines PLAN")
        p.add_argument("--kernel", action="store_true", help="one step's kernels only (no plan, ~1 s; "
                       ":func:`kernel_fingerprint`), on --task")  # fmt: skip
        p.add_argument("--task", default="wordproblems-long", help="--kernel: whose warm start")
    p.add_argument("--arm", default="grpo", help="the plan's arm (default grpo)")
    p.add_argument("--seed", type=int, default=None, help="the run's seed")
    p.add_argument("--kind", default="confirm", help="confirm (default) or screen: whose protocol")
    p.add_argument("--steps", type=int, default=2, help="generation batches to train (default 2)")
    p.add_argument("--numerics", default=None, choices=tuple(PROFILES),
                   help="run under this CPU numerics profile (default: the plan's)")  # fmt: skip
    p.add_argument("--json", default=None, help="write the fingerprint here (atomically)")
    p.add_argument("--against", default=None, help="a run file or fingerprint to compare with")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--cache-dir", "--cache_dir", dest="cache_dir", default=None)
    a = p.parse_args(argv)
    kernel = plan is None and a.kernel
    if plan is None and not kernel:
        if a.plan is None:
            p.error("give --plan (or --kernel)")
        try:
            plan = load_plan(a.plan)
        except ValueError as e:
            p.error(str(e))
    if not kernel and a.seed is None:
        p.error("give the run's --seed")
    apply(a.numerics if a.numerics is not None or kernel else plan.numerics)
    import torch

    torch.set_num_threads(a.threads)
    fp = (
        kernel_fingerprint(a.task)
        if kernel
        else fingerprint(plan, a.arm, a.seed, a.steps, a.kind, a.cache_dir)
    )
    if a.json:
        write_text_atomic(a.json, json.dumps(fp, indent=1, sort_keys=True) + "\n")
    where = describe_machine(fp["machine"])
    if kernel:
        print(f"kernels of one step on {a.task}'s warm start on {where}: loss {fp['loss']!r} "
              f"grad_norm {fp['grad_norm']!r} weights {fp['weights_sha256'][:16]} "
              f"sum {fp['weights_sum']!r}")  # fmt: skip
    else:
        print(f"{plan.name} {a.kind} {a.arm} seed {a.seed} on {where}, protocol {fp['protocol_hash']}, "
              f"{fp['train_seconds']:.1f} s")  # fmt: skip
    for r in fp.get("steps", []):
        print(f"step {r['step']}: loss {r['loss']!r} grad_norm {r['grad_norm']!r} reward {r['reward']!r} "
              f"entropy {r['entropy']!r} weights {r['weights_sha256'][:16]} "
              f"sum {r['weights_sum']!r}")  # fmt: skip
    if a.against:
        other = json.loads(Path(a.against).read_text())
        diff = differences(fp, other)
        print(f"against {a.against} ({describe_machine(other.get('machine') or {})}): "
              + ("identical" if not diff else f"{len(diff)} differ"))  # fmt: skip
        for line in diff:
            print("  " + line)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
