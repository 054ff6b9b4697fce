"""The word-problem tasks' data, audited against an independent reading of the text (`reader.py`).

For each regime (`wordproblems-long`, and the short `wordproblems`, which the same reader reads):

1. gold: the generator's answer of the first `n` problems of each split stream (train, validation, and the
   eval stream the task's test split is a prefix of) against the reader's answer to the prompt;
2. reference solutions: every equation's operands, operator and result, every restated running total,
   the answer tag, names, items, pronoun and direction words (`solutions.check_reference`);
3. the SFT teacher's demonstrations (all of the shipped recipe's `num_problems`, drawn as the warm start's
   build draws them): the effective misread rate on trap problems (overall and per trap kind) and slip
   rate per written result, beside the recipe's configured probabilities (`solutions.read_teacher`), and
   the gold of every demonstration's prompt;
4. split overlap, by exact prompt, by story (person, item, start and changes) and by number chain (start
   and signed changes, bags as their product), between the splits at the sizes the studies use
   (`experiments.credit_long.plan` / `credit_screen.plan`: train, validation, test) and the SFT stream;
5. story inconsistencies (another person giving away more than the story says they have), counted.

The generator is called only to produce the data being audited (`split_problems`, `generate`, the task's
`prompts`); its solver's output (`WordProblem.answer`, `.steps`) is what the reader is compared with, never
an input to the reader.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from experiments.wordproblems_audit.reader import TRAP_KINDS, Story, Unreadable
from experiments.wordproblems_audit.solutions import check_reference, read_teacher

TASKS = ("wordproblems-long", "wordproblems")
PLANS = {
    "wordproblems-long": "experiments.credit_long.plan:CREDIT_LONG",
    "wordproblems": "experiments.credit_screen.plan:CREDIT_SCREEN",
}
STREAMS = {"train": "train", "validation": "validation", "test": "eval"}
"""Audit split -> generator stream (the task's test split is the first problems of the eval stream)."""
STRUCTURE_FAILS = {"wordproblems-long": True, "wordproblems": False}
"""Whether a story or number chain shared between splits fails the audit. In the short regime (start
1-25, 2-3 changes of 2-9) they are few enough that independent draws repeat them; its generator keeps
only prompts apart, so there they are counted, not failed."""
N_EXAMPLES = 3


def audit_gold(rows: list[tuple[str, int]], split: str = "") -> dict[str, Any]:
    """(prompt, gold) rows against the reader: disagreements and story issues, with a few examples."""
    out: dict[str, Any] = {"n": len(rows), "disagreements": 0, "unreadable": 0, "inconsistent_stories": 0}
    issues: Counter = Counter()
    examples: list[dict] = []
    inconsistent: list[dict] = []
    for i, (prompt, gold) in enumerate(rows):
        try:
            st = Story(prompt)
        except Unreadable as exc:
            out["unreadable"] += 1
            examples.append({"split": split, "index": i, "prompt": prompt, "gold": gold, "reader": str(exc)})
            continue
        if st.answer != int(gold):
            out["disagreements"] += 1
            if len(examples) < N_EXAMPLES:
                examples.append(
                    {"split": split, "index": i, "prompt": prompt, "gold": gold, "reader": st.answer}
                )
        kinds = {k for k, _ in st.issues}
        issues.update(kinds)
        if "other_gives_more_than_they_have" in kinds:
            out["inconsistent_stories"] += 1
            if len(inconsistent) < 2:
                inconsistent.append(
                    {"split": split, "index": i, "prompt": prompt, "issues": [d for _, d in st.issues]}
                )
    out["story_issues"] = dict(sorted(issues.items()))
    out["examples"] = examples[:N_EXAMPLES]
    out["inconsistency_examples"] = inconsistent
    return out


def audit_references(problems: list, *, restate: bool, neutral: bool, split: str = "") -> dict[str, Any]:
    """Clean reference solutions checked step by step against the reader's story."""
    fails: Counter = Counter()
    out: dict[str, Any] = {"n": len(problems), "bad_solutions": 0, "steps": 0, "restates": 0}
    examples: list[dict] = []
    for i, p in enumerate(problems):
        try:
            bad = check_reference(Story(p.prompt), p.solution, p.answer, restate=restate, neutral=neutral)
        except Unreadable:
            bad = Counter(unreadable=1, steps=0, restates=0)
        out["steps"] += bad.pop("steps")
        out["restates"] += bad.pop("restates")
        if bad:
            out["bad_solutions"] += 1
            fails.update(bad)
            if len(examples) < N_EXAMPLES:
                examples.append({"split": split, "index": i, "failed": sorted(bad), "solution": p.solution})
    out["failed_checks"] = dict(sorted(fails.items()))
    out["examples"] = examples
    return out


def audit_teacher(
    task: str, n: int | None = None, *, restate: bool, train_prompts: list[str] | None = None
) -> dict[str, Any]:
    """The shipped recipe's SFT demonstrations (the first `n`; None: all), read against their prompts;
    `train_prompts` (the train stream's first prompts): the demonstrations' prompts must be those."""
    from oar_rl.data.wordproblems import SPLITS_BY_TASK, generate
    from oar_rl.shipped import TASK_RECIPES

    recipe = TASK_RECIPES[task]
    sft, seed = recipe.sft, SPLITS_BY_TASK[task]["train"][2]
    n = sft.num_problems if n is None else min(n, sft.num_problems)
    demos = generate(recipe.task, n, seed, slip_prob=sft.slip_prob, misread_prob=sft.misread_prob)
    c: Counter = Counter()
    bad_examples: list[dict] = []
    for i, d in enumerate(demos):
        try:
            st = Story(d.prompt)
        except Unreadable:
            c["gold_disagreements"] += 1  # a prompt the reader cannot read: its gold is not confirmed
            continue
        r = read_teacher(st, d.solution, restate=restate)
        traps = [k for k in st.kinds if k in TRAP_KINDS]
        c["problems"] += 1
        c["gold_disagreements"] += st.answer != d.answer
        c["results"] += r["results"]
        c["slips"] += r["slips"]
        c["slip_problems"] += r["slips"] > 0
        c["trap_problems"] += bool(traps)
        c["misread_problems"] += r["misreads"] > 0
        for k in set(traps):
            c[f"trap:{k}"] += 1
            c[f"misread:{k}"] += k in r["misread_kinds"]
        wrong = r["told"] is None or r["told"].strip() != str(st.answer)
        c["answer_wrong"] += wrong
        c["answer_wrong_without_slip_or_misread"] += wrong and not (r["slips"] or r["misreads"])
        if r["bad"]:
            c["bad"] += 1
            if len(bad_examples) < N_EXAMPLES:
                bad_examples.append({"index": i, "bad": r["bad"], "solution": d.solution})
    rate = lambda a, b: round(c[a] / c[b], 4) if c[b] else None  # noqa: E731
    kinds = sorted({k.split(":")[1] for k in c if k.startswith("trap:")})
    same = None
    if train_prompts is not None:
        k = min(len(train_prompts), n)
        same = [d.prompt for d in demos[:k]] == train_prompts[:k]
    return {
        "recipe": recipe.hash(),
        "problems": n,
        "seed": seed,
        "prompts_equal_train_stream": same,
        "configured": {"slip_prob": sft.slip_prob, "misread_prob": sft.misread_prob},
        "counts": dict(sorted(c.items())),
        "misread_rate": rate("misread_problems", "trap_problems"),
        "misread_rate_by_kind": {k: rate(f"misread:{k}", f"trap:{k}") for k in kinds},
        "slip_rate_per_result": rate("slips", "results"),
        "bad_examples": bad_examples,
    }


def study_sizes(task: str) -> dict[str, int]:
    """Split -> problems the studies of `task` use (the credit plan's screen and confirmation settings)."""
    from oar_rl.study.screen import settings
    from oar_rl.study.screen_plan import load_plan

    plan = load_plan(PLANS[task])
    s = [settings(kind, plan) for kind in ("screen", "confirm")]
    sizes = {"train": max(x.n_train_prompts for x in s), "validation": max(x.validation_problems for x in s)}
    for split, k in plan.eval.values():
        sizes[split] = max(sizes.get(split, 0), k)
    return sizes


BY = ("prompt", "story", "chain")


def _keys(prompt: str) -> tuple:
    try:
        st = Story(prompt)
    except Unreadable:  # its own story and chain (counted by the gold check)
        return prompt, ("unreadable", prompt), ("unreadable", prompt)
    return prompt, (st.name, st.item, st.start, tuple(st.events)), st.chain()


def overlap(rows: dict[str, list[tuple[str, int]]], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Named sets of (prompt, gold) rows: distinct prompts/stories/chains per set, and per pair how many
    are shared (`BY`), with the reader's gold disagreements (unreadable prompts included) on every set."""
    keys = {name: [_keys(p) for p, _ in rs] for name, rs in rows.items()}
    sets = {name: [{k[i] for k in ks} for i in range(len(BY))] for name, ks in keys.items()}
    distinct = {name: {"rows": len(keys[name])} for name in rows}
    for name, s in sets.items():
        distinct[name].update({by: len(x) for by, x in zip(BY, s, strict=True)})
    shared = {f"{a} & {b}": {by: len(sets[a][i] & sets[b][i]) for i, by in enumerate(BY)} for a, b in pairs}
    checked = {name: audit_gold(rs, name) for name, rs in rows.items()}
    gold = {name: g["disagreements"] + g["unreadable"] for name, g in checked.items()}
    return {"distinct": distinct, "pairs": shared, "gold_disagreements": gold}


def audit_overlap(task: str, sizes: dict[str, int] | None = None, sft_n: int | None = None) -> dict[str, Any]:
    """Overlap between the task's splits (at `sizes`; None: the studies') and the SFT stream."""
    from oar_rl.data.wordproblems import split_problems
    from oar_rl.shipped import TASK_RECIPES
    from oar_rl.tasks import get_task

    t = get_task(task)
    sizes = sizes or study_sizes(task)
    sft_n = TASK_RECIPES[task].sft.num_problems if sft_n is None else sft_n
    name = {split: f"{split}{k}" for split, k in sizes.items()}
    rows = {name[s]: [(r["prompt"], int(r["answer"])) for r in t.prompts(s, k)] for s, k in sizes.items()}
    sft = f"sft{sft_n}"
    rows[sft] = [(p.prompt, p.answer) for p in split_problems("train", sft_n, task)]
    train, val, test = name["train"], name["validation"], name["test"]
    pairs = [(train, val), (train, test), (val, test), (sft, val), (sft, test)]
    return {"sizes": {**sizes, "sft": sft_n}, **overlap(rows, pairs)}


def run_task(
    task: str,
    n: int,
    *,
    teacher_n: int | None = None,
    overlap_sizes: dict[str, int] | None = None,
    sft_n: int | None = None,
) -> dict[str, Any]:
    """Every check of one regime (`teacher_n`, `overlap_sizes`, `sft_n`: smaller runs for tests)."""
    from oar_rl.data.wordproblems import SPLITS_BY_TASK, split_problems

    cfg = SPLITS_BY_TASK[task]["train"][0]
    flags = {"restate": cfg.restate, "neutral": cfg.neutral_clauses}
    gold, refs, train_prompts = {}, {}, []
    for split, stream in STREAMS.items():
        problems = split_problems(stream, n, task)
        train_prompts = [p.prompt for p in problems] if split == "train" else train_prompts
        gold[split] = audit_gold([(p.prompt, p.answer) for p in problems], split)
        refs[split] = audit_references(problems, split=split, **flags)
    teacher = audit_teacher(task, teacher_n, restate=cfg.restate, train_prompts=train_prompts)
    return {
        "task": task,
        "n": n,
        "streams": STREAMS,
        **flags,
        "gold": gold,
        "references": refs,
        "teacher": teacher,
        "overlap": audit_overlap(task, overlap_sizes, sft_n),
        "structure_overlap_fails": STRUCTURE_FAILS[task],
    }


def failures(result: dict[str, Any]) -> list[str]:
    """What fails the audit: a gold disagreement or unreadable prompt anywhere, a reference solution that
    fails a check, a teacher demonstration that deviates other than by a slip or a misread, a prompt shared
    between splits, a shared story or number chain where `STRUCTURE_FAILS`, demonstrations on other
    prompts."""
    t, out = result["task"], []
    for split, g in result["gold"].items():
        if g["disagreements"] or g["unreadable"]:
            out.append(f"{t} {split}: {g['disagreements']} gold disagreements, {g['unreadable']} unreadable")
    for split, x in result["references"].items():
        if x["bad_solutions"]:
            out.append(f"{t} {split}: {x['bad_solutions']} reference solutions fail a check")
    bad = result["teacher"]["counts"].get("bad", 0)
    if bad:
        out.append(f"{t}: {bad} demonstrations deviate other than by a slip or a misread")
    for name, k in result["overlap"]["gold_disagreements"].items():
        if k:
            out.append(f"{t} {name}: {k} gold disagreements")
    k = result["teacher"]["counts"].get("gold_disagreements")
    if k:
        out.append(f"{t} SFT prompts: {k} gold disagreements")
    if result["teacher"]["prompts_equal_train_stream"] is False:
        out.append(f"{t}: the SFT demonstrations' prompts are not the train stream's")
    for pair, found in result["overlap"]["pairs"].items():
        for by, k in found.items():
            if k and (by == "prompt" or result["structure_overlap_fails"]):
                out.append(f"{t} {pair}: {k} shared by {by}")
    return out
