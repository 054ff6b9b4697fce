"""Why the step-1 loss differs between CPUs when nothing else does (issue 49).

With one optimizer step per generation batch the policy ratio is exactly 1 at the first step, so GRPO's
logged loss (TRL's `dapo` aggregation) is -sum_i A_i * len_i / N: a float32 sum over the (B, T) masked
token grid of the row advantages, independent of the model's outputs. This trains step 1 of the long
regime's confirmation GRPO seed 300 with a hook that keeps the advantages, the mask and N, and reports
the exact value (float64), the float32 sum as TRL computes it, and the float32 sums of the same numbers
with the rows in `--perms` random orders: whether the committed (Intel Xeon) loss is one of them.

    python -m experiments.cpu_numerics.loss_order --json results/fingerprints/loss-order.amd-epyc.json
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any

from oar_rl.io import write_text_atomic
from oar_rl.machine import machine_info

COMMITTED = "results/credit-long/confirm/runs/grpo.seed300.json"


def capture_step1() -> dict[str, Any]:
    """Step 1's advantages (B,), completion mask (B, T) and token count N, in TRL's (shuffled) row order."""
    import torch
    from trl import GRPOTrainer

    from experiments.credit_long.plan import CREDIT_LONG
    from oar_rl.study.fingerprint import fingerprint

    original = GRPOTrainer._compute_loss
    cap: dict[str, Any] = {}

    def hooked(self, model, inputs):
        if not cap:
            cap.update(adv=inputs["advantages"].detach().clone(), mask=inputs["completion_mask"].clone(),
                       n=inputs["num_items_in_batch"].clone())  # fmt: skip
        return original(self, model, inputs)

    GRPOTrainer._compute_loss = hooked
    try:
        torch.set_num_threads(1)
        fp = fingerprint(CREDIT_LONG, "grpo", 300, 1, "confirm")
    finally:
        GRPOTrainer._compute_loss = original
    return {**cap, "logged": fp["steps"][0]["loss"]}


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.cpu_numerics.loss_order", description=__doc__
    )
    p.add_argument("--perms", type=int, default=1000, help="random row orders to sum in (default 1000)")
    p.add_argument("--json", default=None, help="write the record here (atomically)")
    a = p.parse_args(argv)
    cap = capture_step1()
    adv, mask, n = cap["adv"], cap["mask"], cap["n"]

    def loss(order: torch.Tensor) -> float:  # TRL's arithmetic: -(adv * mask).sum() / N in float32
        return float(-(adv[order, None] * mask[order]).sum() / n)

    exact = float(-(adv.double()[:, None] * mask.double()).sum() / n.double())
    ulp = 2.0**-30  # float32 spacing at 0.0146
    committed = json.loads(Path(COMMITTED).read_text())["history"][0]["loss"]
    g = torch.Generator().manual_seed(0)
    seen = collections.Counter(loss(torch.randperm(len(adv), generator=g)) for _ in range(a.perms))
    rec = {
        "rows": len(adv), "tokens": int(n), "width": int(mask.shape[1]),
        "exact_float64": exact,
        "logged_here": cap["logged"],
        "float32_in_trl_order": loss(torch.arange(len(adv))),
        "committed": committed,
        "committed_machine": json.loads(Path(COMMITTED).read_text())["machine"]["cpu"],
        "ulps_from_exact": {"here": (cap["logged"] - exact) / ulp, "committed": (committed - exact) / ulp},
        "perms": a.perms,
        "distinct_values_over_perms": len(seen),
        "perms_giving_the_committed_value": seen.get(committed, 0),
        "perms_giving_the_value_here": seen.get(cap["logged"], 0),
        "most_common": [[v, c] for v, c in seen.most_common(8)],
        "machine": machine_info(),
    }  # fmt: skip
    print(json.dumps({k: v for k, v in rec.items() if k not in ("machine", "most_common")}, indent=1))
    if a.json:
        write_text_atomic(a.json, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
