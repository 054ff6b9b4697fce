"""Evaluation: sample n completions per problem, score them with `accuracy_reward`, report unbiased pass@k.

``oar-rl eval --model DIR --benchmarks aime25,aime24,amc23,math500,gsm8k --samples 32 --k 1,32 --out DIR``

pass@k is the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)`` per problem, in the
numerically stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, averaged over problems; pass@1 with
n samples equals mean@n.

Output directory (``--out``):

* ``<benchmark>.jsonl`` -- one line per finished problem: index, prompt, answer, completions, verdicts
  (the reward of each completion; ``None`` when the gold is unparseable), c (completions scored 1.0).
  Lines are appended (and fsynced) as problems finish, so a rerun of the same command skips problems
  already done; a torn last line (a crash mid-write) is ignored and dropped.
* ``<benchmark>.meta.json`` -- the sampling configuration of that file and its hash. A rerun whose
  configuration differs (model, split, template, n, temperature, top-p, top-k, max-new-tokens, seed,
  backend, batch size, dtype; truncate-prompts when set; verify-timeout off its default 10 s, since a
  timeout scores 0) is refused with an error naming the differing fields -- results of two configurations
  never mix; use another ``--out``. So is a rerun where a problem's prompt or gold answer changed, or
  where a local model directory holds another model than the one sampled (its ``model_fingerprint``:
  config.json and each weight file's name, size, first and last MiB), or where a Hub id resolves to
  another commit than the one sampled (``hub:<commit>``: the id and ``--revision`` are resolved once, before
  anything loads, and every loader gets that commit; :mod:`oar_rl.model_identity`).
  ``--k`` and ``--problems`` are not part of the hash: they only choose what is reported, so raising
  ``--problems`` extends an earlier run.
* ``results.json`` and ``results.md`` -- pass@k per benchmark and the average (``results.md`` is shaped
  like the paper's Table 1: a P@k column per benchmark and k, then Avg = the mean of all those cells).
  Written atomically at the end.

Before sampling, every prompt plus ``--max-new-tokens`` is checked against the model's positions (a clear
error naming the prompts, or ``--truncate-prompts`` to left-truncate them; see `oar_rl.eval.sampling`).

Reproducibility: problems are sampled in fixed batches (``max(1, batch_size // n)`` consecutive problems,
or one problem in ``ceil(n / batch_size)`` chunks), each seeded from (seed, benchmark, first index,
chunk); a batch that was interrupted is regenerated whole with the same seed, so an interrupted and
resumed run gives the same completions as an uninterrupted one (same machine and library versions).

Departures from the paper: problems whose gold answer math-verify cannot parse are left out of pass@k
(reported as ``unscored``) instead of counting as failures; the table shows every requested k for
every benchmark (the paper shows P@32 for AIME/AMC only).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from oar_rl.eval.config import BenchmarkJob, EvalConfig, build_parser
from oar_rl.eval.estimators import mean_at_n, pass_at_k
from oar_rl.eval.report import results_markdown
from oar_rl.eval.sampling import build_sampler, check_prompt_lengths, resolve_chat
from oar_rl.fetch import resolve_model
from oar_rl.io import write_text_atomic
from oar_rl.model_identity import model_fingerprint

HASHED_FIELDS: tuple[str, ...] = (
    "model",
    "template",
    "n",
    "temperature",
    "top_p",
    "top_k",
    "max_new_tokens",
    "seed",
    "backend",
    "batch_size",
    "dtype",
    "chat",
)

# configuration, CLI and the job record: oar_rl.eval.config (EvalConfig, build_parser, BenchmarkJob)


# ----------------------------------------------------------------------------------------------------
# files


def read_records(path: Path) -> dict[int, dict[str, Any]]:
    """Finished problems of a JSONL file by index; a torn last line is dropped (the file is rewritten)."""
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").split("\n")
    records: dict[int, dict[str, Any]] = {}
    good: list[str] = []
    for lineno, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if any(rest.strip() for rest in lines[lineno + 1 :]):
                raise ValueError(f"{path}:{lineno + 1} is corrupt (not a torn last line): {exc}") from exc
            break  # torn last line: ignore it
        records[int(rec["index"])] = rec
        good.append(line)
    clean = "".join(g + "\n" for g in good)
    if clean != "\n".join(lines):  # a torn line or stray blank lines: keep only whole records
        write_text_atomic(path, clean)
    return records


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it (a crash can at worst leave a torn last line)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------------
# the run


def parse_benchmark(spec: str) -> tuple[str, str | None, str]:
    """``NAME[:SPLIT]`` -> (name, split, file key); raises ValueError for an unknown name.

    A registered task's name (`oar_rl.tasks`: arithmetic, wordproblems) is a benchmark of its generator's
    named splits, its held-out one unless told."""
    from oar_rl import data
    from oar_rl.tasks import get_task, task_names

    tasks = task_names()

    def known(name: str) -> bool:
        return data.is_known(name) or name in tasks

    name, split = spec, None
    if ":" in spec:
        head, _, tail = spec.rpartition(":")
        if known(head) and not known(spec):
            name, split = head, tail or None
    if not known(name):
        valid = ", ".join(dict.fromkeys([*data.NAMES, *tasks]))
        raise ValueError(
            f"unknown benchmark {name!r}; valid: {valid}, or a local .jsonl/.json/.parquet file (NAME:SPLIT "
            "picks a split)"
        )
    if data.is_local_path(name):
        if not Path(name).is_file():
            raise ValueError(f"benchmark file {name!r} does not exist")
        key = Path(name).stem
    else:
        key = name
    if name in tasks and split is None:
        split = get_task(name).default_split
    key = f"{key}-{split}" if split and (name in tasks or ":" in spec) else key
    key = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in key)
    return name, split, key


def load_benchmark(name: str, split: str | None, template: str | None, limit: int | None) -> Any:
    """A benchmark's problems as a `datasets.Dataset` (prompt, answer): a registered task's named split
    (its prompts are in its own format: no template), else `oar_rl.data.load`."""
    from oar_rl import data
    from oar_rl.tasks import get_task, task_names

    if name in task_names():
        return get_task(name).dataset(split, limit=limit)
    return data.load(name, split, template=template, limit=limit)


def config_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _model_id(model: str) -> str:
    return str(Path(model).resolve()) if Path(model).exists() else model


def _derive_seed(seed: int, key: str, index: int, chunk: int) -> int:
    return int(hashlib.sha256(f"{seed}:{key}:{index}:{chunk}".encode()).hexdigest()[:8], 16)


def prepare(config: EvalConfig) -> list[BenchmarkJob]:
    """Validate everything that can fail before sampling; load data and resume state. ValueError on error."""
    from oar_rl import data

    config.validate()
    model_path = Path(config.model).expanduser()
    looks_like_hub_id = config.model.count("/") == 1 and not config.model.startswith((".", "/", "~"))
    if not model_path.exists() and not looks_like_hub_id:
        raise ValueError(f"model path {config.model!r} does not exist")
    if model_path.exists() and not (model_path / "config.json").is_file():
        raise ValueError(f"model path {config.model!r} has no config.json (save it with save_pretrained)")
    if model_path.exists() and config.revision is not None:
        raise ValueError(
            f"--revision {config.revision!r} applies to a Hub id; {config.model!r} is a local path"
        )
    if not model_path.exists():  # pinned before anything loads: every loader gets this commit
        from oar_rl.model_identity import resolve_hub_commit

        given, config.revision = config.revision, resolve_hub_commit(config.model, config.revision)
        print(
            f"[eval] {config.model} at {given or 'its default branch'}: commit {config.revision}", flush=True
        )
    resolve_chat(config)  # None -> the chat template when the tokenizer has one; before hashing
    if config.backend == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ValueError("--backend vllm needs vLLM, which is not installed: pip install 'oar-rl[vllm]'")
    out = Path(config.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {config.out!r} exists and is not a directory")
    template = None if config.template == "none" else config.template
    parsed = [parse_benchmark(b) for b in config.benchmarks]
    from oar_rl.tasks import task_names

    own_format = [n for n, _, _ in parsed if n in task_names()]
    if own_format and config.template == "boxed":
        raise ValueError(
            f"--template boxed does not apply to {', '.join(own_format)}: a task benchmark's prompts are "
            "in the task's own format; leave --template at its default (or 'none') for them"
        )
    fingerprint = model_fingerprint(config.model, config.revision)
    keys = [k for _, _, k in parsed]
    if len(set(keys)) != len(keys):
        raise ValueError(f"benchmarks repeat: {config.benchmarks}")
    jobs: list[BenchmarkJob] = []
    for name, split, key in parsed:
        try:
            ds = load_benchmark(name, split, template, config.limit)
        except ValueError as exc:
            raise ValueError(f"benchmark {name!r}: {exc}") from exc
        except Exception as exc:  # network or Hub errors: still before any sampling
            raise ValueError(
                f"cannot load benchmark {name!r} ({type(exc).__name__}: {exc}); offline, put a copy in "
                f"the Hub schema at ${data.benchmarks.DATA_DIR_ENV}/{name}/<split>.jsonl"
            ) from exc
        if len(ds) == 0:
            raise ValueError(f"benchmark {name!r} (split {split!r}) is empty")
        hashed = {f: getattr(config, f) for f in HASHED_FIELDS}
        if config.truncate_prompts:  # only when on, so that earlier runs keep their hash
            hashed["truncate_prompts"] = True
        if config.verify_timeout != 10.0:  # a verdict can turn 0 on timeout; off the default only (as above)
            hashed["verify_timeout"] = config.verify_timeout
        bench_id = str(Path(name).resolve()) if data.is_local_path(name) else name
        hashed.update(model=_model_id(config.model), benchmark=bench_id, split=split)
        meta_data = {"config_hash": config_hash(hashed), "config": hashed, "model_fingerprint": fingerprint}
        jsonl, meta = out / f"{key}.jsonl", out / f"{key}.meta.json"
        if meta.exists():
            old = json.loads(meta.read_text(encoding="utf-8"))
            if old.get("config_hash") != meta_data["config_hash"]:
                diff = {
                    f: (old.get("config", {}).get(f), v)
                    for f, v in hashed.items()
                    if old.get("config", {}).get(f) != v
                }
                raise ValueError(
                    f"{jsonl} holds results of a different configuration (changed: "
                    + ", ".join(f"{f} {a!r} -> {b!r}" for f, (a, b) in diff.items())
                    + "); results never mix: use another --out or delete those files"
                )
            was = old.get("model_fingerprint")  # absent in files written before it was recorded
            if was is not None and fingerprint is not None and was != fingerprint:
                what = "a Hub commit" if fingerprint.startswith("hub:") else "its config.json or weights"
                raise ValueError(
                    f"{jsonl} holds results of another version of the model at {config.model} ({what} "
                    f"changed: fingerprint {was} -> {fingerprint}); results never mix: use another --out "
                    "or delete those files"
                    + (" (or pin --revision to the old commit)" if "hub:" in was else "")
                )
            if was is None and fingerprint is not None:  # recorded before models were fingerprinted
                warnings.warn(
                    f"{jsonl}: its {len(read_records(jsonl))} finished problems were sampled before oar-rl "
                    f"recorded which version of {config.model} made them, so they cannot be checked against "
                    f"it (now {fingerprint}); resuming records it, and later resumes are checked",
                    stacklevel=2,
                )
                write_text_atomic(meta, json.dumps(old | {"model_fingerprint": fingerprint}, indent=2) + "\n")
        if jsonl.exists() and not meta.exists():
            raise ValueError(f"{jsonl} exists without its {meta.name}; delete it or use another --out")
        records = read_records(jsonl)
        prompts, answers = list(ds["prompt"]), [str(a) for a in ds["answer"]]
        for i, rec in records.items():
            if i < len(prompts) and rec.get("prompt") != prompts[i]:
                raise ValueError(f"{jsonl}: problem {i} has a different prompt than the dataset now gives")
            if i < len(answers) and "answer" in rec and rec["answer"] != answers[i]:
                raise ValueError(
                    f"{jsonl}: problem {i} was scored against the gold {rec['answer']!r}, the dataset now "
                    f"gives {answers[i]!r}; its verdicts would be stale: use another --out or delete "
                    "those files"
                )
        jobs.append(BenchmarkJob(key, name, split, prompts, answers, records, jsonl, meta, meta_data))
    return jobs


def plan_batches(num_problems: int, n: int, batch_size: int) -> list[tuple[list[int], int, int]]:
    """Fixed sampling calls: (problem indices, samples per problem, chunk id), each <= batch_size seqs."""
    calls: list[tuple[list[int], int, int]] = []
    if n <= batch_size:
        per = max(1, batch_size // n)
        for start in range(0, num_problems, per):
            calls.append((list(range(start, min(start + per, num_problems))), n, 0))
    else:
        for i in range(num_problems):
            for chunk, start in enumerate(range(0, n, batch_size)):
                calls.append(([i], min(batch_size, n - start), chunk))
    return calls


def sample_benchmark(job: BenchmarkJob, config: EvalConfig, sampler: Any, reward: Any) -> None:
    """Sample and score every problem of ``job`` not done yet, appending one record per problem."""
    from tqdm.auto import tqdm

    job.jsonl.parent.mkdir(parents=True, exist_ok=True)
    if not job.meta.exists():
        write_text_atomic(job.meta, json.dumps(job.meta_data, indent=2) + "\n")
    todo = [i for i in range(len(job.prompts)) if i not in job.records]
    calls = plan_batches(len(job.prompts), config.n, config.batch_size)
    partial: dict[int, list[str]] = {}
    with tqdm(total=len(todo), desc=f"eval {job.key}", unit="problem", disable=not todo) as bar:
        for indices, n_call, chunk in calls:
            missing = [i for i in indices if i not in job.records]
            if not missing:
                continue
            prompts = [job.prompts[i] for i in indices]
            outs = sampler.generate(prompts, n_call, _derive_seed(config.seed, job.key, indices[0], chunk))
            for i, completions in zip(indices, outs, strict=True):
                if i in missing:
                    partial.setdefault(i, []).extend(completions)
            for i in missing:
                if len(partial.get(i, [])) < config.n:
                    continue  # more chunks of this problem to come
                completions = partial.pop(i)
                verdicts = reward(completions, answer=[job.answers[i]] * len(completions))
                record = {
                    "index": i,
                    "prompt": job.prompts[i],
                    "answer": job.answers[i],
                    "completions": completions,
                    "verdicts": verdicts,
                    "c": sum(1 for v in verdicts if v == 1.0),
                    "n": len(completions),
                }
                append_record(job.jsonl, record)
                job.records[i] = record
                bar.update(1)


def summarise(jobs: list[BenchmarkJob], config: EvalConfig) -> dict[str, Any]:
    """The results dict written to results.json (fractions in [0, 1])."""
    from oar_rl.tasks import task_names

    own_format = set(task_names())  # a task benchmark's prompts are in its own format: no template
    benchmarks: dict[str, Any] = {}
    for job in jobs:
        recs = [job.records[i] for i in range(len(job.prompts))]
        # a None verdict means an unparseable gold: the problem is unscored, whatever its other verdicts
        scored = [r for r in recs if r["verdicts"] and all(v is not None for v in r["verdicts"])]
        scored_ids = {r["index"] for r in scored}
        cs = np.array([r["c"] for r in scored], dtype=np.int64)
        entry: dict[str, Any] = {
            "name": job.name,
            "split": job.split,
            "template": None if job.name in own_format else config.template,
            "num_problems": len(recs),
            "num_scored": len(scored),
            "unscored": [r["index"] for r in recs if r["index"] not in scored_ids],
            "n": config.n,
        }
        for k in config.k:
            entry[f"pass@{k}"] = float(pass_at_k(config.n, cs, k).mean()) if len(cs) else None
        entry["mean@n"] = mean_at_n(cs, config.n) if len(cs) else None
        benchmarks[job.key] = entry
    average = {}
    for k in config.k:
        vals = [b[f"pass@{k}"] for b in benchmarks.values() if b[f"pass@{k}"] is not None]
        average[f"pass@{k}"] = float(np.mean(vals)) if vals else None
    cells = [b[f"pass@{k}"] for b in benchmarks.values() for k in config.k if b[f"pass@{k}"] is not None]
    cfg = {
        f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in ("out", "device")
    }
    cfg["model"] = _model_id(config.model)
    return {
        "config": cfg,
        "benchmarks": benchmarks,
        "average": average,
        "avg": float(np.mean(cells)) if cells else None,
    }


def evaluate(config: EvalConfig, *, sampler: Any = None) -> dict[str, Any]:
    """Run (or resume) an evaluation, write its files, return the results dict; ValueError on bad input."""
    from oar_rl.rewards import make_accuracy_reward

    if config.chat is None and sampler is not None:  # a given sampler formats prompts its own way
        tok = getattr(sampler, "tokenizer", None)
        config.chat = bool(getattr(tok, "chat_template", None))
    jobs = prepare(config)
    if any(len(j.records) < len(j.prompts) for j in jobs):
        if sampler is None:
            try:
                sampler = build_sampler(config)
            except (OSError, ValueError) as exc:
                raise ValueError(f"cannot load model {config.model!r}: {exc}") from exc
        check_prompt_lengths(jobs, config, sampler)
        reward = make_accuracy_reward(timeout=config.verify_timeout, workers=config.verify_workers)
        for job in jobs:
            sample_benchmark(job, config, sampler, reward)
    results = summarise(jobs, config)
    out = Path(config.out)
    write_text_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    write_text_atomic(out / "results.md", results_markdown(results))
    return results


def main(argv: list[str] | None = None) -> int:
    """`oar-rl eval`: exit 0 on success, 2 on bad input (nothing sampled), 130 when interrupted."""
    from oar_rl.console import print_settings
    from oar_rl.options import apply_threads

    args = vars(build_parser().parse_args(sys.argv[1:] if argv is None else argv))
    threads, cache_dir, given = args.pop("threads"), args.pop("cache_dir"), args["model"]
    try:
        apply_threads(threads)
        args["model"] = resolve_model(given, cache_dir)
        config = EvalConfig(**args)
        shown = {**vars(config), "threads": threads or "torch's choice"}
        if given != config.model:
            shown["model"] = f"{given} -> {config.model}"
        print_settings("eval", shown)
        results = evaluate(config)
    except ValueError as exc:
        print(f"oar-rl eval: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("oar-rl eval: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    print(results_markdown(results))
    print(f"wrote {Path(config.out) / 'results.json'} and results.md")
    return 0


__all__ = ["EvalConfig", "evaluate", "main", "mean_at_n", "pass_at_k"]
