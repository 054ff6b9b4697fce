"""Cost of the importance scorers relative to one plain forward pass.

Times OAR-P (perturbation; with prefix reuse, the default, and with whole copies), OAR-G (gradient),
entropy and random importance on one fixed batch of a
tiny random Qwen2 and reports wall time and peak resident-memory growth, each as a ratio to a plain
``model(input_ids, attention_mask)`` forward (full logits, what TRL's log-prob pass costs).

    python -m experiments.cost.importance_cost                       # B=8, C=128, P=32, hidden 128, V=32k
    python -m experiments.cost.importance_cost --json out/cost.json  # also write the figures

Peak memory is the growth of the process's resident set (Linux VmHWM, reset through
/proc/self/clear_refs before each measurement); elsewhere it is reported as n/a. Times are the
median of --repeats runs after one warm-up run. For the cost per token of whole training steps, at
realistic shapes and with the modes interleaved, use ``oar-rl bench`` (docs/results/cost.md).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm

from oar_rl.importance import (
    entropy_importance,
    gradient_importance,
    perturbation_importance,
    random_importance,
)
from oar_rl.io import write_text_atomic
from oar_rl.tiny import tiny_qwen2

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def _mib(key: str) -> float | None:
    if not _STATUS.exists():
        return None
    m = re.search(rf"{key}:\s+(\d+)", _STATUS.read_text())
    return int(m.group(1)) / 1024 if m else None


def _release_free_memory() -> None:
    """Give freed heap back to the OS (glibc), so the next RSS growth is the callee's own."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _peak_growth(fn: Callable[[], object]) -> float | None:
    """MiB the resident set grew to above its level at the start of fn (None where unmeasurable)."""
    _release_free_memory()
    try:
        _CLEAR.write_text("5")
    except OSError:
        fn()
        return None
    before = _mib("VmRSS")
    fn()
    after = _mib("VmHWM")
    return None if before is None or after is None else after - before


def measure(fn: Callable[[], object], repeats: int) -> tuple[float, float | None]:
    """(median seconds, peak MiB growth) of fn after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), _peak_growth(fn)


def _write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(payload, indent=2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m experiments.cost.importance_cost",
        description=__doc__.split("\n\n")[0],
    )
    ap.add_argument("--batch", type=int, default=8, help="sequences B")
    ap.add_argument("--prompt-len", type=int, default=32, help="prompt tokens P (rows left-padded by 0..P/4)")
    ap.add_argument("--completion-len", type=int, default=128, help="completion tokens C (right-padded)")
    ap.add_argument("--hidden", type=int, default=128, help="hidden size of the tiny Qwen2")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers")
    ap.add_argument("--vocab", type=int, default=32_000, help="vocabulary size V")
    ap.add_argument("--copies", type=int, default=64, help="OAR-P perturbed copies per forward")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per scorer (median reported)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    B, P, C, V = args.batch, args.prompt_len, args.completion_len, args.vocab
    device = torch.device(args.device)
    heads = max(1, args.hidden // 32)
    model = tiny_qwen2(
        V, seed=0, hidden_size=args.hidden, num_layers=args.layers, num_heads=heads, num_kv_heads=1
    )
    model.to(device)
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(4, V, (B, P), generator=g)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    completion_ids = torch.randint(4, V, (B, C), generator=g)
    completion_mask = torch.ones(B, C, dtype=torch.long)
    for b in range(B):  # ragged rows as in TRL: left-padded prompts, right-padded completions
        pad_p = (b * P // 4) // max(B - 1, 1)
        prompt_mask[b, :pad_p] = 0
        prompt_ids[b, :pad_p] = 0
        keep = C - (b * C // 2) // max(B - 1, 1)
        completion_mask[b, keep:] = 0
        completion_ids[b, keep:] = 0
    batch = [t.to(device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask)]
    ids = torch.cat([batch[0], batch[2]], 1)
    attn = torch.cat([batch[1], batch[3]], 1)

    def plain_forward():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=attn).logits

    def body_forward():
        with torch.no_grad():
            return model.model(input_ids=ids, attention_mask=attn).last_hidden_state

    cases: dict[str, Callable[[], object]] = {
        "forward (full logits)": plain_forward,
        "forward (no LM head)": body_forward,
        "OAR-P (lt-logits)": lambda: perturbation_importance(model, *batch, batch_size=args.copies),
        "OAR-P (whole copies)": lambda: perturbation_importance(
            model, *batch, batch_size=args.copies, prefix_reuse=False
        ),
        "OAR-G (lt-logits)": lambda: gradient_importance(
            model, *batch, generator=torch.Generator().manual_seed(0)
        ),
        "entropy": lambda: entropy_importance(model, *batch),
        "random": lambda: random_importance(batch[3], generator=torch.Generator().manual_seed(0)),
    }
    results = {}
    for name, fn in tqdm(cases.items(), desc="scorers", unit="scorer", file=sys.stderr):
        seconds, peak = measure(fn, args.repeats)
        results[name] = {"seconds": seconds, "peak_mib": peak}

    base = results["forward (full logits)"]
    n_tokens = int(completion_mask.sum())
    full_copy_logits = n_tokens * (P + C) * V * 4 / 2**20
    print(
        f"batch: B={B} P={P} C={C} ({n_tokens} valid completion tokens), tiny Qwen2 hidden={args.hidden} "
        f"layers={args.layers} V={V}, device={device}, threads={torch.get_num_threads()}, "
        f"OAR-P copies/forward={args.copies}"
    )
    print(f"(full logits for every perturbed copy would take {full_copy_logits:,.0f} MiB)")
    print(f"{'scorer':<24}{'time s':>10}{'x fwd':>9}{'peak MiB':>11}{'x fwd':>9}")
    for name, r in results.items():
        t_ratio = r["seconds"] / base["seconds"]
        if r["peak_mib"] is None or base["peak_mib"] in (None, 0):
            mem = f"{'n/a':>11}{'n/a':>9}"
        else:
            mem = f"{r['peak_mib']:>11.1f}{r['peak_mib'] / base['peak_mib']:>9.2f}"
        print(f"{name:<24}{r['seconds']:>10.4f}{t_ratio:>9.2f}{mem}")
    if args.json:
        _write_json(args.json, {"config": {k: str(v) for k, v in vars(args).items()}, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
