"""Plain `model.generate` time per token of a bench shape, at several lengths (no TRL, no trainer).

Written when `oar-rl gpu-check`'s cost table at 1024 tokens took ~115 s per GRPO step on an H100: this
says whether transformers' own sampling loop is that slow at this shape, or the trainer's path around it.

    python -m experiments.cost.generation_speed --shape qwen2.5-0.5b --rows 8 --lengths 128,512
"""

from __future__ import annotations

import argparse
import time

import torch

from oar_rl.gpu_check.benchlink import qwen2_config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m experiments.cost.generation_speed",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--shape", default="qwen2.5-0.5b")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--lengths", default="128,512")
    a = p.parse_args(argv)
    from transformers import Qwen2ForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg, dtype = qwen2_config(a.shape)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(getattr(torch, dtype)).eval()
    ids = torch.randint(4, cfg.vocab_size, (a.rows, a.prompt_len), device=device)
    mask = torch.ones_like(ids)
    for n in [int(x) for x in a.lengths.split(",")]:
        for cache in (True, False):
            if not cache and n > 128:  # without the cache every step reruns the whole sequence
                continue
            kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=True, top_k=0, top_p=1.0, use_cache=cache)
            model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4, do_sample=True
            )
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, pad_token_id=0, **kw)
            if device == "cuda":
                torch.cuda.synchronize()
            s = time.perf_counter() - t0
            new = out.shape[1] - a.prompt_len
            print(
                f"{a.shape} {device} rows {a.rows} new tokens {new} use_cache={cache}: {s:.2f} s, "
                f"{1000 * s / new:.1f} ms per generation step",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
