"""Where a run ran: the CPU (model and the instruction set torch's kernels use), threads and the numeric
libraries, recorded in every study run file and study record (`machine_info`).

Why it matters: a credit rule whose weights pass through a quantile gate (OAR's bi-level reshaping)
turns last-digit rounding differences into different weights, so its runs reproduce exactly only on
the same kind of CPU. Measured (issue 34): the v2 study's runs were made on an AMD EPYC (AVX2); rerun on
an Intel Xeon with AVX-512, `grpo.seed3` and `random.seed3` give the committed accuracies exactly, but
`oar-g.seed3` gives 86.9% (86.5% committed), and 85.3% with `ATEN_CPU_CAPABILITY=avx2`. The record is
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
    """One line for a report: 'Intel Xeon ... (AVX512), 2 cores, 1 torch thread, torch 2.13.0 (mkl)'; a
    record made before machines were recorded says so."""
    if not info:
        return "not recorded (made before run files recorded their machine)"
    v = info.get("versions") or {}
    blas = f" ({info['torch_blas']})" if info.get("torch_blas") else ""
    threads = info.get("torch_threads")
    return (
        f"{info.get('cpu', '?')} ({info.get('cpu_capability', '?')}), {info.get('cpu_count', '?')} cores, "
        f"{threads} torch thread{'s' * (threads != 1)}, torch {v.get('torch', '?')}{blas}"
        + (f", GPU {info['gpu']}" if info.get("gpu") else "")
    )


REPRODUCIBILITY = (
    "Which figures reproduce on another CPU: GRPO's and random's runs reproduce exactly; OAR's (the "
    "bi-level quantile gate) only in distribution, since the gate turns last-digit rounding into "
    "different weights. Measured (issue 34): the v2 study's runs (AMD EPYC, AVX2) rerun on an Intel Xeon "
    "with AVX-512 gave grpo.seed3 and random.seed3 exactly, oar-g.seed3 86.9% against 86.5% committed "
    "(85.3% with ATEN_CPU_CAPABILITY=avx2), and `make demo` there OAR-G 69.7% and OAR-P 70.2% against the "
    "quickstart's 67.3% and 74.2% (GRPO 71.5%, as committed). The other methods were not rerun."
)
"""What the study report and the docs say about reproducing a figure on another machine."""
