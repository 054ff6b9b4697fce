"""The paper's Figure 5 (recall of oracle causal tokens) and Figure 4/8 heatmaps on a real model.

    python -m experiments.real_model --model smollm2-135m --n 64 --threads 2 --out results/real-model

SmolLM2-135M-Instruct rarely solves even one-step word problems itself when it samples (1 of 48 at
temperature 0.7, 0 of 64 at 1.0; greedy 7 of 30: `python -m experiments.real_model.solve_rate`), so its
own correct trajectories are too rare to sample. Instead each trajectory is a *correct
reference solution* of a generated two-step word problem (a few phrasings, so solutions carry filler
words as well as the numbers), written in the `\\boxed{}` format and scored *teacher-forced*: the prompt
goes through the model's chat template and the reference is the completion; every scorer (OAR-P and
OAR-G with each probe, GRAIL, entropy, random) sees exactly what it would see for a sampled one.

The oracle for a reference (departures from Eq. 19, which assumes the model produced y). Each reference
is reasoning R followed by the closing phrase " The final answer is \\boxed{" and the answer. For each
position t of R, y_t is replaced by the model's most probable token other than y_t (as in Eq. 19) and
the model greedily continues, *for as many tokens as R has left after t*; the reference's closing phrase
is then appended and the model greedily writes the answer (a *forced read-out*). The same is done from
the intact prefix y_{<=t}. Position t is a causal pivot when the intact read-out is correct and the
substituted one is not: the substitution flips the model's own outcome from that point. Why not plain
greedy continuation (this module's first version, kept for ``--own``): SmolLM2 rarely writes a rewarded
answer format on its own after a teacher-forced prefix (it trails off into "So, Leo has 11 stamps
now."), so every intact continuation but the last few was "wrong" for its format and the only pivots
were the answer-phrase tokens; reading the answer out in the reference's own format makes the outcome
the model's arithmetic, not its formatting. Comparing with the intact read-out, not with the reference's
correctness, keeps positions where the weak model would go wrong anyway from counting as pivots. A
continuation that ends (EOS, or a substituted EOS) is checked as written. A reference counts only when
the model reads out the right answer from the full R (it can finish it); recall is over the tokens of R
(the closing phrase is not scored) and averaged over references with at least one pivot. Labels are
kept in ``OUT/oracle.json`` as they are computed, so a stopped run resumes.

Controls and steps (issue 26): every table carries the `position` control (later reasoning tokens first)
beside `random`, with each signal's paired difference to both, and recall per reasoning step
(`experiments.real_model.report`, `experiments.real_model.steps`), because on the two-step references nearly
every pivot sits in the last step, where position alone finds it. ``--design reuse`` builds references
whose pivots lie in every step (`make_problems`): step 1 computes the asked quantity, step 2 a distractor
(another person's item), step 3 restates step 1's result, which the answer copies.

With ``--own`` the trajectories are the model's *own*: one-step word problems ("has a, buys b more", a
and b from 1 to 9, the prompt asking for ``\\boxed{}``), sampled (``--temperature``, default 1) under the
chat template until ``--n`` are correct by the rewarded answer (the paper's setting, Eq. 19: y is the
model's). The plain greedy-continuation oracle is applied to them (intact continuation correct,
substituted one not, each read as the model writes it), so a position only counts where the model
itself carries the outcome from that point. SmolLM2-135M rarely answers these prompts correctly when it
samples (1 correct of 48 at temperature 0.7, 0 of 64 at 1.0: `experiments.real_model.solve_rate`), so
``--own --n 30`` samples on the order of 1,500 problems.
"""

from __future__ import annotations

import json
import random
import sys
import time
from functools import partial
from pathlib import Path

import torch

from experiments.real_model.report import write_figure
from experiments.real_model.steps import step_index
from oar_rl.analysis.attribute import Trajectory, answer_spans, given_trajectory, load_model
from oar_rl.analysis.heatmap import heatmap_png
from oar_rl.analysis.oracle import alternative_tokens, greedy_generate
from oar_rl.analysis.recall import label_matrix, scores_per_probe
from oar_rl.answer_span import scored_positions
from oar_rl.io import ensure_writable_dir, write_text_atomic
from oar_rl.probes import PROBES

KS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
NAMES = ("Tom", "Ann", "Sam", "Lily", "Ben", "Mia", "Leo", "Zoe")
ITEMS = ("apples", "pens", "cards", "stamps", "books", "shells")
OPENERS = ("First, ", "To start, ", "", "Let's see. ")
LINKERS = ("Then", "After that,", "Next,", "Finally,")
PHRASE = " The final answer is \\boxed{"  # every reference closes with it (`make_problems`)
PAIRS = (  # paired recall differences reported beside the curves (A, B): A − B; and every signal − control
    ("oar-p/as-mean", "oar-g/as-mean"), ("oar-p/as-mean", "entropy"), ("oar-g/as-mean", "entropy"),
    ("oar-g/as-mean", "grail"), ("oar-p/as-joint", "oar-p/as-mean"),
)  # fmt: skip
DESIGNS = ("two-step", "reuse")
"""Reference designs (`make_problems`): 'two-step' (the committed figure) and 'reuse' (three steps, the
answer is step 1's result, restated in step 3; step 2 is a distractor)."""
SIGNALS = ("oar-p", "oar-g", "grail", "entropy", "random")  # in the order of the committed tables


def make_problems(n: int, seed: int = 0, design: str = "two-step") -> list[tuple[str, str, str]]:
    """(prompt, reference solution, gold answer) of a `DESIGNS` design, with filler phrasing.

    'two-step': "has a, buys b, gives away c"; step 2 uses step 1's result, so the answer depends on the
    last step. 'reuse': "has a, buys b" about the asked person, then a second person's own change (step 2,
    a distractor the answer does not depend on), then step 3 restates step 1's result; the answer reads
    step 1's result through its restatement."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {design!r}")
    if design == "reuse":
        return _reuse_problems(n, seed)
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
            f"{s} - {c} = {r}.{PHRASE}{r}}}."
        )
        out.append((prompt, ref, str(r)))
    return out


def _reuse_problems(n: int, seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name, other = rng.sample(NAMES, 2)
        item, item2 = rng.sample(ITEMS, 2)
        a, b, c, d = rng.randint(3, 19), rng.randint(2, 9), rng.randint(3, 19), rng.randint(2, 9)
        s, gain = a + b, rng.random() < 0.5
        e, verb, op = (c + d, "buys", "+") if gain else (c - min(d, c - 1), "gives away", "-")
        d = d if gain else min(d, c - 1)
        prompt = (
            f"{name} has {a} {item} and buys {b} more. {other} has {c} {item2} and {verb} {d}. "
            f"How many {item} does {name} have now?"
        )
        ref = (
            f"{rng.choice(OPENERS)}{name} has {a} + {b} = {s} {item}. {rng.choice(LINKERS[:3])} {other} has "
            f"{c} {op} {d} = {e} {item2}. So {name} has {s} {item}.{PHRASE}{s}}}."
        )
        out.append((prompt, ref, str(s)))
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


def reasoning_end(tok, completion: str, c_ids: torch.Tensor) -> tuple[int, torch.Tensor]:
    """(P, phrase ids) of a reference: P indexes the first token of its closing `PHRASE`, whose ids follow.

    Raises ValueError when the reference does not end in `PHRASE` on token boundaries (never guessed)."""
    cut = completion.rfind(PHRASE)
    if cut < 0:
        raise ValueError(f"reference {completion!r} has no closing {PHRASE!r}")
    lengths = [len(tok.decode(c_ids[:k], skip_special_tokens=True)) for k in range(c_ids.numel() + 1)]
    end = max(k for k, n in enumerate(lengths) if n <= cut)
    phrase = c_ids[end : end + len(tok(PHRASE, add_special_tokens=False)["input_ids"])]
    if tok.decode(phrase, skip_special_tokens=True) != PHRASE:
        raise ValueError(
            f"reference {completion!r}: tokens from {end} decode to {tok.decode(phrase)!r}, not {PHRASE!r}"
        )
    return end, phrase


def readout_rows(
    prefixes: list[torch.Tensor], new: torch.Tensor, budgets: list[int], phrase: torch.Tensor, eos_id: int
) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
    """Each prefix with its greedy continuation `new[i]` cut to `budgets[i]` tokens, then `phrase`.

    Returns (read-out rows, continuations): a row is None where the continuation ended with EOS (that
    completion is over and is checked as written, not read out)."""
    rows: list[torch.Tensor | None] = []
    conts = []
    for prefix, ids, budget in zip(prefixes, new, budgets, strict=True):
        cont = ids[:budget]
        ended = (cont == eos_id).nonzero()
        if len(ended):
            conts.append(cont[: int(ended[0, 0])])
            rows.append(None)
        else:
            conts.append(cont)
            rows.append(torch.cat([prefix, cont, phrase]))
    return rows, conts


def readout_oracle(model, tok, traj: Trajectory, check, batch_size: int = 32) -> tuple[torch.Tensor, bool]:
    """(labels (T,), finishable) for one reference by the forced read-out oracle (module docstring)."""
    p_ids, c_ids = traj.prompt_ids, traj.completion_ids
    end, phrase = reasoning_end(tok, traj.completion, c_ids)
    labels = torch.zeros(c_ids.numel(), dtype=torch.bool)
    if end == 0:
        return labels, True
    alt = alternative_tokens(model, p_ids, c_ids)
    eos = tok.eos_token_id
    intact = [torch.cat([p_ids, c_ids[: t + 1]]) for t in range(end)]
    swapped = [torch.cat([p_ids, c_ids[:t], alt[t : t + 1]]) for t in range(end)]
    prefixes, budgets = intact + swapped, [end - t - 1 for t in range(end)] * 2
    rows, conts = [], []
    for s in range(0, len(prefixes), batch_size):
        chunk, chunk_budgets = prefixes[s : s + batch_size], budgets[s : s + batch_size]
        out, width = greedy_generate(model, tok, chunk, max(1, max(chunk_budgets)))
        r, c = readout_rows(chunk, out[:, width:], chunk_budgets, phrase, eos)
        rows += r
        conts += c
    live = [i for i, r in enumerate(rows) if r is not None]
    answers = dict(zip(live, greedy_texts(model, tok, [rows[i] for i in live], 8, batch_size), strict=True))
    ok = []
    for i, (prefix, cont) in enumerate(zip(prefixes, conts, strict=True)):
        written = tok.decode(torch.cat([prefix[p_ids.numel() :], cont]), skip_special_tokens=True)
        if i >= end and int(alt[i - end]) == eos:  # the substitute ends the completion: no answer
            ok.append(False)
        else:
            ok.append(check(written + PHRASE + answers[i]) if i in answers else check(written))
    for t in range(end):
        labels[t] = ok[t] and not ok[end + t]
    return labels, ok[end - 1]


def continuation_oracle(
    model, tok, traj: Trajectory, reasoning: torch.Tensor, check
) -> tuple[torch.Tensor, bool]:
    """(labels (T,), finishable) for one own trajectory by the greedy-continuation oracle (module doc)."""
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


class OracleCache:
    """Oracle labels already computed for this model, mode and seed, kept in `path` (rewritten atomically
    after each trajectory), so an interrupted run resumes where it stopped. A trajectory is looked up by
    its prompt and completion text; a file written for another model, mode or seed is an error."""

    def __init__(self, path: Path, model: str, own: bool, seed: int, design: str = "two-step") -> None:
        self.path, self.key, self.hits = path, {"model": model, "own": own, "seed": seed}, 0
        if design != "two-step":  # the committed two-step cache keeps its key
            self.key["design"] = design
        self.rows: dict[str, dict] = {}
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("key") != self.key:
                raise SystemExit(
                    f"{path} holds oracle labels for {saved.get('key')}, not {self.key}: "
                    "use another --out or delete it"
                )
            self.rows = saved["rows"]

    @staticmethod
    def _id(t: Trajectory) -> str:
        return json.dumps([t.prompt, t.completion])

    def get(self, t: Trajectory) -> tuple[torch.Tensor, bool] | None:
        row = self.rows.get(self._id(t))
        if row is None:
            return None
        self.hits += 1
        return torch.tensor(row["labels"], dtype=torch.bool), bool(row["finishable"])

    def put(self, t: Trajectory, labels: torch.Tensor, finishable: bool) -> None:
        self.rows[self._id(t)] = {"labels": labels.int().tolist(), "finishable": finishable}
        write_text_atomic(self.path, json.dumps({"key": self.key, "rows": self.rows}) + "\n")


def main(argv: list[str] | None = None) -> int:
    from fractions import Fraction

    from oar_rl.argparsing import add, new_parser
    from oar_rl.rewards.extract import as_number, extract_prediction

    def check(text: str, gold: str) -> bool:  # the rewarded answer, compared as an exact number
        pred, kind = extract_prediction(text)
        return kind is not None and as_number(pred) == Fraction(gold)

    p = new_parser("python -m experiments.real_model", __doc__.split("\n\n")[0])
    add(p, "--model", default="smollm2-135m")
    add(p, "--n", type=int, default=32, help="references to score (before filtering); --own: correct ones")
    add(p, "--own", action="store_true", help="the model's own sampled correct trajectories (see module doc)")
    add(p, "--temperature", type=float, default=1.0, help="--own: sampling temperature")
    add(p, "--max-problems", type=int, default=2000, help="--own: give up after sampling this many problems")
    add(p, "--seed", type=int, default=0)
    add(p, "--design", default="two-step", choices=DESIGNS, help="reference design (make_problems)")
    add(p, "--threads", type=int, default=1, help="torch threads")
    add(p, "--max-traces", type=int, default=3, help="traces (with a pivot) drawn in heatmaps.png")
    add(p, "--out", default="results/real-model")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if a.max_traces < 1:
        p.error(f"--max-traces must be >= 1, got {a.max_traces}")
    t0 = time.perf_counter()
    torch.set_num_threads(a.threads)
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
        problems = make_problems(a.n, a.seed, a.design)
        trajs = [given_trajectory(tok, q, ref, chat=True, answer=gold) for q, ref, gold in problems]
    batch, answer_mask = answer_spans(trajs, tok)
    if not bool(answer_mask.any(dim=1).all()):
        raise SystemExit("a reference solution has no answer span; the generator is broken")
    reasoning = scored_positions(batch[3], answer_mask)  # (B, C): the tokens before each answer span
    cache = OracleCache(out / "oracle.json", a.model, a.own, a.seed, "two-step" if a.own else a.design)
    labels, keep = [], []
    t_oracle = time.perf_counter()
    for i, t in enumerate(trajs):
        done = cache.get(t)
        if done is None:
            check_t = partial(check, gold=t.answer)
            if a.own:
                done = continuation_oracle(model, tok, t, reasoning[i], check_t)
            else:
                done = readout_oracle(model, tok, t, check_t)
            cache.put(t, *done)
        lab, finishable = done
        labels.append(lab)
        keep.append(finishable)
        print(
            f"[real-recall] {i + 1}/{len(trajs)} pivots {int(lab.sum())} finishable {finishable}", flush=True
        )
    oracle_seconds = time.perf_counter() - t_oracle
    kept = [t for t, k in zip(trajs, keep, strict=True) if k]
    labels = [lab for lab, k in zip(labels, keep, strict=True) if k]
    if not kept:
        raise SystemExit(f"the model finishes none of the {len(trajs)} trajectories; nothing to score")
    scores, mask = scores_per_probe(
        model, tok, kept, SIGNALS, PROBES, model_free_probe="as-mean", seed=a.seed
    )
    steps = None
    if not a.own:  # references: recall over the reasoning R only, the tokens the oracle labels
        ends = [reasoning_end(tok, t.completion, t.completion_ids)[0] for t in kept]
        mask = mask & (torch.arange(mask.shape[1])[None] < torch.tensor(ends)[:, None])
        steps = step_index(tok, kept, ends, tuple(mask.shape))
    oracle = label_matrix(labels, mask)
    with_pivot = int((oracle & mask).any(dim=1).sum())
    previous = json.loads((out / "recall.json").read_text()) if (out / "recall.json").exists() else {}
    result = {
        "command": "python -m experiments.real_model " + " ".join(argv or sys.argv[1:]),
        "model": a.model, "trajectories": "own, sampled" if a.own else "references, teacher-forced",
        "design": None if a.own else a.design,
        "sampled": len(sampled) if a.own else None, "references": len(trajs), "finishable": len(kept),
        "with_pivot": with_pivot,
        "reasoning_tokens": int(mask.sum()), "pivots": int((oracle & mask).sum()),
        "pivots_per_step": None if steps is None else {
            str(k): int((oracle & mask & (steps == k)).sum()) for k in range(1, int(steps.max()) + 1)
        },
        "wall_seconds": None, "oracle_seconds": round(oracle_seconds, 1), "threads": a.threads,
        "oracle": "continuation" if a.own else "forced read-out", "oracle_cached": cache.hits,
    }  # fmt: skip
    if cache.hits == len(trajs) and previous.get("oracle_cached", 1) == 0:  # all read back: keep its cost
        result["oracle_computed"] = {
            k: previous.get(k) for k in ("oracle_seconds", "wall_seconds", "threads")
        }
    elif cache.hits == len(trajs) and "oracle_computed" in previous:
        result["oracle_computed"] = previous["oracle_computed"]
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)  # the tables below take seconds
    table = write_figure(out, result, scores, oracle, mask, KS, seed=a.seed, pairs=PAIRS, steps=steps)
    wall = result["wall_seconds"]
    shown = [i for i in range(len(kept)) if oracle[i].any()][: a.max_traces]
    rows = {k: scores[k][shown] for k in ("oar-p/as-mean", "oar-g/as-mean", "grail", "entropy")}
    rows["oracle"] = oracle[shown].float()
    heatmap_png([kept[i] for i in shown], tok, rows, mask[shown], out / "heatmaps.png")
    print(table)
    print(f"[real-recall] {len(kept)} finishable references, {with_pivot} with a pivot; {wall:.0f} s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
