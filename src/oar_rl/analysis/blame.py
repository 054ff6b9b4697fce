"""`oar-rl blame`: does credit blame the first error of a wrong rollout, or the work that carried it?

    oar-rl blame --out results/blame            # or: python -m oar_rl.analysis.blame --out results/blame
    oar-rl blame --task wordproblems-long --out results/blame-long     # the long-chain regime

OAR scores what the answer reads from (DESIGN §4, "Outcome sensitivity is not blame"). On the
word-problem testbed a wrong rollout has a known culprit: its *first erroneous pivot*
(`oar_rl.data.wordproblem_errors.first_error`: a slipped result, a wrong operand or a wrong operator),
after which correct steps carry the wrong value to the answer. This command samples the shipped warm
start's own rollouts (`--problems` train problems × `--samples`, T = 1, seeded), keeps the wrong ones whose
first error lies in a step *before* the last written one, and for every credit signal reports:

(i) the mean bi-level weight ω̃ (Eq. 14-17 through `oar_rl.reshape.token_advantages`, the trainer's
    function, with `OARConfig`'s τ, β, threshold and floor) on the first error's tokens and on the last
    result's tokens (the digits of the last equation's result: correct arithmetic on the carried slip),
    with the paired difference error − last;
(ii) the share of rollouts whose first error outweighs their last result (ω̃ strictly larger);
(iii) recall@10% and @20% of the first error's tokens among the reasoning tokens (`causal_recall`);

each with a 95% percentile bootstrap over rollouts, and each signal's paired difference to the two
controls, `random` and `position` (later reasoning tokens first); and the first errors of every wrong
rollout by kind (slip, operand, operator, ...). Written to OUT/blame.json, blame.md and blame.png.

`--task` picks the regime: `wordproblems` (the default), `wordproblems-long` (6-8 events, trap events,
the running total restated after each change), or the pretrained regime `wordproblems-smollm2`
(SmolLM2-135M-Instruct's warm start asked `wordproblems`' problems in its chat template, `Task.render`).
The task gives the warm start, the problems' splits, the completion budget (`Task.max_completion_length`)
and the answer check; in the long regime a restated total is part of its step and a wrong one is a `restate`
error (`first_error(..., restate=True)`). The last result stays the last *equation's* result in both.

Signals (`--credits`): the controls, `entropy`, `grail`, and `<mode>/<probe>` for every credit mode of
`oar_rl.credits.CREDIT_MODES` that reads the outcome probe (default: oar-g and oar-p), under every probe.
Any rule registered there with a scorer can be named, also one from the user's own file
(`--credit-module PATH_OR_MODULE`) and one registered with `standalone=False` (which `compute_importance`,
so `attribute`, `oracle` and the recall analysis, do not score: this command builds the trainer's context
itself, gold answers and answer check included), so a new rule is measured by adding its name
(`signal_scores`: the rule's own options, from `OARConfig`'s defaults with the rule's registered `config`
over them, as `OARConfig` applies it in training). `position` is the registered rule of that name (the
token's index, `oar_rl.importance.baselines.position_scores`). The own-reshaping table follows each rule's
registered `reshape` (`own_weights`), not its name: 'uniform' (random's), 'entropy', 'grail', 'weights'
(the scores are the weights), 'none' (GRPO's uniform weights, or for a rule that sets
`top_entropy_quantile`, e.g. `entropy-80-20`, TRL's binary mask of the top entropies, taken over the
reasoning tokens of the rollouts measured), and 'bilevel' with the rule's own τ, β, threshold or floor
where its `config` sets them.

Departures from the trainer, and why:
- Every signal goes through the same bi-level reshaping over the same tokens, the reasoning tokens (those
  the trainer scores under an answer-span probe, `oar_rl.answer_span.scored_positions`): the question is
  which tokens each *signal* blames, so the reshaping is held fixed (`OARConfig`'s defaults, also for a
  rule whose `config` sets τ or β). In training, `random` and `entropy` reshape differently (Eq. 17 on
  the raw draws; Eq. 6), GRAIL has its own weights, and a rule's `config` may set its own τ or β; those
  are in a second table (`own_reshaping`), with A_i = −1 where the weight depends on the advantage.
- Every wrong rollout counts, also those of groups where all eight are wrong (their GRPO advantage is 0,
  so the trainer would not reshape them): the weights are what the signal would do to them.
- OAR-G draws one noise sample per rollout from one seeded generator (the trainer keys one per row).
- The bootstrap resamples rollouts; rollouts of one prompt are not independent, so the intervals are
  somewhat narrow.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import torch

CONTROLS = ("random", "position")
DEFAULT_SIGNALS = (
    "random", "position", "entropy",
    "oar-g/lt-logits", "oar-g/as-mean", "oar-g/as-joint",
    "oar-p/lt-logits", "oar-p/as-mean", "oar-p/as-joint",
    "grail", "first-error",
)  # fmt: skip


def trainer_defaults() -> dict[str, Any]:
    """`OARConfig`'s own defaults (τ, oar_beta, threshold, floor, the scorers' options, every other field
    with a plain default), read off the dataclass, so this analysis follows the trainer when they change."""
    from oar_rl.config import oar_defaults

    return oar_defaults()


def signal_names() -> str:
    """`--credits`' valid values: each registered rule with a scorer, `<rule>/<probe>` where it reads one."""
    from oar_rl.credits import CREDIT_MODES
    from oar_rl.probes import PROBES

    names = [f"{m}/<probe>" if c.probe else m for m, c in CREDIT_MODES.items() if c.scorer is not None]
    return f"{', '.join(names)}; <probe> one of {', '.join(PROBES)}"


def check_signal(name: str) -> None:
    """ValueError unless `name` is a registered credit mode with a scorer, or `<mode>/<probe>` of a mode
    that reads the probe (required for those)."""
    from oar_rl.credit_names import registered, unknown_message
    from oar_rl.credits import CREDIT_MODES
    from oar_rl.probes import PROBES

    mode, _, probe = name.partition("/")
    if registered(mode) == "none":
        raise ValueError(
            f"signal {name!r}: plain GRPO scores no token (every token keeps weight 1), so it blames nothing "
            f"to measure; valid signals: {signal_names()}"
        )
    valid = [m for m, c in CREDIT_MODES.items() if c.scorer is not None]
    if mode not in valid:
        raise ValueError(
            unknown_message("signal", mode, valid) + " (with /<probe> where the rule reads one; a rule "
            "from your own file needs --credit-module)"
        )
    if CREDIT_MODES[mode].probe and probe not in PROBES:
        raise ValueError(
            f"signal {name!r} needs a probe: {mode}/<probe> with probe one of {', '.join(PROBES)}"
        )
    if probe and (not CREDIT_MODES[mode].probe or probe not in PROBES):
        raise ValueError(f"signal {name!r}: {mode} does not take the probe {probe!r}; name it {mode!r}")
    from oar_rl.config import rule_config

    rule_config(mode)  # a config key that is no OARConfig field: named now, not after the rollouts


def signal_scores(
    name: str,
    model,
    batch: tuple[torch.Tensor, ...],
    answer_mask: torch.Tensor,
    reasoning: torch.Tensor | None,
    *,
    seed: int,
    defaults: dict[str, Any],
    context: dict[str, Any],
    batch_size: int = 64,
) -> torch.Tensor:
    """Raw (B, C) scores of one signal on a TRL-layout batch, with the options the trainer passes
    (`OARTrainer._score`: the rule's `options` over `OARConfig`'s defaults), checked as in training.
    `reasoning`: the tokens scored (None: as the probe allows); `context`: tokenizer, gold (per row),
    check and max_new_tokens (every rule gets them: `ScoringContext`'s outcome fields). Rules that draw
    noise get one generator seeded with `seed`."""
    from oar_rl.credits import CREDIT_MODES, ScoringContext, run_scorer
    from oar_rl.probes import prepare_batch

    check_signal(name)
    mode, _, probe = name.partition("/")
    spec = CREDIT_MODES[mode]
    span = answer_mask if (probe and probe != "lt-logits") or spec.reshape == "grail" else None
    prepared = prepare_batch(model, *batch, span, None if spec.reshape == "entropy" else reasoning)
    ctx = ScoringContext(  # the trainer's context; the rows are wrong rollouts: A_i = −1
        settings=defaults, probe=probe or "lt-logits", generator=torch.Generator().manual_seed(seed),
        batch_size=batch_size, temperature=1.0, tokenizer=context["tokenizer"], gold=context["gold"],
        check=context["check"], advantages=-torch.ones(batch[0].shape[0]),
        max_new_tokens=context["max_new_tokens"],
    )  # fmt: skip
    return run_scorer(spec, model, prepared, ctx).float().cpu()


def bilevel(
    raw: torch.Tensor, mask: torch.Tensor, scored: torch.Tensor, defaults: dict[str, Any]
) -> torch.Tensor:
    """(B, C) ω̃ of the trainer's bi-level path (`token_advantages` with A_i = 1, so A_t = ω̃_t)."""
    from oar_rl.reshape import token_advantages

    _, weights = token_advantages(
        torch.ones(raw.shape[0]), raw, mask, scored_mask=scored, tau=defaults["tau"],
        beta=defaults["oar_beta"], threshold=defaults["threshold"], floor=defaults["floor"],
    )  # fmt: skip
    return weights


def rule_defaults(name: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """`defaults` with the `OARConfig` fields the signal's rule sets (its registered `config`, e.g.
    ``{"tau": 0.7}``), as `OARConfig.__post_init__` applies them in training."""
    from oar_rl.config import rule_config

    return {**defaults, **rule_config(name.partition("/")[0])}  # an unknown field: ValueError, named


BILEVEL_FIELDS = ("tau", "oar_beta", "threshold", "floor")
"""The `OARConfig` fields of the bi-level path (Eq. 14-17) that `bilevel` reads."""


def own_weights(
    name: str, raw: torch.Tensor, mask: torch.Tensor, scored: torch.Tensor, defaults: dict[str, Any]
) -> torch.Tensor | None:
    """(B, C) weights A_t / A_i of the signal's rule's *own* trainer reshaping (its registered
    `reshape`) with A_i = −1 (a wrong rollout), `defaults` holding the rule's `config`
    (:func:`rule_defaults`): 'uniform' (Eq. 17 on the raw scores over the scored tokens, the others 1;
    e.g. random), 'entropy' (Eq. 6, every token), 'grail', 'weights' (the scores over the scored tokens,
    the others 1), 'none' (GRPO: 1 on every valid token; a rule that sets TRL's `top_entropy_quantile`,
    e.g. entropy-80-20: 1 on the top tokens by score over the scored tokens of the batch, 0 elsewhere),
    and 'bilevel' where the rule's `config` changes τ, β, the threshold or the floor. None for 'bilevel'
    otherwise (the shared bi-level table is the rule's own reshaping) and for an unregistered name."""
    from oar_rl.credits import CREDIT_MODES
    from oar_rl.reshape import (
        entropy_shaped_advantages,
        grail_token_advantages,
        rescale_sum,
        top_quantile_mask,
    )

    adv = -torch.ones(raw.shape[0])
    spec = CREDIT_MODES.get(name.partition("/")[0])
    if spec is None:
        return None
    if spec.reshape == "weights":  # the scores are the weights (others keep 1)
        return torch.where(scored, raw, mask.float())
    if spec.reshape == "none":
        if "top_entropy_quantile" in spec.config:  # TRL's binary entropy mask
            return top_quantile_mask(raw, scored, float(spec.config["top_entropy_quantile"])).float()
        return mask.float()  # GRPO's advantage on every token
    if spec.reshape == "uniform":
        return torch.where(scored, rescale_sum(raw * scored, scored), mask.float())
    if spec.reshape == "entropy":
        a = entropy_shaped_advantages(
            adv, raw, mask, alpha=defaults["entropy_alpha"], kappa=defaults["entropy_kappa"]
        )
        return a / adv[:, None]
    if spec.reshape == "grail":
        _, w = grail_token_advantages(
            adv, raw, mask, scored, rollouts="wrong", mu=defaults["grail_mu"], sigma=defaults["grail_sigma"],
            w_min=defaults["grail_min"], w_max=defaults["grail_max"],
        )  # fmt: skip
        return w
    if any(k in spec.config for k in BILEVEL_FIELDS):  # its own τ, β, threshold or floor
        return bilevel(raw, mask, scored, defaults)
    return None


def sample_rollouts(model, tok, problems, samples: int, *, seed: int, max_new_tokens: int, render=None):
    """`samples` completions of each problem at T = 1 (problem-major, so rows i·samples… are one group);
    `render` turns a problem's text into the model's prompt (`Task.render`; None: the text itself)."""
    from oar_rl.analysis.attribute import sample_trajectories

    prompts = [render(p.prompt) if render else p.prompt for p in problems for _ in range(samples)]
    answers = [str(p.answer) for p in problems for _ in range(samples)]
    return sample_trajectories(
        model, tok, prompts, answers, max_new_tokens=max_new_tokens, seed=seed, temperature=1.0
    )


def locate(
    trajs, problems, samples: int, tok, check, *, restate: bool = False
) -> tuple[list[dict[str, Any]], Counter, Counter]:
    """The wrong rollouts whose first error precedes their last step, each with the token columns of the
    error and of the last result; the count of every rollout by outcome (what was left out and why); and
    the kind of every wrong rollout's located first error (before or in the last step). `restate`: the
    regime restates running totals (`first_error`)."""
    from oar_rl.answer_span import token_spans
    from oar_rl.data.wordproblem_errors import first_error

    counts: Counter = Counter()
    kinds: Counter = Counter()
    rows = []
    decoded = token_spans(tok, [t.completion_ids.tolist() for t in trajs])
    for i, (t, (text, spans)) in enumerate(zip(trajs, decoded, strict=True)):
        if check(t.completion, t.answer):
            counts["correct"] += 1
            continue
        p = problems[i // samples]
        err = first_error(text, p.steps, p.answer, restate=restate)
        if err.status != "error":
            counts[f"wrong, {err.status.replace('_', ' ')}"] += 1
            continue
        kinds[err.kind] += 1
        if not err.before_last_step:
            counts["wrong, first error in the last step"] += 1
            continue
        counts["wrong, first error before the last step"] += 1

        def cols(char_spans, spans=spans):
            return [k for k, (lo, hi) in enumerate(spans) if any(hi > a and lo < b for a, b in char_spans)]

        rows.append({"index": i, "error": cols(err.spans), "last": cols([err.last_result]), "kind": err.kind,
                     "step": err.step, "steps": err.steps_written})  # fmt: skip
    return rows, counts, kinds


def batch_of(trajs, tok, answer_pattern: str | None, scored_tokens: str):
    """(TRL-layout batch, (B, C) answer span, (B, C) reasoning tokens given to the scorers or None,
    (B, C) scored tokens) of `trajs`, by the trainer's rule for `OARConfig.scored_tokens`: 'reasoning',
    the tokens before the answer's introducing format (`answer_masks`, the trainer's function);
    'before-answer', every token before the answer span (`scored_positions`)."""
    from oar_rl.analysis.attribute import batch_layout
    from oar_rl.answer_span import answer_masks, scored_positions

    batch = batch_layout(trajs, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    answer_mask, reasoning = answer_masks(batch[2], batch[3], tok, pattern=answer_pattern)
    valid = batch[3].bool()
    if scored_tokens == "reasoning":
        return batch, answer_mask, reasoning & valid, reasoning & valid
    return batch, answer_mask, None, scored_positions(batch[3], answer_mask) & valid


def measure(model, tok, trajs, rows, signals, *, seed: int, task) -> dict[str, Any]:
    """Every signal's summary, paired differences to the controls and own-reshaping summary on `rows`."""
    from oar_rl.analysis.blame_report import paired, row_metrics, summarize, token_masks
    from oar_rl.reshape import normalize_importance

    defaults = trainer_defaults()
    kept = [trajs[r["index"]] for r in rows]
    batch, answer_mask, reasoning, scored = batch_of(
        kept, tok, task.answer_pattern, defaults["scored_tokens"]
    )
    context = {"tokenizer": tok, "gold": [t.answer for t in kept], "check": task.check,
               "max_new_tokens": task.max_completion_length}  # fmt: skip
    err, last = token_masks(rows, tuple(scored.shape))
    if not bool((err <= scored).all() and (last <= scored).all()):
        raise AssertionError("a first-error or last-result token lies outside the scored reasoning tokens")
    valid = batch[3].bool()
    per_row, own = {}, {}
    for name in signals:
        t0 = time.perf_counter()
        own_defaults = rule_defaults(name, defaults)  # the rule's `config` over OARConfig's defaults
        raw = signal_scores(name, model, batch, answer_mask, reasoning, seed=seed, defaults=own_defaults,
                            context=context)  # fmt: skip
        norm = normalize_importance(raw, scored)
        per_row[name] = row_metrics(bilevel(raw, valid, scored, defaults), norm, err, last, scored)
        w_own = own_weights(name, raw, valid, scored, own_defaults)
        if w_own is not None:
            own[name] = summarize(row_metrics(w_own, None, err, last, scored), seed=seed)
        print(f"[blame] {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    return {
        "signals": {n: summarize(m, seed=seed) for n, m in per_row.items()},
        "paired": {
            f"{n} − {c}": paired(per_row[n], per_row[c], seed=seed)
            for n in signals
            if n not in CONTROLS
            for c in CONTROLS
            if c in per_row
        },
        "own_reshaping": own,
        "defaults": {k: defaults[k] for k in ("tau", "oar_beta", "threshold", "floor", "scored_tokens")},
    }


def blame_tasks() -> tuple[str, ...]:
    """The registered tasks whose problems come from the word-problem generator (their first errors can
    be located): `wordproblems`, `wordproblems-long` and the pretrained regime `wordproblems-smollm2`."""
    from oar_rl.data.wordproblems import SPLITS_BY_TASK
    from oar_rl.tasks import get_task, task_names

    return tuple(n for n in task_names() if (get_task(n).data_task or n) in SPLITS_BY_TASK)


def build_parser():
    """The `oar-rl blame` parser (the shared vocabulary of `oar_rl.options`)."""
    from oar_rl.argparsing import add, add_renaming, new_parser
    from oar_rl.credit_modules import add_flag
    from oar_rl.options import shared_parser

    out = {"default": "blame_out", "help": "directory for blame.json, blame.md, blame.png"}
    parents = [shared_parser("seed", "threads", "cache-dir", "out", out=out)]
    p = new_parser("oar-rl blame", __doc__.split("\n\n")[0], parents=parents)
    add_flag(p)
    what = "the word-problem regime: its warm start, splits, completion budget and answer check"
    add(p, "--task", default="wordproblems", choices=blame_tasks(), help=what)
    add_renaming(p, "--problems", "--prompts", dest="prompts", type=int, default=64,
                 help="word problems sampled (the first of the split)")  # fmt: skip
    add(p, "--samples", type=int, default=8, help="completions per problem, at T = 1")
    add(p, "--split", default="train", choices=("train", "validation", "test", "eval"),
        help="problems' split: test is the held-out split (eval, its name in the generator)")  # fmt: skip
    what = f"credit rules, comma-separated, from: {signal_names()}; and the rules of --credit-module (not "
    add_renaming(p, "--credits", "--signals", dest="signals", default=",".join(DEFAULT_SIGNALS),
                 help=what + "grpo: plain GRPO scores no token)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    import json

    from oar_rl.analysis.blame_report import bar_chart, markdown
    from oar_rl.credit_modules import load_credit_modules
    from oar_rl.data.wordproblems import SPLITS_BY_TASK, split_problems
    from oar_rl.io import ensure_writable_dir, write_text_atomic
    from oar_rl.machine import machine_info, machine_line
    from oar_rl.options import apply_threads, data_split
    from oar_rl.tasks import get_task

    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    try:
        modules = load_credit_modules(a.credit_module)  # before the signals are checked
        signals = [s.strip() for s in a.signals.split(",") if s.strip()]
        for s in signals:
            check_signal(s)
        if len(set(signals)) != len(signals) or not signals:
            raise ValueError(f"--credits: give each rule once, got {a.signals!r}")
        if a.prompts < 1 or a.samples < 1:
            raise ValueError(f"--problems and --samples must be >= 1, got {a.prompts} and {a.samples}")
        a.split = data_split(a.split)
        out = ensure_writable_dir(a.out)
    except ValueError as exc:
        print(f"oar-rl blame: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    apply_threads(a.threads)
    task = get_task(a.task)
    ws = task.load_warm_start("default", a.cache_dir)
    data = task.data_task or task.name  # the generator whose problems the task asks
    problems = split_problems(a.split, a.prompts, data)
    trajs = sample_rollouts(ws.model, ws.tokenizer, problems, a.samples, seed=a.seed,
                            max_new_tokens=task.max_completion_length, render=task.render)  # fmt: skip
    restate = SPLITS_BY_TASK[data][a.split][0].restate
    rows, counts, kinds = locate(trajs, problems, a.samples, ws.tokenizer, task.check, restate=restate)
    print(f"[blame] {len(trajs)} rollouts: " + "; ".join(f"{k} {v}" for k, v in counts.items()))
    if not rows:
        print("oar-rl blame: no wrong rollout with its first error before the last step", file=sys.stderr)
        return 1
    result: dict[str, Any] = {
        "command": "oar-rl blame " + " ".join(argv),
        "settings": {**vars(a), "signals": signals},
        "credit_modules": [m.record() for m in modules],
        "recipe": ws.recipe_hash,
        "rollouts": len(trajs),
        "counts": dict(counts),
        "rows": len(rows),
        "kinds": dict(Counter(r["kind"] for r in rows)),  # of the rows measured
        "error_kinds": dict(kinds),  # of every wrong rollout with a located first error
    }
    result.update(measure(ws.model, ws.tokenizer, trajs, rows, signals, seed=a.seed, task=task))
    result["settings"].update(result.pop("defaults"))
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    result["machine_info"] = machine_info()
    result["machine"] = machine_line(result["machine_info"])
    write_text_atomic(out / "blame.json", json.dumps(result, indent=2) + "\n")
    write_text_atomic(out / "blame.md", markdown(result))
    bar_chart(result, out / "blame.png")
    print(markdown(result))
    print(f"[blame] wrote {out}/blame.json, blame.md, blame.png in {result['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
