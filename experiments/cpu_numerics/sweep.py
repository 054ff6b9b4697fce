"""Which CPU settings change a run's first steps, and what they cost (issue 49).

`python -m experiments.cpu_numerics sweep --regime long --steps 2 --json results/fingerprints/sweep-X.json`
fingerprints one run (`oar_rl.study.fingerprint`: the long regime's confirmation GRPO seed 300, or the
short regime's screen GRPO seed 2000) once per setting in `SETTINGS`, each in a fresh process (the
settings are environment variables read when torch, MKL or oneDNN load), and compares every step with
the committed run file made on another CPU and with this machine's default. It also records which code
path MKL reports for each setting (`MKL_VERBOSE=1` on one sgemm: the header names the instruction set).

`... time --regime long --settings default,mkl-cbwr-compatible --repeats 3` times the settings' runs
interleaved (default, A, B, default, A, B, ...): the median training seconds of `--steps` steps, and
each setting's ratio to the default.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from oar_rl.io import write_text_atomic
from oar_rl.machine import machine_info, numerics_info
from oar_rl.study.fingerprint import differences

REGIMES = {
    "long": ("experiments.credit_long", ["--kind", "confirm", "--arm", "grpo", "--seed", "300"],
             "results/credit-long/confirm/runs/grpo.seed300.json"),
    "short": ("experiments.credit_screen", ["--kind", "screen", "--arm", "grpo", "--seed", "2000"],
              "results/credit-screen/screen/runs/grpo.seed2000.json"),
}  # fmt: skip
"""Regime -> (the experiment whose plan it runs, the run's arguments, the committed run file)."""

NO_MKLDNN = "import torch; torch.backends.mkldnn.enabled = False"
SETTINGS: dict[str, tuple[dict[str, str], str, int]] = {
    "default": ({}, "", 1),
    "aten-avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, "", 1),
    "aten-default": ({"ATEN_CPU_CAPABILITY": "default"}, "", 1),
    "mkl-cbwr-compatible": ({"MKL_CBWR": "COMPATIBLE"}, "", 1),
    "mkl-cbwr-avx2": ({"MKL_CBWR": "AVX2"}, "", 1),
    "mkl-cbwr-avx512": ({"MKL_CBWR": "AVX512"}, "", 1),
    "mkl-cbwr-avx512-strict": ({"MKL_CBWR": "AVX512,STRICT"}, "", 1),
    "mkl-instructions-avx2": ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, "", 1),
    "mkl-instructions-avx512": ({"MKL_ENABLE_INSTRUCTIONS": "AVX512"}, "", 1),
    "mkl-debug-cpu-type-5": ({"MKL_DEBUG_CPU_TYPE": "5"}, "", 1),
    "onednn-avx2": ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "", 1),
    "onednn-avx512-core": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "", 1),
    "mkldnn-off": ({}, NO_MKLDNN, 1),
    "threads-2": ({"OMP_NUM_THREADS": "2"}, "", 2),
    "portable-x86": ({"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2"}, "", 1),
    "avx2": ({"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}, "", 1),
}
"""Name -> (environment, Python run before the command, torch threads)."""

MKL_PROBE = "import torch; a = torch.randn(300, 64); b = torch.randn(64, 192); (a @ b).sum().item()"


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MKL_", "ONEDNN_", "DNNL_", "ATEN_CPU"))}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def mkl_path(extra: dict[str, str]) -> str | None:
    """The code path MKL names under these settings (its MKL_VERBOSE header), or None."""
    r = subprocess.run([sys.executable, "-c", MKL_PROBE], env={**_env(extra), "MKL_VERBOSE": "1"},
                       capture_output=True, text=True, check=False)  # fmt: skip
    head = next((ln for ln in r.stdout.splitlines() if "architecture" in ln), None)
    return head.split("architecture", 1)[1].strip() if head else None


def run_setting(regime: str, name: str, steps: int) -> dict[str, Any]:
    """The fingerprint of `regime`'s run under setting `name`, in a fresh process."""
    module, args, _ = REGIMES[regime]
    extra, prelude, threads = SETTINGS[name]
    with tempfile.TemporaryDirectory(prefix="oar-rl-sweep-") as tmp:
        out = Path(tmp) / "fp.json"
        argv = ["fingerprint", *args, "--steps", str(steps), "--threads", str(threads), "--json", str(out)]
        code = f"{prelude}\nimport sys\nfrom {module}.__main__ import main\nsys.exit(main({argv!r}))"
        r = subprocess.run([sys.executable, "-c", code], env=_env(extra), capture_output=True, text=True,
                           check=False)  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"setting {name} failed:\n{r.stderr[-3000:]}")
        return json.loads(out.read_text())


def sweep(regime: str, names: list[str], steps: int) -> dict[str, Any]:
    committed = json.loads(Path(REGIMES[regime][2]).read_text())
    rows = {}
    for name in names:
        fp = run_setting(regime, name, steps)
        rows[name] = {
            "settings": {"env": SETTINGS[name][0], "python": SETTINGS[name][1], "threads": SETTINGS[name][2]},
            "mkl_path": mkl_path(SETTINGS[name][0]),
            "steps": fp["steps"],
            "train_seconds": fp["train_seconds"],
            "vs_committed": differences(fp, committed),
        }
        s1 = fp["steps"][0]
        print(f"{name:26s} loss {s1['loss']!r:24s} grad_norm {s1['grad_norm']!r:22s} "
              f"w {s1['weights_sha256'][:12]} committed-diffs {len(rows[name]['vs_committed'])} "
              f"mkl: {rows[name]['mkl_path']}", flush=True)  # fmt: skip
    base = rows.get("default")
    for row in rows.values():
        if base is not None:
            row["vs_default"] = differences({"steps": row["steps"]}, {"steps": base["steps"]})
    return {
        "regime": regime,
        "run": " ".join(REGIMES[regime][1]),
        "committed": REGIMES[regime][2],
        "committed_machine": committed.get("machine"),
        "steps": steps,
        "machine": {**machine_info(), **numerics_info()},
        "settings": rows,
    }


def time_settings(regime: str, names: list[str], steps: int, repeats: int) -> dict[str, Any]:
    seconds: dict[str, list[float]] = {n: [] for n in names}
    for i in range(repeats):
        for name in names:
            seconds[name].append(run_setting(regime, name, steps)["train_seconds"])
            print(f"repeat {i + 1} {name}: {seconds[name][-1]:.1f} s", flush=True)
    med = {n: statistics.median(v) for n, v in seconds.items()}
    base = med.get("default")
    return {
        "regime": regime,
        "steps": steps,
        "repeats": repeats,
        "machine": machine_info(),
        "seconds": seconds,
        "median": med,
        "ratio_to_default": {n: m / base for n, m in med.items()} if base else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m experiments.cpu_numerics", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("action", choices=("sweep", "time"))
    p.add_argument("--regime", choices=tuple(REGIMES), default="long")
    p.add_argument("--settings", default=None, help="comma-separated names (default: every setting)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="time: runs per setting (interleaved)")
    p.add_argument("--json", default=None, help="write the record here (atomically)")
    a = p.parse_args(argv)
    names = a.settings.split(",") if a.settings else list(SETTINGS)
    for n in names:
        if n not in SETTINGS:
            p.error(f"unknown setting {n!r}; valid: {', '.join(SETTINGS)}")
    if a.action == "sweep":
        rec = sweep(a.regime, names, a.steps)
    else:
        rec = time_settings(a.regime, names, a.steps, a.repeats)
        print(json.dumps({"median": rec["median"], "ratio": rec["ratio_to_default"]}, indent=1))
    if a.json:
        write_text_atomic(a.json, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return 0
