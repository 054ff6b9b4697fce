"""The paper's Figure 5 (recall of oracle causal tokens) and Figure 4/8 heatmaps on a real model.

    python -m oar_rl.analysis.real_recall --model smollm2-135m --n 32 --out results/real-model

SmolLM2-135M-Instruct solves almost none of these problems itself (0 of 30 one-step word problems,
greedy), so its own correct trajectories are too rare to sample. Instead each trajectory is a *correct
reference solution* of a generated two-step word problem (a few phrasings, so solutions carry filler
words as well as the numbers), written in the `\\boxed{}` format and scored *teacher-forced*: the prompt
goes through the model's chat template and the reference is the completion; every scorer (OAR-P and
OAR-G with each probe, GRAIL, entropy, random) sees exactly what it would see for a sampled one.

The oracle for a reference (departure from Eq. 19, which assumes the model produced y): for each
reasoning position t, y_t is replaced by the model's most probable token other than y_t, and the model
greedily continues; so does it from the intact prefix y_{<=t}. Position t is a causal pivot when the
intact continuation is correct and the substituted one is not: the substitution flips the model's own
outcome from that point. Comparing with the model's intact continuation, not with the reference's
correctness, keeps positions where the weak model would go wrong anyway from counting as pivots. A
reference counts only when the model's greedy continuation from its full reasoning is correct (the
model can finish it), and recall is averaged over references with at least one pivot.

With ``--own`` the trajectories are the model's *own*: one-step word problems ("has a, buys b more", a
and b from 1 to 9, the prompt asking for ``\\boxed{}``), sampled (``--temperature``, default 1) under the
chat template until ``--n`` are correct by the rewarded answer (the paper's setting, Eq. 19: y is the
model's). The same oracle is applied to them (intact greedy continuation correct, substituted one not),
so a position only counts where the model itself carries the outcome from that point. SmolLM2-135M
rarely writes the boxed answer these prompts ask for (1 correct of 48 at temperature 0.7, 0 of 64 at 1.0),
so ``--own --n 30`` samples on the order of 1,500 problems.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import torch

from oar_rl.analysis.attribute import Trajectory, answer_spans, given_trajectory, load_model
from oar_rl.analysis.oracle import alternative_tokens, greedy_generate
from oar_rl.analysis.recall import (
    _plot,
    band_json,
    curve_json,
    label_matrix,
    recall_bands,
    recall_curves,
    scores_per_probe,
)
from oar_rl.answer_span import scored_positions
from oar_rl.io import ensure_writable_dir, savefig_atomic, write_text_atomic
from oar_rl.probes import PROBES

KS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
NAMES = ("Tom", "Ann", "Sam", "Lily", "Ben", "Mia", "Leo", "Zoe")
ITEMS = ("apples", "pens", "cards", "stamps", "books", "shells")
OPENERS = ("First, ", "To start, ", "", "Let's see. ")
LINKERS = ("Then", "After that,", "Next,", "Finally,")
SIGNALS = ("oar-p", "oar-g", "grail", "entropy", "random")  # in the order of the committed tables


def make_problems(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(prompt, reference solution, gold answer): "has a, buys b, gives away c" with filler phrasing."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        a, b = rng.randint(3, 19), rng.randint(2, 9)
        c = rng.randint(1, a + b - 1)
        s, r = a + b, a + b - c
        prompt = (
            f"{name} has {a} {item}. {name} buys {b} more and then gives away {c}. "
            f"How many {item} does {name} have now?"
        )
        ref = (
            f"{rng.choice(OPENERS)}{name} has {a} + {b} = {s} {item}. {rng.choice(LINKERS)} "
            f"{s} - {c} = {r}. The final answer is \\boxed{{{r}}}."
        )
        out.append((prompt, ref, str(r)))
    return out


def make_own_problems(n: int, seed: int = 0) -> dict[str, list[str]]:
    """`n` one-step problems for --own, as a dataset-like dict of "prompt" and "answer" lists."""
    rng = random.Random(seed)
    prompts, answers = [], []
    for _ in range(n):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        prompts.append(
            f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have now? "
            "Put the final answer in \\boxed{}."
        )
        answers.append(str(a + b))
    return {"prompt": prompts, "answer": answers}


def greedy_texts(model, tok, prefixes: list[torch.Tensor], budget: int, batch_size: int = 32) -> list[str]:
    """Greedy continuations of unpadded id prefixes (left-padded batches of `batch_size`), stopped once the
    boxed answer is closed (all the check needs); the new text of each."""
    texts: list[str] = []
    for start in range(0, len(prefixes), batch_size):
        out, width = greedy_generate(
            model, tok, prefixes[start : start + batch_size], budget, stop_strings=["}"]
        )
        texts += tok.batch_decode(out[:, width:], skip_special_tokens=True)
    return texts


def reference_oracle(
    model, tok, traj: Trajectory, reasoning: torch.Tensor, check
) -> tuple[torch.Tensor, bool]:
    """(labels (T,), finishable) for one reference: see the module docstring."""
    p_ids, c_ids = traj.prompt_ids, traj.completion_ids
    positions = reasoning[: c_ids.numel()].nonzero().flatten().tolist()
    labels = torch.zeros(c_ids.numel(), dtype=torch.bool)
    if not positions:  # the answer span opens the completion: nothing before it to flip
        return labels, True
    alt = alternative_tokens(model, p_ids, c_ids)
    intact = [torch.cat([p_ids, c_ids[: t + 1]]) for t in positions]
    swapped = [torch.cat([p_ids, c_ids[:t], alt[t : t + 1]]) for t in positions]
    budget = c_ids.numel() - positions[0] + 4
    outs = greedy_texts(model, tok, intact + swapped, budget)
    n = len(positions)
    ok_intact = []
    for i, t in enumerate(positions):
        kept = tok.decode(c_ids[: t + 1], skip_special_tokens=True) + outs[i]
        cut = tok.decode(c_ids[:t], skip_special_tokens=True) + tok.decode(alt[t : t + 1]) + outs[n + i]
        good = check(kept)
        ok_intact.append(good)
        labels[t] = good and not check(cut)
    return labels, ok_intact[-1]


def heatmap_png(trajs, tok, rows: dict[str, torch.Tensor], mask: torch.Tensor, path: Path) -> None:
    """Figure 4/8 style: per trace, one row of coloured tokens per method (and the oracle)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(trajs), 1, figsize=(13, 1.0 + 0.42 * len(rows) * len(trajs)))
    for ax, (i, t) in zip(list(axes) if len(trajs) > 1 else [axes], enumerate(trajs), strict=True):
        n = int(mask[i].sum())
        pieces = [tok.decode([int(x)]).replace("\n", "⏎").replace("$", r"\$") for x in t.completion_ids[:n]]
        grid = torch.stack([r[i, :n].float() for r in rows.values()]).numpy()
        ax.imshow(grid, aspect="auto", cmap="Reds", vmin=0, vmax=1)
        ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
        ax.set_xticks(range(n), pieces, fontsize=6, rotation=90)
        ax.set_title(t.prompt, fontsize=7, loc="left")
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from fractions import Fraction

    from oar_rl.argparsing import add, new_parser
    from oar_rl.rewards.extract import as_number, extract_prediction

    def check(text: str, gold: str) -> bool:  # the rewarded answer, compared as an exact number
        pred, kind = extract_prediction(text)
        return kind is not None and as_number(pred) == Fraction(gold)

    p = new_parser("python -m oar_rl.analysis.real_recall", __doc__.split("\n\n")[0])
    add(p, "--model", default="smollm2-135m")
    add(p, "--n", type=int, default=32, help="references to score (before filtering); --own: correct ones")
    add(p, "--own", action="store_true", help="the model's own sampled correct trajectories (see module doc)")
    add(p, "--temperature", type=float, default=1.0, help="--own: sampling temperature")
    add(p, "--max-problems", type=int, default=2000, help="--own: give up after sampling this many problems")
    add(p, "--seed", type=int, default=0)
    add(p, "--out", default="results/real-model")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    out = ensure_writable_dir(a.out)
    model, tok = load_model(a.model)
    if a.own:
        from oar_rl.analysis.recall import sample_correct

        sampled, trajs = sample_correct(
            model, tok, make_own_problems(a.max_problems, a.seed), a.n, max_new_tokens=96, seed=a.seed,
            chat=True, check=check, temperature=a.temperature,
        )  # fmt: skip
        print(f"[real-recall] own trajectories: {len(trajs)} correct of {len(sampled)} sampled", flush=True)
        if not trajs:
            raise SystemExit(f"no correct trajectory in {len(sampled)} samples; nothing to score")
    else:
        problems = make_problems(a.n, a.seed)
        trajs = [given_trajectory(tok, q, ref, chat=True, answer=gold) for q, ref, gold in problems]
    batch, answer_mask = answer_spans(trajs, tok)
    if not bool(answer_mask.any(dim=1).all()):
        raise SystemExit("a reference solution has no answer span; the generator is broken")
    reasoning = scored_positions(batch[3], answer_mask)  # (B, C): the tokens before each answer span
    labels, keep = [], []
    for i, t in enumerate(trajs):
        lab, finishable = reference_oracle(model, tok, t, reasoning[i], lambda s, g=t.answer: check(s, g))
        labels.append(lab)
        keep.append(finishable)
        print(
            f"[real-recall] {i + 1}/{len(trajs)} pivots {int(lab.sum())} finishable {finishable}", flush=True
        )
    kept = [t for t, k in zip(trajs, keep, strict=True) if k]
    labels = [lab for lab, k in zip(labels, keep, strict=True) if k]
    scores, mask = scores_per_probe(
        model, tok, kept, SIGNALS, PROBES, model_free_probe="as-mean", seed=a.seed
    )
    oracle = label_matrix(labels, mask)
    recalls = recall_curves(scores, oracle, mask, KS)
    bands = recall_bands(scores, oracle, mask, KS, seed=a.seed)
    with_pivot = int((oracle & mask).any(dim=1).sum())
    wall = time.perf_counter() - t0
    result = {
        "command": "python -m oar_rl.analysis.real_recall " + " ".join(argv or sys.argv[1:]),
        "model": a.model, "trajectories": "own, sampled" if a.own else "references, teacher-forced",
        "sampled": len(sampled) if a.own else None, "references": len(trajs), "finishable": len(kept),
        "with_pivot": with_pivot,
        "reasoning_tokens": int(mask.sum()), "pivots": int((oracle & mask).sum()),
        "wall_seconds": round(wall, 1), "threads": 1,
        "recall": {k: curve_json(c) for k, c in recalls.items()},
        "recall_ci95": {k: band_json(b) for k, b in bands.items()},
    }  # fmt: skip
    write_text_atomic(out / "recall.json", json.dumps(result, indent=2) + "\n")
    lines = ["| signal | top 10% | top 20% | top 30% | top 50% |", "|---|---|---|---|---|"]
    for k, c in recalls.items():
        cells = [f"{c[x]:.2f} ({bands[k][x][0]:.2f}–{bands[k][x][1]:.2f})" for x in (0.1, 0.2, 0.3, 0.5)]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    write_text_atomic(out / "recall.md", "\n".join(lines) + "\n")
    main_curves = ("oar-p/lt-logits", "oar-p/as-mean", "oar-g/lt-logits", "oar-g/as-mean", "grail", "entropy")
    for tag, keys in (("recall.png", (*main_curves, "random")), ("recall_all_probes.png", tuple(recalls))):
        _plot({k: recalls[k] for k in keys}, out / tag, {k: bands[k] for k in keys}, n=len(kept),
              with_pivot=with_pivot)  # fmt: skip
    shown = [i for i in range(len(kept)) if oracle[i].any()][:3]
    rows = {k: scores[k][shown] for k in ("oar-p/as-mean", "oar-g/as-mean", "grail", "entropy")}
    rows["oracle"] = oracle[shown].float()
    heatmap_png([kept[i] for i in shown], tok, rows, mask[shown], out / "heatmaps.png")
    print("\n".join(lines))
    print(f"[real-recall] {len(kept)} finishable references, {with_pivot} with a pivot; {wall:.0f} s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
