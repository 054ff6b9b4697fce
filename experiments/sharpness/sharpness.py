"""How sharp is a warm start along its own policy gradient? The check behind the testbed's RL protocol.

GRPO on the first word-problem warm start learned only with small steps (docs/history.md, "Why RL barely moved
the first warm start"). This measures why, on any saved task model:

1. sample ``--prompts`` training prompts × ``--group`` completions at T = 1, reward them, and form GRPO's
   group-normalised advantages A_i = (r_i − mean) / (std + 1e-4);
2. compute the policy gradient g of Σ_i A_i Σ_t log π(y_t) / (number of completion tokens) (the DAPO
   normalisation TRL uses), exactly, in one backward over the whole batch;
3. step from the warm start along +g and −g (L2 steps of a given norm, and Adam-like sign steps of a
   given size per parameter), along a random direction of the same norm, and along each parameter
   group's share of the +g step alone, and measure the held-out reward after each step on
   ``--heldout`` other prompts × ``--samples`` completions, with one sampling seed for every point;
4. signal or noise: a second gradient from other prompts; the cosine of the two, and steps along their
   mean (signal kept) and their half-difference (pure sampling noise with the same structure).

A model is *sharp* in this sense when a step along +g far below a harmless random step already lowers
the held-out reward. Run:

    python -m experiments.sharpness                               # the shipped word-problem warm start
    python -m experiments.sharpness --model DIR --json out.json   # another saved model of the same task

Every figure is a held-out reward; its binomial standard error is about 0.5/sqrt(heldout × samples).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from oar_rl.data.arithmetic import check
from oar_rl.data.wordproblems import split_problems
from oar_rl.io import write_text_atomic
from oar_rl.sampling import sample_ids

TASK = "wordproblems"
"""The word-problem task (`--task`): its splits, warm start and completion budget."""
BUDGET = 160


def _load(model_dir: str | None):
    if model_dir is None:
        from oar_rl.shipped import load_task_model

        model, tok, _ = load_task_model(TASK)
        return model, tok
    from oar_rl.tiny import load_model_dir as load_dir

    return load_dir(Path(model_dir))


def heldout_reward(model, tok, problems, samples: int, seed: int) -> float:
    prompts = [p.prompt for p in problems for _ in range(samples)]
    gold = [str(p.answer) for p in problems for _ in range(samples)]
    out = sample_ids(model, tok, prompts, temperature=1.0, max_new_tokens=BUDGET, seed=seed)
    return sum(check(tok.decode(c), g) for (_, c), g in zip(out, gold, strict=True)) / len(out)


def policy_gradient(model, tok, problems, group: int, seed: int) -> tuple[dict[str, torch.Tensor], float]:
    """(ascent direction per parameter name, mean training reward) of GRPO's loss on fresh samples."""
    prompts = [p.prompt for p in problems for _ in range(group)]
    gold = [str(p.answer) for p in problems for _ in range(group)]
    out = sample_ids(model, tok, prompts, temperature=1.0, max_new_tokens=BUDGET, seed=seed)
    r = torch.tensor([float(check(tok.decode(c), g)) for (_, c), g in zip(out, gold, strict=True)])
    r = r.view(len(problems), group)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()
    eos = torch.tensor([tok.eos_token_id])
    n_tokens = sum(len(c) + 1 for _, c in out)  # completion tokens and their EOS
    model.zero_grad(set_to_none=True)
    model.train()
    for lo in range(0, len(out), 64):
        chunk = out[lo : lo + 64]
        seqs = [torch.cat([p, c, eos]) for p, c in chunk]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), tok.pad_token_id)  # (n, L) left-padded like TRL
        attn = torch.zeros_like(ids)
        scored = torch.zeros_like(ids, dtype=torch.bool)  # completion tokens (and EOS)
        for j, ((p, _), s) in enumerate(zip(chunk, seqs, strict=True)):
            ids[j, width - len(s) :], attn[j, width - len(s) :] = s, 1
            scored[j, width - len(s) + len(p) :] = True
        pos = (attn.cumsum(1) - 1).clamp(min=0)  # the positions generate used
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]  # (n, L-1)
        loss = -(adv[lo : lo + 64, None] * logp * scored[:, 1:]).sum() / n_tokens
        loss.backward()
    model.eval()
    grads = {n: -p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads, float(r.mean())


def group_of(name: str) -> str:
    parts = name.split(".")
    if "self_attn" in parts or "mlp" in parts:
        return parts[-2]  # q_proj, k_proj, ..., gate_proj
    return parts[-2] if parts[-1] == "weight" and len(parts) > 2 else ".".join(parts[-2:])


def _signal_or_noise(a, model, tok, grads, norm, record) -> float:
    """Signal or noise? A second gradient from other prompts and samples: their mean keeps the signal,
    their half-difference is pure sampling noise with the same structure (a sum of per-sequence score
    functions). Records steps along both; returns the cosine of the two gradients."""
    other = split_problems("train", 2 * a.prompts, TASK)[a.prompts :]
    grads2, _ = policy_gradient(model, tok, other, a.group, seed=8)
    norm2 = sum(float(g.pow(2).sum()) for g in grads2.values()) ** 0.5
    cosine = sum(float((grads[n] * grads2[n]).sum()) for n in grads) / (norm * norm2)
    print(f"cosine of two independent {a.prompts}x{a.group} gradients: {cosine:.3f}")
    mean = {n: (grads[n] + grads2[n]) / 2 for n in grads}
    noise = {n: (grads[n] - grads2[n]) / 2 for n in grads}
    for label, d in (("mean of two gradients", mean), ("half-difference (noise)", noise)):
        dn = sum(float(v.pow(2).sum()) for v in d.values()) ** 0.5
        for eta in (0.005, 0.02):
            for sign in (1, -1):
                record(f"{'+' if sign > 0 else '-'}{label}, L2 norm {eta:g}",
                       {n: sign * eta * v / dn for n, v in d.items()})  # fmt: skip
    return cosine


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.sharpness", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--task", default="wordproblems", help="wordproblems or wordproblems-long (%(default)s)")
    p.add_argument("--model", help="a saved word-problem model directory (default: the shipped warm start)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="only the warm start, +-g at L2 0.005 and 0.02, and a "
        "random step (the check the long regime's requirements name; minutes, not an hour)",
    )
    p.add_argument("--prompts", type=int, default=64, help="training prompts for the gradient (default 64)")
    p.add_argument("--group", type=int, default=8, help="completions per training prompt (default 8)")
    p.add_argument("--heldout", type=int, default=128, help="held-out prompts (default 128)")
    p.add_argument("--samples", type=int, default=4, help="completions per held-out prompt (default 4)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="also write the figures to this file")
    a = p.parse_args(argv)
    for name in ("prompts", "group", "heldout", "samples", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} {getattr(a, name)} must be >= 1")
    torch.set_num_threads(a.threads)
    global TASK, BUDGET
    from oar_rl.tasks import get_task

    TASK, BUDGET = a.task, get_task(a.task).max_completion_length
    t0 = time.perf_counter()
    model, tok = _load(a.model)
    model.float().eval()
    train, heldout = split_problems("train", a.prompts, TASK), split_problems("validation", a.heldout, TASK)
    grads, train_reward = policy_gradient(model, tok, train, a.group, seed=7)
    norm = sum(float(g.pow(2).sum()) for g in grads.values()) ** 0.5
    params = dict(model.named_parameters())
    base = {n: q.detach().clone() for n, q in params.items()}
    rand = {
        n: torch.randn(q.shape, generator=torch.Generator().manual_seed(i))
        for i, (n, q) in enumerate(params.items())
    }
    rand_norm = sum(float(r.pow(2).sum()) for r in rand.values()) ** 0.5

    def reward_after(direction: dict[str, torch.Tensor]) -> float:
        with torch.no_grad():
            for n, q in params.items():
                q.copy_(base[n] + direction[n] if n in direction else base[n])
        try:
            return heldout_reward(model, tok, heldout, a.samples, seed=11)
        finally:
            with torch.no_grad():
                for n, q in params.items():
                    q.copy_(base[n])

    rows: list[dict] = []

    def record(label: str, direction: dict[str, torch.Tensor] | None) -> None:
        value = (
            heldout_reward(model, tok, heldout, a.samples, seed=11)
            if direction is None
            else reward_after(direction)
        )
        step = 0.0 if direction is None else sum(float(d.pow(2).sum()) for d in direction.values()) ** 0.5
        rows.append({"step": label, "l2_norm": step, "heldout_reward": value})
        print(f"{label:<44} norm {step:7.4f}   held-out reward {value:.3f}", flush=True)

    print(f"training reward {train_reward:.3f} on {a.prompts}x{a.group}; gradient norm {norm:.4f}")
    shares: dict[str, float] = {}
    for n, g in grads.items():
        shares[group_of(n)] = shares.get(group_of(n), 0.0) + float(g.pow(2).sum()) / norm**2
    print(
        "share of the gradient's squared norm: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]))
    )
    record("warm start", None)
    etas = (0.005, 0.02) if a.quick else (0.005, 0.02, 0.1)
    for eta in etas:
        for sign in (1, -1):
            record(
                f"{'+' if sign > 0 else '-'}g, L2 norm {eta:g}",
                {n: sign * eta * g / norm for n, g in grads.items()},
            )
    for eta in () if a.quick else (3e-5, 1e-4, 5e-4):
        for sign in (1, -1):
            record(
                f"{'+' if sign > 0 else '-'}sign(g), {eta:g} per parameter",
                {n: sign * eta * torch.sign(g) for n, g in grads.items()},
            )
    record("random direction, L2 norm 0.25", {n: 0.25 * r / rand_norm for n, r in rand.items()})
    cosine = None if a.quick else _signal_or_noise(a, model, tok, grads, norm, record)
    for grp in () if a.quick else sorted(shares):
        part = {n: 0.02 * g / norm for n, g in grads.items() if group_of(n) == grp}
        record(f"+g, L2 norm 0.02, {grp} only", part)
    seconds = time.perf_counter() - t0
    print(f"{seconds:.0f} s")
    if a.json:
        record_ = {
            "model": a.model or f"shipped {TASK}",
            "args": vars(a),
            "train_reward": train_reward,
            "gradient_norm": norm,
            "gradient_share": shares,
            "cosine_of_two_gradients": cosine,
            "rows": rows,
            "seconds": seconds,
        }
        write_text_atomic(Path(a.json), json.dumps(record_, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
