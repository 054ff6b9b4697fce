"""`python -m experiments.credit_why ACTION [--out results/credit-why] ...` (issue 48; plan.py):

- `warm-start`: the warm start's accuracy on the exact evaluation samples of the grid (validation, 300 × 4
  at T = 1, and greedy) and of the confirmation (test, 500 × 4, and greedy), with per-problem counts,
  and on the learning curves' sample (150 × 2: step 0 of every run's curve) (`warm_start.json`);
- `run`, `report`: the rate grid, by the screen engine (`oar_rl.study.screen`), resumable, two processes;
- `rates`: the pre-registered choice of the rates and the compute multiplier (`rates.json`, `rates.md`);
- `confirm`: the confirmation's arms at the chosen rates on the fresh test seeds, resumable, Amendment 3's
  arms included (`--dry-run`: list every run, done or to do, with the settings it trains under, and the
  settings each run file records; trains nothing);
- `amend3`: Amendment 3's settings derived from the confirmation's run files (`amend3.{json,md}`);
- `shared-cpu`: records which landed confirmation runs shared the CPU with other work (`shared_cpu.py`);
- `answers`: the pre-registered decisions (`answers.{json,md}`) and their figure (`answers.png`), once every
  run is in.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from experiments.credit_why import amend3, answers, figure, rates, shared_cpu
from experiments.credit_why.plan import RATES, _lr, confirm_plan
from oar_rl.io import write_text_atomic
from oar_rl.study.config import protocol_hash
from oar_rl.study.provenance import effective_protocol, run_settings
from oar_rl.study.runner import RunStore
from oar_rl.study.screen import load_runs, protocol, settings, train_arms, write_report
from oar_rl.study.screen import main as screen_main
from oar_rl.study.screen_report import markdown

PROG = "python -m experiments.credit_why"


def warm_start(out: Path, cache_dir: str | None) -> dict:
    """Score the warm start on both evaluation samples (sampled and greedy, per problem)."""
    from oar_rl.study.training import heldout_accuracy
    from oar_rl.tasks import get_task

    task = get_task(RATES.task)
    ws = task.load_warm_start("default", cache_dir)
    rec: dict = {"plan": RATES.name, "task": RATES.task}
    for kind in ("screen", "confirm"):
        split, problems = RATES.eval[kind]
        s = replace(settings(kind, RATES), max_completion_length=task.max_completion_length)
        rows = task.prompts(split, problems)
        t0 = time.perf_counter()
        per: dict[str, list[int]] = {"sampled": [], "greedy": []}
        acc = {  # as every run is scored (oar_rl.study.runner): T = 0 and one sample for greedy
            g: heldout_accuracy(
                ws.model,
                ws.tokenizer,
                rows,
                task.check,
                temperature=0.0 if g == "greedy" else s.temperature,
                samples=1 if g == "greedy" else s.eval_samples,
                seed=s.eval_seed,
                max_new_tokens=s.max_completion_length,
                per_row=per[g],
            )
            for g in ("sampled", "greedy")
        }
        n_curve, curve_samples = s.n_curve  # the learning curve's sample: step 0 of every run's curve
        curve = heldout_accuracy(
            ws.model, ws.tokenizer, rows[:n_curve], task.check, temperature=s.temperature,
            samples=curve_samples, seed=s.eval_seed, max_new_tokens=s.max_completion_length,
        )  # fmt: skip
        rec[split] = {**acc, "problems": problems, "samples": s.eval_samples, "eval_seed": s.eval_seed,
                      "per_problem": per, "curve": curve, "curve_sample": [n_curve, curve_samples],
                      "seconds": time.perf_counter() - t0}  # fmt: skip
        print(f"warm start, {split}: {100 * acc['sampled']:.1f}% sampled, {100 * acc['greedy']:.1f}% greedy",
              file=sys.stderr)  # fmt: skip
    write_text_atomic(out / "warm_start.json", json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("run", "pilot"):
        return screen_main(argv, plan=RATES, prog=PROG)
    p = argparse.ArgumentParser(allow_abbrev=False, prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "action",
        choices=("warm-start", "rates", "confirm", "shared-cpu", "answers", "amend3", "run", "report"),
    )
    p.add_argument("--dry-run", action="store_true", help="confirm: list the runs and their settings only")
    p.add_argument("--out", default=f"results/{RATES.name}", help="output directory")
    p.add_argument("--cache-dir", "--cache_dir", dest="cache_dir", default=None)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    a = p.parse_args(argv)
    out = Path(a.out)
    if a.dry_run and a.action != "confirm":
        p.error("--dry-run lists the confirmation's runs: `confirm --dry-run`")
    if a.dry_run:
        print(dry_run(out, _confirm_plan(p, out)), end="")
        return 0
    if a.action == "amend3":
        plan = _confirm_plan(p, out)
        rec = amend3.derive(
            load_runs(out, "confirm", plan), _same_load(out, ("grpo", "grpo-compute", "first-error"))
        )
        write_text_atomic(out / "amend3.json", json.dumps(rec, indent=1, sort_keys=True) + "\n")
        write_text_atomic(out / "amend3.md", amend3.markdown_settings(rec))
        print(amend3.markdown_settings(rec), file=sys.stderr)
        return 0
    import torch

    torch.set_num_threads(a.threads)
    if a.action == "warm-start":
        warm_start(out, a.cache_dir)
    elif a.action == "report":  # the grid's table only: the confirmation's figures are `answers`'
        rec = write_report(out, "screen", RATES)
        print(markdown(rec["rows"], "The rate grid", ""), file=sys.stderr)
    elif a.action == "rates":
        rec = rates.write(out, load_runs(out, "screen", RATES))
        print(rates.markdown(rec), file=sys.stderr)
    elif a.action == "shared-cpu":
        rec = shared_cpu.update(out / "confirm")
        n = len(rec["runs"]) - len(shared_cpu.same_load(rec))
        print(f"{len(rec['runs'])} runs recorded, {n} not under the same load", file=sys.stderr)
    elif a.action == "answers":
        plan = _confirm_plan(p, out)
        rec, text = regenerate(out, plan)
        write_text_atomic(out / "answers.json", json.dumps(rec, indent=1, sort_keys=True) + "\n")
        png = out / answers.IMAGE
        if rec["blinded"]:
            png.unlink(missing_ok=True)  # no figure of an incomplete confirmation (nor a stale one)
        else:
            figure.draw(figure.figure_data(rec, plan.confirm_seeds), png)
        write_text_atomic(out / "answers.md", text)
        print(text, file=sys.stderr)
    else:  # confirm
        plan = _confirm_plan(p, out)
        train_arms(out, list(plan.arms), plan.confirm_seeds, "confirm", a.cache_dir, plan)
    return 0


def regenerate(out: Path, plan) -> tuple[dict, str]:
    """(answers.json's record, answers.md's text) from the run files under `out` (writes nothing)."""
    runs = load_runs(out, "confirm", plan)
    shared = out / "confirm" / shared_cpu.FILE
    keys = {f"{arm}.seed{s}" for arm, by_seed in runs.items() for s in by_seed}
    same = shared_cpu.same_load(json.loads(shared.read_text()) if shared.exists() else None, keys)
    rec = answers.answers(runs, _warm(out)["test"], plan.confirm_seeds, same)
    chosen = json.loads((out / "rates.json").read_text())["chosen"]
    rec["amendment3"] = amend3.answers(
        runs, _warm(out)["test"], plan.confirm_seeds, (chosen["grpo"], chosen["first-error"]), same
    )
    text = answers.markdown(rec, plan.confirm_seeds)
    if not rec["blinded"]:  # Amendment 3's section: its contrasts, or which of its runs are in
        text += "\n".join(amend3.markdown(rec["amendment3"])) + "\n"
    return rec, text


def _warm(out: Path) -> dict:
    return json.loads((out / "warm_start.json").read_text())


def _same_load(out: Path, arms: tuple[str, ...]) -> set[str]:
    """The keys of `arms`' runs under the same load (`shared_cpu.same_load`; every one recorded)."""
    rec = json.loads((out / "confirm" / shared_cpu.FILE).read_text())
    keys = {k for k in rec["runs"] if k.rsplit(".seed", 1)[0] in arms}
    return shared_cpu.same_load(rec, keys)


SHOWN = ("learning_rate", "prompts_per_step", "num_generations")


def dry_run(out: Path, plan) -> str:
    """Every run of the confirmation, arm by arm: the settings it trains under (the study protocol with
    the arm's overrides, `oar_rl.study.provenance`), its seeds in and to run, and whether the files in
    record those settings (`run_settings`, either kind of file). Trains nothing."""
    proto, seeds = protocol("confirm", plan), plan.confirm_seeds
    runs_dir = out / "confirm" / "runs"
    lines = [f"{plan.name} confirmation, protocol {protocol_hash(proto)}: test split, seeds {seeds[0]}–"
             f"{seeds[-1]}, {proto['steps']} steps", "",
             "| arm | stage | rule | learning rate | prompts per step | completions per prompt | in | to run "
             "| files agree |", "|---|---:|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    todo = 0
    for arm in plan.arms:
        over = dict(arm.overrides)
        want, _ = effective_protocol(proto, over, over.get("learning_rate", plan.learning_rate))
        files = [runs_dir / RunStore.filename(arm.name, s) for s in seeds]
        got = [run_settings(json.loads(f.read_text())) for f in files if f.exists()]
        bad = [g for g in got if any(g.get(k) != want[k] for k in SHOWN)]
        todo += len(seeds) - len(got)
        agree = "–" if not got else "yes" if not bad else f"**no** ({len(bad)})"
        cells = [arm.name, str(arm.stage), arm.method, _lr(want['learning_rate']),
                 str(want["prompts_per_step"]), str(want["num_generations"]), str(len(got)),
                 str(len(seeds) - len(got)), agree]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"{todo} runs to do: `python -m experiments.credit_why confirm --out {out}` (two processes).",
    ]
    return "\n".join(lines) + "\n"


def _confirm_plan(p: argparse.ArgumentParser, out: Path):
    """The confirmation's plan at the rates `rates.json` chose (an error if the grid allows none)."""
    path = out / "rates.json"
    if not path.exists():
        p.error(f"{path} does not exist: finish the grid and run `{PROG} rates` first")
    rec = json.loads(path.read_text())
    if not rec["confirm"]:
        p.error(f"{path}: GRPO's criterion is not met or first-error has no eligible rate; no confirmation")
    return confirm_plan(rec["chosen"]["grpo"], rec["chosen"]["first-error"], int(rec["compute"]["prompts"]))


if __name__ == "__main__":
    raise SystemExit(main())
