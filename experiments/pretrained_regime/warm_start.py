"""The pretrained regime's warm start: check a build against the regime's records, ship it, restore it.

Code without a shipped adapter builds the warm start (`oar_rl.lora_sft`, recipe `364de6914e16e593`)
into an empty cache before its first run: 1928 s on the project's Intel Xeon at one thread beside
another process, 2242 s there alone (`results/pretrained-regime/warm-start/`), 2689 s on an AMD EPYC
with AVX2 only at two (`experiments/pretrained_regime/README.md`, run log). The Xeon's build matched the
records and ships as `oar_rl/models/wordproblems-smollm2/`. The
weights of a build depend in the last bits on the CPU and thread count that make it (issue 8;
`results/fingerprints/`), so a build may stand in for the one the regime's records describe only when it
is that one. The check: the warm start's own samples on the test sample, labelled and scored by the
study's own code (`oar_rl.study.cli.role_figures`; the `task_figures` of `confirm30/warm_start.json`,
made on the Intel Xeon) must come out bit for bit. That tests the adapter, its merge and the CPU's
inference together: a match over the mean entropies of ~10,000 sampled tokens, to 16 digits, is strong
evidence (not proof) that all three are the records'; a mismatch cannot say which part differs.

    python -m experiments.pretrained_regime.warm_start check --json FILE   # build (if missing) and check
    python -m experiments.pretrained_regime.warm_start ship --check FILE   # into the package, if it matched
    python -m experiments.pretrained_regime.warm_start restore             # the shipped one into the cache

`ship` copies the checked adapter (about 20 MB) to `oar_rl/models/wordproblems-smollm2/`, which the task
loads when present (`oar_rl.tasks.pretrained.shipped_adapter`, verified against the recipe and the
manifest's sha256). `restore` copies a shipped adapter into the cache entry that code without it reads
(the confirmation runs from a worktree of an older commit). Every copy is written to a temporary
directory, verified, then renamed into place; an existing entry that is not the same adapter is refused.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from oar_rl import lora_sft
from oar_rl.io import write_text_atomic

RESULTS = Path("results/pretrained-regime")
AGAINST = RESULTS / "confirm30" / "warm_start.json"
"""The record whose `task_figures` a build must reproduce (the same figures are in every folder's)."""
PROTOCOL_KEYS = ("test_problems", "temperature", "max_completion_length", "eval_seed")


def differences(got: dict[str, Any], want: dict[str, Any], prefix: str = "") -> dict[str, list]:
    """Every key whose values are not identical, as {dotted key: [got, want]} (nested dicts walked)."""
    out: dict[str, list] = {}
    for key in sorted(set(got) | set(want)):
        a, b = got.get(key), want.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out.update(differences(a, b, f"{prefix}{key}."))
        elif a != b or type(a) is not type(b):
            out[f"{prefix}{key}"] = [a, b]
    return out


def adapter_identity(adapter: Path) -> dict[str, Any]:
    """What names an adapter directory: its manifest's sha256, its files' sha256 and its build facts."""
    from oar_rl.fetch import sha256_file

    manifest = json.loads((adapter / lora_sft.MANIFEST_FILE).read_text())
    return {
        "path": str(adapter),
        "manifest_sha256": sha256_file(adapter / lora_sft.MANIFEST_FILE),
        "files": manifest["files"],
        "build": {k: v for k, v in manifest.get("build", {}).items() if k != "loss"},
        "final_loss": (manifest.get("build", {}).get("loss") or [None])[-1],
    }


def check(against: Path, cache_dir: str | None) -> dict[str, Any]:
    """Load (building if missing) the default warm start and measure its role statistics under the
    protocol of `against`; the record says whether they are `against`'s `task_figures` bit for bit."""
    import torch

    from oar_rl.machine import machine_info
    from oar_rl.study.cli import role_figures
    from oar_rl.tasks import get_task
    from oar_rl.tasks.pretrained import NAME, WARM_START_SPECS, shipped_adapter

    committed = json.loads(against.read_text())
    protocol = committed["protocol"]
    if "task_figures" not in committed:
        raise ValueError(f"{against} has no task_figures to check against")
    task = get_task(NAME)
    t0 = time.perf_counter()
    ws = lora_sft.load(WARM_START_SPECS["default"], NAME, cache_dir=cache_dir, shipped=shipped_adapter())
    if ws.recipe_hash != committed["recipe_hash"]:
        raise ValueError(
            f"the code's warm start is recipe {ws.recipe_hash}; {against} is {committed['recipe_hash']}"
        )
    t1 = time.perf_counter()
    rows = task.prompts("test", protocol["test_problems"])
    figures = role_figures(
        task, ws.model, ws.tokenizer, rows, temperature=protocol["temperature"],
        max_new_tokens=protocol["max_completion_length"], seed=protocol["eval_seed"],
    )  # fmt: skip
    diff = differences(figures, committed["task_figures"])
    return {
        "match": not diff,
        "against": str(against),
        "differences": diff,
        "figures": figures,
        "protocol": {k: protocol[k] for k in PROTOCOL_KEYS},
        "recipe_hash": ws.recipe_hash,
        "adapter": adapter_identity(ws.adapter),
        "machine": machine_info(),
        "torch_threads": torch.get_num_threads(),
        "seconds": {
            "load_or_build": round(t1 - t0, 1),
            "role_statistics": round(time.perf_counter() - t1, 1),
        },
    }


def copy_adapter(src: Path, dest: Path, rec: dict[str, Any]) -> Path:
    """Copy the adapter directory `src` (verified against recipe `rec`) to `dest`: kept when `dest`
    already is that adapter, refused (ValueError) when it is another, else written to a temporary
    directory beside it, verified, and renamed into place."""
    from oar_rl.fetch import sha256_file

    if not src.is_dir():
        raise ValueError(f"there is no adapter at {src} to copy")
    lora_sft.verify_adapter(src, rec, "build it again")
    manifest = sha256_file(src / lora_sft.MANIFEST_FILE)

    def same(p: Path) -> bool:
        return (
            lora_sft.adapter_problem(p, rec) is None and sha256_file(p / lora_sft.MANIFEST_FILE) == manifest
        )

    if dest.exists():
        if same(dest):
            return dest
        raise ValueError(f"{dest} exists and is not the adapter at {src}; move it away first")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        for name in (*lora_sft.ADAPTER_FILES, lora_sft.MANIFEST_FILE, lora_sft.COMPLETE_MARKER):
            shutil.copyfile(src / name, tmp / name)
        lora_sft.verify_adapter(tmp, rec, "the copy is damaged")
        lora_sft.publish(tmp, dest, same)  # a build's permissions; one made meanwhile kept if the same
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def ship(record: dict[str, Any], adapter: Path, dest: Path) -> Path:
    """Copy `adapter` to `dest` if the check `record` matched and names this very adapter."""
    if not record.get("match"):
        raise ValueError(
            f"the check did not reproduce {record.get('against')} ({len(record.get('differences', {}))} "
            "figures differ): this build is not the one the regime's records describe; nothing shipped"
        )
    ident = adapter_identity(adapter)
    if ident["manifest_sha256"] != record["adapter"]["manifest_sha256"]:
        raise ValueError(
            f"the adapter at {adapter} (manifest {ident['manifest_sha256'][:12]}) is not the one checked "
            f"({record['adapter']['manifest_sha256'][:12]}); check it first"
        )
    rec = json.loads((adapter / lora_sft.RECIPE_FILE).read_text())
    return copy_adapter(adapter, dest, rec)


def _cache_entry(cache_dir: str | None) -> tuple[Path, dict[str, Any]]:
    """The cache entry of the default warm start, and its recipe."""
    from oar_rl.fetch import fetch_model
    from oar_rl.tasks.pretrained import NAME, WARM_START_SPECS

    spec = WARM_START_SPECS["default"]
    rec = lora_sft.recipe(spec, fetch_model(spec.base, cache_dir))
    return lora_sft.cache_entry(NAME, rec, cache_dir), rec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.pretrained_regime.warm_start", allow_abbrev=False,
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", allow_abbrev=False, help="build (if missing) and check the warm start")
    c.add_argument("--against", type=Path, default=AGAINST, help=f"the record to match (default {AGAINST})")
    c.add_argument("--json", type=Path, required=True, help="where to write the check's record")
    c.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    s = sub.add_parser("ship", allow_abbrev=False, help="copy a checked adapter into the package")
    s.add_argument("--check", type=Path, required=True, help="the record `check --json` wrote")
    r = sub.add_parser("restore", allow_abbrev=False, help="copy the shipped adapter into the cache")
    for q in (c, s, r):
        q.add_argument("--cache-dir", default=None, help="the model cache (default: oar-rl's)")
    a = p.parse_args(argv)
    from oar_rl.tasks.pretrained import shipped_adapter

    try:
        if a.cmd == "check":
            from oar_rl.options import apply_threads

            apply_threads(a.threads)
            rec = check(a.against, a.cache_dir)
            write_text_atomic(a.json, json.dumps(rec, indent=1, sort_keys=True) + "\n")
            n = len(rec["differences"])
            verdict = "reproduces" if rec["match"] else f"does NOT reproduce ({n} differ)"
            print(f"warm start {rec['recipe_hash']} on {rec['machine']['cpu']}: {verdict} {a.against}'s "
                  f"task_figures; record: {a.json}")  # fmt: skip
            for key, (got, want) in rec["differences"].items():
                print(f"  {key}: {got!r} here, {want!r} in the record")
            return 0 if rec["match"] else 1
        entry, recipe = _cache_entry(a.cache_dir)
        if a.cmd == "ship":
            dest = ship(json.loads(a.check.read_text()), entry, shipped_adapter())
            print(f"shipped {entry} -> {dest}; commit it")
        else:
            dest = copy_adapter(shipped_adapter(), entry, recipe)
            print(f"restored {shipped_adapter()} -> {dest}")
    except (ValueError, OSError, lora_sft.WarmStartError) as e:
        print(f"warm_start {a.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
