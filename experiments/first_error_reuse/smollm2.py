"""Does the greedy-run reuse hold on a real model? SmolLM2-135M-Instruct (Llama architecture, float32, CPU).

    oar-rl fetch-model smollm2-135m
    python -m experiments.first_error_reuse.smollm2       # its output: results/first-error-reuse/smollm2.txt

Six addition questions in the chat template × 4 rollouts at T = 1 (≤ 64 new tokens, torch seed 0), every
row searched with and without the reuse under two checks: the gold sum appears in the text, and a hash of
the text (not monotone along the rollout). Prints the cost of each, any warning (a continuation that
contradicts the teacher-forced pass warns), and whether the located tokens are identical.
"""

from __future__ import annotations

import argparse
import random
import time
import warnings
import zlib

S, MAX_NEW = 4, 64


def contains_gold(text: str, gold: str) -> bool:
    return gold in text


def hashed(text: str, gold: str) -> bool:
    return zlib.crc32(text.encode()) % 3 != 0


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m experiments.first_error_reuse.smollm2",
        description=__doc__.split("\n")[0],
    )


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from oar_rl.fetch import resolve_model
    from oar_rl.importance import first_error as fe
    from oar_rl.probes import prepare_batch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    path = resolve_model("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rng = random.Random(0)
    qs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(6)]
    question = "What is {} + {}? Think step by step, then give the number."
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": question.format(a, b)}], tokenize=False, add_generation_prompt=True
        )
        for a, b in qs
    ]
    gold = [str(a + b) for a, b in qs]
    rows = [p for p in prompts for _ in range(S)]
    enc = tok(rows, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=1.0, max_new_tokens=MAX_NEW,
                             pad_token_id=tok.pad_token_id)  # fmt: skip
    P = enc.input_ids.shape[1]
    comp = out[:, P:]
    mask = torch.ones_like(comp)
    for i in range(comp.shape[0]):  # valid up to and with the first EOS
        hits = (comp[i] == tok.eos_token_id).nonzero()
        if len(hits):
            mask[i, hits[0, 0] + 1 :] = 0
    batch = prepare_batch(model, enc.input_ids, enc.attention_mask, comp, mask)
    golds = [gold[i // S] for i in range(comp.shape[0])]
    for name, check in [("contains-gold", contains_gold), ("hash", hashed)]:
        res = {}
        for reuse in (True, False):
            stats = fe.SearchStats()
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                res[reuse] = fe.first_error_positions(
                    model, batch, tokenizer=tok, gold=golds, check=check, rows=list(range(comp.shape[0])),
                    max_new_tokens=MAX_NEW, batch_size=24, stats=stats, reuse_greedy=reuse,
                )  # fmt: skip
            print(name, "reuse" if reuse else "plain", round(time.perf_counter() - t0, 1), "s", stats,
                  "warnings", [str(w.message)[:150] for w in caught])  # fmt: skip
        located = sum(v is not None for v in res[False].values())
        print(name, "identical", res[True] == res[False], "located", located)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
