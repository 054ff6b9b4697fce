"""What a study will run and about how long it takes, said before anything starts.

`oar-rl study` prints `plan_lines` first, then asks `refusal` whether to start: a plan estimated under
`START_AT_ONCE_SECONDS` (30 CPU-minutes) starts at once; the full protocol itself (hours of CPU) starts
with `--full`; any other larger plan with `--yes`. `--dry-run` prints the plan only.

The estimate is `estimate_seconds`: per run, (optimizer steps x prompts x completions) x the method's
seconds per trained completion, plus the sampled evaluation completions x `EVAL_SECONDS_PER_SAMPLE`,
plus `RUN_OVERHEAD_SECONDS`. The figures come from the full word-problem study,
results/study-wordproblems-v2/study.json (60 runs of 30 steps x 16 x 8 completions, 160-token
completions, on a 2-core CPU at one torch thread, beside other jobs): `train_seconds` per run, less its
accuracy-curve evaluations, over its 3,840 completions, and `eval_seconds` over the 2,500 completions of
the final evaluation. That study took 15,106 s of runs (this estimate: 14,900 s) and 8,559 s of
learning-rate sweep (estimate 5,700 s: the sweep shared the machine with more jobs). Another machine, task
or completion length changes the figures; read them as the order of magnitude.
"""

from __future__ import annotations

from pathlib import Path

from oar_rl.study.config import StudySettings

TRAIN_SECONDS_PER_COMPLETION: dict[str, float] = {
    "grpo": 0.023,
    "random": 0.025,
    "entropy": 0.023,
    "oar-g": 0.027,
    "oar-p": 0.117,
    "grail": 0.031,
    "oar-gp": 0.071,
}
"""Seconds per trained completion (generation, rewards, credit, update), by method."""
EVAL_SECONDS_PER_SAMPLE = 0.017
"""Seconds per sampled evaluation completion (final accuracy, curve, sweep validation)."""
RUN_OVERHEAD_SECONDS = 5.0
"""Per run: copying the warm start, building the trainer."""
RECALL_SECONDS_PER_TRAJECTORY = 1.0
"""The recall analysis (oracle and scorers), per correct trajectory (38 s for 40)."""
START_AT_ONCE_SECONDS = 30 * 60
"""A plan estimated under this (one CPU core) starts without a confirming flag."""


def train_seconds(method: str) -> float:
    """`method`'s seconds per trained completion; a method without a figure gets the costliest one."""
    return TRAIN_SECONDS_PER_COMPLETION.get(method, max(TRAIN_SECONDS_PER_COMPLETION.values()))


def task_cost(task: str) -> tuple[float, float, int] | None:
    """The task's own measured cost (`Task.cost_per_completion`), or None: the testbed's figures here."""
    from oar_rl.tasks import get_task

    try:
        return get_task(task).cost_per_completion
    except ValueError:  # an unknown task is refused elsewhere, with the valid names
        return None


def run_seconds(s: StudySettings, method: str, *, sweep: bool = False) -> float:
    """Estimated seconds of one run of `method` (`sweep`: a learning-rate sweep run, no curve). A task with
    its own measured cost scales it: its GRPO figure times the method's ratio to GRPO here."""
    own = task_cost(s.task)
    per_train = train_seconds(method) * (own[0] / train_seconds("grpo") if own else 1.0)
    train = s.steps * s.prompts_per_step * s.num_generations * per_train
    if sweep:
        samples = s.validation_problems * (s.eval_samples + 1)  # sampled + greedy
    else:
        problems, per = s.n_curve
        curve = problems * per * (s.steps // s.eval_every)
        samples = s.test_problems * (s.eval_samples + 1) + curve
    return train + samples * (own[1] if own else EVAL_SECONDS_PER_SAMPLE) + RUN_OVERHEAD_SECONDS


def estimate_seconds(s: StudySettings, *, tune_lr: bool = False) -> dict[str, float]:
    """{"runs", "sweep", "warm start", "recall", "total"}: estimated seconds of each part."""
    runs = sum(run_seconds(s, v.method) for v, _ in s.runs())
    sweep = sum(run_seconds(s, m, sweep=True) for m in s.method_list) * len(s.lr_grid) * s.tune_seeds
    problems, per = s.n_curve
    own = task_cost(s.task)
    warm = (s.test_problems * (s.eval_samples + 1) + problems * per) * (
        own[1] if own else EVAL_SECONDS_PER_SAMPLE
    )
    parts = {
        "runs": runs,
        "sweep": sweep if tune_lr else 0.0,
        "warm start": warm,
        "recall": s.recall_trajectories * RECALL_SECONDS_PER_TRAJECTORY,
    }
    return {**parts, "total": sum(parts.values())}


def duration(seconds: float) -> str:
    """'4.1 h' from 1.5 h up, else '35 min'."""
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def plan_lines(
    s: StudySettings, *, preset: str, out: Path, tune_lr: bool = False, lr: float | None = None
) -> list[str]:
    """The study's plan, one block: scope, protocol, learning rate and the estimated time."""
    from collections import Counter

    runs = s.runs()
    per_method = Counter(v.method for v, _ in runs)
    seeds = f"{s.seeds}" + "".join(f", {m} {n}" for m, n in s.method_seeds if m in s.method_list)
    est = estimate_seconds(s, tune_lr=tune_lr)
    stored = sum((out / "runs" / _filename(v.name, seed)).exists() for v, seed in runs)
    if tune_lr:
        n_sweep = len(s.method_list) * len(s.lr_grid) * s.tune_seeds
        grid = ",".join(f"{x:g}" for x in s.lr_grid)
        lr_line = f"swept first (--tune-lr): {n_sweep} runs, every method at {grid}"
    elif lr is not None:
        lr_line = f"{lr:g} (--lr, untuned)"
    else:
        lr_line = "an earlier --tune-lr sweep in --out if there is one, else the task's default"
    each = ", ".join(f"{m} {n} x ~{duration(run_seconds(s, m))}" for m, n in per_method.items())
    own = task_cost(s.task)
    threads = f"{own[2]} torch threads" if own else "one torch thread"
    source = f"{s.task}'s measured figures" if own else "figures of a 2-core CPU"
    from oar_rl.study.config import PRESETS

    kind = "the full protocol" if s == PRESETS["full"] else f"{preset} preset"
    kind += ", customised" if preset in ("full", "pretrained") and s != PRESETS[preset] else ""
    lines = [
        f"oar-rl study: plan ({kind}, task {s.task}, output {out})",
        f"  methods        {', '.join(s.method_list)}"
        + (f" + ablations {','.join(s.ablations)}" if s.ablations else ""),
        f"  seeds          {seeds}",
        f"  runs           {len(runs)}: {each}",
        f"  each run       {s.steps} optimizer steps of {s.prompts_per_step} prompts x {s.num_generations} "
        f"completions; final accuracy on {s.test_problems} test problems x {s.eval_samples} samples",
        f"  probe          {s.probe or 'the task default (as-mean)'}; scored tokens: {s.scored_tokens}",
        f"  learning rate  {lr_line}",
        f"  estimated time about {duration(est['total'])} at {threads}"
        + (f" (the sweep {duration(est['sweep'])})" if tune_lr else "")
        + f" (oar_rl.study.plan: {source})",
    ]
    unmeasured = [m for m in per_method if m not in TRAIN_SECONDS_PER_COMPLETION]
    if unmeasured:
        lines.append(f"  no measured cost for {', '.join(unmeasured)}: estimated at the costliest method's")
    if stored:
        lines.append(
            f"  already stored {stored} of {len(runs)} runs in {out / 'runs'} (reused, not retrained)"
        )
    return lines


def refusal(
    s: StudySettings, *, preset: str, tune_lr: bool, full: bool, yes: bool, command: str
) -> str | None:
    """Why the study does not start yet (None: start). `command`: the arguments given, for the retry line.

    --quick and the hidden test preset start at once; so does any plan estimated under
    `START_AT_ONCE_SECONDS`. Above it, the full protocol (the `full` preset unchanged) starts with --full
    (or --yes), any other plan with --yes; the message gives the estimate and says "full protocol" only
    for the full protocol."""
    from oar_rl.study.config import PRESETS

    if preset in ("quick", "tiny") or full or yes:
        return None
    total = estimate_seconds(s, tune_lr=tune_lr)["total"]
    if total < START_AT_ONCE_SECONDS:
        return None
    given = command + " " if command else ""
    own = task_cost(s.task)
    threads = f"{own[2]} torch threads" if own else "one CPU core"
    about = f"about {duration(total)} of {threads} (oar_rl.study.plan's estimate)"
    if s == PRESETS["full"]:
        return (
            f"not started: this is the full protocol (the plan above), {about}. Add --full to start it: "
            f"`oar-rl study {given}--full`; or --quick for the small version `make demo` runs, or --dry-run "
            "to print the plan only"
        )
    return (
        f"not started: the plan above is estimated at {about}, more than the "
        f"{START_AT_ONCE_SECONDS // 60} min a study starts without asking. Add --yes to start it: "
        f"`oar-rl study {given}--yes`; or make it smaller (--credits, --seeds, --steps), or --dry-run to "
        "print the plan only"
    )


def _filename(name: str, seed: int) -> str:
    from oar_rl.study.runner import RunStore

    return RunStore.filename(name, seed)
