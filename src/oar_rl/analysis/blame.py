"""`oar-rl blame`: does credit blame the first error of a wrong rollout, or the work that carried it?

    oar-rl blame --out results/blame            # or: python -m oar_rl.analysis.blame --out results/blame

OAR scores what the answer reads from (DESIGN §4, "Outcome sensitivity is not blame"). On the
word-problem testbed a wrong rollout has a known culprit: its *first erroneous pivot*
(`oar_rl.data.wordproblem_errors.first_error`: a slipped result, a wrong operand or a wrong operator),
after which correct steps carry the wrong value to the answer. This command samples the shipped warm
start's own rollouts (`--prompts` train problems × `--samples`, T = 1, seeded), keeps the wrong ones whose
first error lies in a step *before* the last written one, and for every credit signal reports:

(i) the mean bi-level weight ω̃ (Eq. 14-17 through `oar_rl.reshape.token_advantages`, the trainer's
    function, with `OARConfig`'s τ, β, threshold and floor) on the first error's tokens and on the last
    result's tokens (the digits of the last equation's result: correct arithmetic on the carried slip),
    with the paired difference error − last;
(ii) the share of rollouts whose first error outweighs their last result (ω̃ strictly larger);
(iii) recall@10% and @20% of the first error's tokens among the reasoning tokens (`causal_recall`);

each with a 95% percentile bootstrap over rollouts, and each signal's paired difference to the two
controls, `random` and `position` (later reasoning tokens first). Written to OUT/blame.json, blame.md
and blame.png.

Signals (`--signals`): the controls, `entropy`, `grail`, and `<mode>/<probe>` for every bi-level credit
mode of `oar_rl.credits.CREDIT_MODES` under every probe (default: oar-g and oar-p). Any mode registered
there with a scorer can be named, so a new rule is measured by adding its name (`signal_scores`).

Departures from the trainer, and why:
- Every signal goes through the same bi-level reshaping over the same tokens, the reasoning tokens (those
  the trainer scores under an answer-span probe, `oar_rl.answer_span.scored_positions`): the question is
  which tokens each *signal* blames, so the reshaping is held fixed. In training, `random` and `entropy`
  reshape differently (Eq. 17 on the raw draws; Eq. 6) and GRAIL has its own weights; those are in a
  second table (`own_reshaping`), with A_i = −1 where the weight depends on the advantage.
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
from dataclasses import fields
from typing import Any

import torch

CONTROLS = ("random", "position")
DEFAULT_SIGNALS = (
    "random", "position", "entropy",
    "oar-g/lt-logits", "oar-g/as-mean", "oar-g/as-joint",
    "oar-p/lt-logits", "oar-p/as-mean", "oar-p/as-joint",
    "grail", "first-error",
)  # fmt: skip
PROBED = ("oar-g", "oar-p", "oar-gp")
"""Modes whose scores depend on the outcome probe: named with one (`oar-g/as-mean`)."""


def trainer_defaults() -> dict[str, Any]:
    """`OARConfig`'s own defaults (τ, oar_beta, threshold, floor, the scorers' options), read off the
    dataclass, so this analysis follows the trainer when they change."""
    from oar_rl.config import OARConfig

    return {f.name: f.default for f in fields(OARConfig) if f.name in _TRAINER_FIELDS}


_TRAINER_FIELDS = (
    "tau", "oar_beta", "threshold", "floor", "noise_std", "oar_noise_draws", "oar_noise_scale",
    "mask_token_id", "perturbation_batch_size", "perturbation_prefix_reuse", "oar_gp_fraction",
    "grail_mu", "grail_sigma", "grail_min", "grail_max", "entropy_alpha", "entropy_kappa", "scored_tokens",
)  # fmt: skip


def check_signal(name: str) -> None:
    """ValueError unless `name` is `position`, a registered credit mode with a scorer, or `<mode>/<probe>`
    of a bi-level mode (required for the probe-dependent `PROBED` modes)."""
    from oar_rl.credits import CREDIT_MODES
    from oar_rl.probes import PROBES

    if name == "position":
        return
    mode, _, probe = name.partition("/")
    valid = [m for m, c in CREDIT_MODES.items() if c.scorer is not None]
    if mode not in valid:
        raise ValueError(f"unknown signal {name!r}; valid: position, {', '.join(valid)} (with /<probe>)")
    if mode in PROBED and probe not in PROBES:
        raise ValueError(
            f"signal {name!r} needs a probe: {mode}/<probe> with probe one of {', '.join(PROBES)}"
        )
    if probe and (CREDIT_MODES[mode].reshape != "bilevel" or probe not in PROBES):
        raise ValueError(f"signal {name!r}: {mode} does not take the probe {probe!r}; name it {mode!r}")


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
    (`OARTrainer._score`, from `OARConfig`'s defaults). `reasoning`: the tokens scored (None: as the
    probe allows); `context`: tokenizer, gold (per row), check and max_new_tokens, for `first-error`.
    A mode registered after this module was written gets `probe` if named with one and, if it draws
    noise, a seeded `generator`."""
    from oar_rl.credits import CREDIT_MODES
    from oar_rl.importance import position_importance
    from oar_rl.probes import prepare_batch

    check_signal(name)
    if name == "position":
        return position_importance(batch[3])
    mode, _, probe = name.partition("/")
    spec = CREDIT_MODES[mode]
    span = answer_mask if (probe and probe != "lt-logits") or mode == "grail" else None
    prepared = prepare_batch(model, *batch, span, None if mode == "entropy" else reasoning)
    gen = torch.Generator().manual_seed(seed)
    d = defaults
    gradient = dict(
        noise_std=d["noise_std"], noise_scale=d["oar_noise_scale"], num_draws=int(d["oar_noise_draws"]),
        generator=gen, batch_size=batch_size,
    )  # fmt: skip
    perturbation = dict(
        mask_token_id=d["mask_token_id"], batch_size=d["perturbation_batch_size"],
        prefix_reuse=d["perturbation_prefix_reuse"],
    )  # fmt: skip
    options: dict[str, dict[str, Any]] = {
        "random": {"generator": gen},
        "entropy": {"batch_size": batch_size, "temperature": 1.0},
        "grail": {"batch_size": batch_size, "temperature": 1.0},
        "oar-g": {"probe": probe, **gradient},
        "oar-p": {"probe": probe, **perturbation},
        "oar-gp": {
            "probe": probe, "fraction": d["oar_gp_fraction"], "gradient_kwargs": gradient,
            "perturbation_kwargs": perturbation,
        },
        "first-error": {  # the rows are wrong rollouts: direction −1 (the trainer's sign of A_i)
            "tokenizer": context["tokenizer"], "gold": context["gold"], "check": context["check"],
            "direction": -torch.ones(batch[0].shape[0]), "max_new_tokens": context["max_new_tokens"],
            "batch_size": batch_size,
        },
    }  # fmt: skip
    kwargs = options.get(mode)
    if kwargs is None:  # a mode registered after this module was written: its probe, and noise if drawn
        kwargs = {"probe": probe} if probe else {}
        if spec.noisy:
            kwargs["generator"] = gen
    return spec.scorer(model, prepared, **kwargs).float().cpu()


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


def own_weights(
    name: str, raw: torch.Tensor, mask: torch.Tensor, scored: torch.Tensor, defaults: dict[str, Any]
) -> torch.Tensor | None:
    """(B, C) weights A_t / A_i of a mode's *own* trainer reshaping with A_i = −1 (a wrong rollout), for
    random (Eq. 17 on the raw draws over the scored tokens, the others 1), entropy (Eq. 6, every token)
    and GRAIL; None otherwise."""
    from oar_rl.reshape import entropy_shaped_advantages, grail_token_advantages, rescale_sum

    adv = -torch.ones(raw.shape[0])
    if name == "random":
        return torch.where(scored, rescale_sum(raw * scored, scored), mask.float())
    if name == "entropy":
        a = entropy_shaped_advantages(
            adv, raw, mask, alpha=defaults["entropy_alpha"], kappa=defaults["entropy_kappa"]
        )
        return a / adv[:, None]
    if name == "grail":
        _, w = grail_token_advantages(
            adv, raw, mask, scored, rollouts="wrong", mu=defaults["grail_mu"], sigma=defaults["grail_sigma"],
            w_min=defaults["grail_min"], w_max=defaults["grail_max"],
        )  # fmt: skip
        return w
    return None


def sample_rollouts(model, tok, problems, samples: int, *, seed: int, max_new_tokens: int):
    """`samples` completions of each problem at T = 1 (problem-major, so rows i·samples… are one group)."""
    from oar_rl.analysis.attribute import sample_trajectories

    prompts = [p.prompt for p in problems for _ in range(samples)]
    answers = [str(p.answer) for p in problems for _ in range(samples)]
    return sample_trajectories(
        model, tok, prompts, answers, max_new_tokens=max_new_tokens, seed=seed, temperature=1.0
    )


def locate(trajs, problems, samples: int, tok, check) -> tuple[list[dict[str, Any]], Counter]:
    """The wrong rollouts whose first error precedes their last step, each with the token columns of the
    error and of the last result; and the count of every rollout by outcome (what was left out and why)."""
    from oar_rl.answer_span import _token_spans
    from oar_rl.data.wordproblem_errors import first_error

    counts: Counter = Counter()
    rows = []
    decoded = _token_spans(tok, [t.completion_ids.tolist() for t in trajs])
    for i, (t, (text, spans)) in enumerate(zip(trajs, decoded, strict=True)):
        if check(t.completion, t.answer):
            counts["correct"] += 1
            continue
        p = problems[i // samples]
        err = first_error(text, p.steps, p.answer)
        if err.status != "error":
            counts[f"wrong, {err.status.replace('_', ' ')}"] += 1
            continue
        if not err.before_last_step:
            counts["wrong, first error in the last step"] += 1
            continue
        counts["wrong, first error before the last step"] += 1

        def cols(char_spans, spans=spans):
            return [k for k, (lo, hi) in enumerate(spans) if any(hi > a and lo < b for a, b in char_spans)]

        rows.append({"index": i, "error": cols(err.spans), "last": cols([err.last_result]), "kind": err.kind,
                     "step": err.step, "steps": err.steps_written})  # fmt: skip
    return rows, counts


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
        raw = signal_scores(name, model, batch, answer_mask, reasoning, seed=seed, defaults=defaults,
                            context=context)  # fmt: skip
        norm = normalize_importance(raw, scored)
        per_row[name] = row_metrics(bilevel(raw, valid, scored, defaults), norm, err, last, scored)
        w_own = own_weights(name, raw, valid, scored, defaults)
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


def build_parser():
    """The `oar-rl blame` parser (the shared vocabulary of `oar_rl.options`)."""
    from oar_rl.argparsing import add, new_parser
    from oar_rl.options import shared_parser

    out = {"default": "blame_out", "help": "directory for blame.json, blame.md, blame.png"}
    parents = [shared_parser("seed", "threads", "out", out=out)]
    p = new_parser("oar-rl blame", __doc__.split("\n\n")[0], parents=parents)
    add(p, "--prompts", type=int, default=64, help="word problems sampled (the first of the split)")
    add(p, "--samples", type=int, default=8, help="completions per problem, at T = 1")
    add(p, "--split", default="train", choices=("train", "validation", "eval"), help="problems' split")
    add(p, "--signals", default=",".join(DEFAULT_SIGNALS), help="comma-separated signals (module doc)")
    return p


def main(argv: list[str] | None = None) -> int:
    import json

    from oar_rl.analysis.blame_report import bar_chart, markdown
    from oar_rl.data.wordproblems import split_problems
    from oar_rl.io import ensure_writable_dir, write_text_atomic
    from oar_rl.machine import machine_info, machine_line
    from oar_rl.options import apply_threads
    from oar_rl.tasks import get_task

    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    try:
        signals = [s.strip() for s in a.signals.split(",") if s.strip()]
        for s in signals:
            check_signal(s)
        if len(set(signals)) != len(signals) or not signals:
            raise ValueError(f"--signals: give each signal once, got {a.signals!r}")
        if a.prompts < 1 or a.samples < 1:
            raise ValueError(f"--prompts and --samples must be >= 1, got {a.prompts} and {a.samples}")
        out = ensure_writable_dir(a.out)
    except ValueError as exc:
        print(f"oar-rl blame: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    apply_threads(a.threads)
    task = get_task("wordproblems")
    ws = task.load_warm_start("default", None)
    problems = split_problems(a.split, a.prompts)
    trajs = sample_rollouts(ws.model, ws.tokenizer, problems, a.samples, seed=a.seed,
                            max_new_tokens=task.max_completion_length)  # fmt: skip
    rows, counts = locate(trajs, problems, a.samples, ws.tokenizer, task.check)
    print(f"[blame] {len(trajs)} rollouts: " + "; ".join(f"{k} {v}" for k, v in counts.items()))
    if not rows:
        print("oar-rl blame: no wrong rollout with its first error before the last step", file=sys.stderr)
        return 1
    result: dict[str, Any] = {
        "command": "oar-rl blame " + " ".join(argv),
        "settings": {**vars(a), "signals": signals},
        "recipe": ws.recipe_hash,
        "rollouts": len(trajs),
        "counts": dict(counts),
        "rows": len(rows),
        "kinds": dict(Counter(r["kind"] for r in rows)),  # of the rows measured
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
