"""Sampling completions from a causal LM: seeded, batched, left-padded, the caller's RNG untouched.

`sample_ids` gives (prompt ids, completion ids) pairs, `generate_completions` their texts and `accuracy`
the fraction that pass the embedded tasks' exact `<answer>` checker. Used by the study, the
role statistics and the attribution heatmaps; any `generate`-capable model and tokenizer work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM


def sample_ids(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    prompts: list[str],
    *,
    temperature: float = 1.0,
    max_new_tokens: int = 96,
    batch_size: int = 128,
    seed: int = 0,
    progress: bool = False,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One completion per prompt (greedy when temperature == 0) as (prompt ids (P,), completion ids (T,)).

    Both are unpadded CPU tensors; the completion stops before its first EOS/pad. Sampling is seeded
    through a forked global RNG, so results are reproducible and the caller's RNG state is untouched.
    The model's train/eval mode is restored.
    """
    import torch
    from tqdm.auto import tqdm

    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 means greedy)")
    stop = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    was_training = model.training
    model.eval()
    out: list[tuple[torch.Tensor, torch.Tensor]] = []
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            starts = range(0, len(prompts), batch_size)
            for start in tqdm(starts, desc="generate", disable=not progress, leave=False):
                chunk = prompts[start : start + batch_size]
                enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
                enc = {k: v.to(model.device) for k, v in enc.items()}
                gen = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **(sampling if temperature > 0 else {"do_sample": False}),
                )
                width = enc["input_ids"].shape[1]
                for row in range(len(chunk)):
                    new = gen[row, width:].tolist()
                    cut = next((i for i, t in enumerate(new) if t in stop), len(new))
                    prompt_ids = enc["input_ids"][row][enc["attention_mask"][row].bool()].cpu()
                    out.append((prompt_ids, torch.tensor(new[:cut], dtype=torch.long)))
    finally:
        model.train(was_training)
    return out


def generate_completions(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    prompts: list[str],
    **kwargs,
) -> list[str]:
    """Completion texts for `prompts` (special tokens skipped); keyword arguments as `sample_ids`."""
    return [
        tokenizer.decode(ids, skip_special_tokens=True)
        for _, ids in sample_ids(model, tokenizer, prompts, **kwargs)
    ]


def accuracy(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    prompts: list[str],
    answers: list[str],
    *,
    temperature: float = 1.0,
    samples: int = 1,
    seed: int = 0,
    max_new_tokens: int = 96,
    batch_size: int = 128,
    progress: bool = False,
) -> float:
    """Fraction of (problem, sample) pairs whose completion passes `arithmetic.check` (mean@samples)."""
    from oar_rl.data.arithmetic import check

    if samples < 1:
        raise ValueError(f"samples={samples} must be >= 1")
    if not prompts:
        raise ValueError("accuracy needs at least one prompt")
    reps = [p for p in prompts for _ in range(samples)]
    gold = [a for a in answers for _ in range(samples)]
    comps = generate_completions(
        model,
        tokenizer,
        reps,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
    )
    return sum(check(c, g) for c, g in zip(comps, gold, strict=True)) / len(comps)
