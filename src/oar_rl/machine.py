"""Where a run ran: the CPU (model and the instruction set torch's kernels use), threads and the numeric
libraries, recorded in every study run file and study record (`machine_info`).

Why it matters: two CPUs round the same run differently from its first optimizer step when ATen's
instruction set, MKL's code branch or the thread count differ (issue 49: `results/fingerprints/`). A
credit rule whose weights pass through a quantile gate (OAR's bi-level reshaping) turns that into
different weights at once; a long run turns it into other samples. Measured: the v2 study's runs were
made on an AMD EPYC (AVX2); rerun on an Intel Xeon with AVX-512, `grpo.seed3` and `random.seed3` give the
committed accuracies exactly, but `oar-g.seed3` gives 86.9% (86.5% committed), and 85.3% with
`ATEN_CPU_CAPABILITY=avx2` (issue 34); the long regime's `grpo` seed 300 ends 45.75% on the Xeon, 49.35%
on an AMD EPYC with AVX-512 (issue 49). `numerics_info` adds what a fingerprint records (SIMD flags,
torch's build configuration); `oar_rl.numerics` pins the kernels for a protocol that asks. The record is
descriptive: it is not part of any protocol (nor of its hash), so runs made on two machines still
belong to one study, and run files made before it existed load and verify as they are.
"""

from __future__ import annotations

import os
import platform
import re
from importlib import metadata
from typing import Any

PACKAGES = ("torch", "numpy", "scipy", "transformers", "trl", "accelerate")
"""Whose versions are recorded."""


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; else what `platform` says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _torch_blas(config: str) -> str | None:
    """BLAS_INFO from `torch.__config__.show()` (mkl, openblas, ...)."""
    m = re.search(r"BLAS_INFO=([^,\s]+)", config)
    return m.group(1) if m else None


def _numpy_blas() -> str | None:
    try:
        import numpy as np

        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return " ".join(str(blas[k]) for k in ("name", "version") if blas.get(k))
    except Exception:  # an older numpy without mode="dicts", or another layout: not worth failing a run
        return None


NUMERICS_ENV = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE",
    "MKL_NUM_THREADS",
    "OMP_NUM_THREADS",
)
"""Environment variables that change which CPU kernels run (and so the rounding), recorded when set."""


def machine_info() -> dict[str, Any]:
    """The machine this process runs on (JSON-friendly): CPU model and the instruction set torch's CPU
    kernels dispatch to (`torch.backends.cpu.get_cpu_capability()`, which `ATEN_CPU_CAPABILITY` can
    lower), cores and torch threads, the GPU if any, and the versions of torch, its BLAS, NumPy and its
    BLAS, SciPy, transformers, TRL and accelerate, and the settings that change CPU kernels that are set
    (`NUMERICS_ENV`: a run's CPU numerics profile, `oar_rl.numerics`)."""
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch_blas": _torch_blas(torch.__config__.show()),
        "numerics_env": {k: os.environ[k] for k in NUMERICS_ENV if k in os.environ},
        "numpy_blas": _numpy_blas(),
        "versions": {name: _version(name) for name in PACKAGES},
    }


SIMD_FLAG = re.compile(r"^(sse4_2|fma|f16c|avx.*|amx.*)$")


def cpu_flags() -> list[str]:
    """The CPU's SIMD flags (/proc/cpuinfo: sse4_2, fma, avx*, amx*); empty where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return sorted(x for x in value.split() if SIMD_FLAG.match(x))
    except OSError:
        pass
    return []


def numerics_info() -> dict[str, Any]:
    """What decides the CPU's rounding beyond `machine_info`: the CPU's vendor and SIMD flags, whether
    oneDNN (mkldnn) and MKL are on, and torch's build configuration (`torch.__config__.show()`: MKL and
    oneDNN versions, the CPU capability in use)."""
    import torch

    vendor = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            vendor = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("vendor_id")), None)
    except OSError:
        pass
    return {
        "cpu_vendor": vendor,
        "cpu_flags": cpu_flags(),
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "mkl_available": bool(torch.backends.mkl.is_available()),
        "torch_config": torch.__config__.show(),
    }


def machine_line(info: dict[str, Any] | None) -> str:
    """One line for a report: 'Intel Xeon ... (AVX512), 2 cores, 1 torch thread, torch 2.13.0 (mkl)', then
    the kernel settings that were set ('MKL_CBWR=COMPATIBLE ...', thread counts left out); a record made
    before machines were recorded says so."""
    if not info:
        return "not recorded (made before run files recorded their machine)"
    v = info.get("versions") or {}
    blas = f" ({info['torch_blas']})" if info.get("torch_blas") else ""
    threads = info.get("torch_threads")
    env = sorted((k, v) for k, v in (info.get("numerics_env") or {}).items() if "THREADS" not in k)
    return (
        f"{info.get('cpu', '?')} ({info.get('cpu_capability', '?')}), {info.get('cpu_count', '?')} cores, "
        f"{threads} torch thread{'s' * (threads != 1)}, torch {v.get('torch', '?')}{blas}"
        + (f", GPU {info['gpu']}" if info.get("gpu") else "")
        + "".join(f", {k}={v}" for k, v in env)
    )


REPRODUCIBILITY = (
    "Which figures reproduce on another CPU (measured; `results/fingerprints/`): runs on "
    "two CPUs differ in the last bits from the first optimizer step whenever ATen's instruction set (AVX2 "
    "or AVX-512), MKL's code branch (its AVX-512 kernels run on an Intel Xeon, not on an AMD EPYC) or the "
    "thread count differ; whether that moves a figure depends on the run. Short regime: GRPO's and random's "
    "runs gave the committed figures on another CPU (the v2 study's grpo.seed3 and random.seed3, AMD EPYC "
    "with AVX2, rerun on an Intel Xeon with AVX-512; the short screen's grpo seed 2000, 86.75%, rerun on an "
    "AMD EPYC with AVX-512; `make demo`'s GRPO 71.5% on all three), OAR's only in distribution, since its "
    "quantile gate turns last-bit differences into different token weights (oar-g.seed3 86.9% against "
    "86.5% committed, 85.3% with ATEN_CPU_CAPABILITY=avx2; the demo's OAR-G and OAR-P 69.7% and 70.2% on the "
    "Xeon against 67.3% and 74.2%). Long regime: no run reproduces, GRPO's included: the confirmation's "
    "grpo seed 300 ended at 45.75% sampled (62.0% greedy) on the Intel Xeon (committed), 49.35% (58.6%) on "
    "an AMD EPYC with AVX-512 and 33.3% (56.0%) on that AMD EPYC with MKL_CBWR=COMPATIBLE "
    "ATEN_CPU_CAPABILITY=avx2: one seed's figure moved 16 points from rounding alone. Compare seeds' means "
    "and intervals, not one seed's figure; the other runs were not rerun."
)
"""What the study report and the docs say about reproducing a figure on another machine."""
