"""gpu-check's environment check: the versions oar-rl declares, every module importing, the device working.

- Each of oar-rl's declared dependencies (pyproject.toml's ``dependencies``, read from the source tree
  next to the package, or from the installed distribution's metadata) must be installed at a version its
  specifier allows: on a GPU machine that proves the wheels of ``benchmarks/gpu_wheels.sh`` are the ones
  in use (e.g. transformers 5.23 over the machine's own 5.17).
- Every module of ``oar_rl`` must import. A module whose import fails only because an *optional*
  dependency (:data:`OPTIONAL`, the extras) is missing is listed, not failed.
- On ``cuda``: the device is there, and a bf16 and a float32 matrix product on it agree with the CPU's.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import pkgutil
import platform
import re
from pathlib import Path
from typing import Any

import torch

OPTIONAL = {"vllm", "gguf", "deepspeed", "peft", "tensorboard", "trackio"}
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # src/oar_rl (not `import oar_rl`: the facade is above us)


def declared_dependencies() -> list[str]:
    """oar-rl's ``dependencies`` requirement strings (source tree first, installed metadata second)."""
    pyproject = PACKAGE_DIR.parents[1] / "pyproject.toml"
    if pyproject.is_file():
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            tomllib = None
        if tomllib is not None:
            return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    requires = md.requires("oar-rl") or []
    return [r for r in requires if "extra ==" not in r]


def check_versions() -> tuple[dict[str, str], list[str]]:
    """({name: installed version or 'missing'}, problems)."""
    from packaging.requirements import Requirement

    versions, problems = {}, []
    for text in declared_dependencies():
        req = Requirement(text)
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            versions[req.name] = "missing"
            problems.append(f"{req.name} is not installed (oar-rl needs {text})")
            continue
        versions[req.name] = have
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            problems.append(f"{req.name} {have} is installed; oar-rl needs {text}")
    return versions, problems


def import_all() -> tuple[int, dict[str, str], list[str]]:
    """(modules imported, {module: optional dependency it misses}, problems)."""
    optional, problems, count = {}, [], 0
    for info in pkgutil.walk_packages([str(PACKAGE_DIR)], PACKAGE_DIR.name + "."):
        try:
            importlib.import_module(info.name)
            count += 1
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top in OPTIONAL:
                optional[info.name] = top
            else:
                problems.append(f"{info.name}: {type(exc).__name__}: {exc}")
        except Exception as exc:
            problems.append(f"{info.name}: {type(exc).__name__}: {exc}")
    return count, optional, problems


def _device_info(device: str) -> tuple[dict[str, Any], list[str]]:
    info: dict[str, Any] = {
        "device_name": platform.processor() or platform.machine(),
        "cuda": torch.version.cuda,
    }
    problems = []
    if device != "cuda":
        return info, problems
    props = torch.cuda.get_device_properties(0)
    info.update(
        device_name=props.name,
        device_memory_mib=round(props.total_memory / 2**20),
        compute_capability=f"{props.major}.{props.minor}",
        multiprocessors=props.multi_processor_count,
        bf16_supported=torch.cuda.is_bf16_supported(),
    )
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    ref = a.double() @ b.double()
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 2e-2)):
        got = (a.to("cuda", dtype) @ b.to("cuda", dtype)).double().cpu()
        err = ((got - ref).norm() / ref.norm()).item()
        info[f"matmul_{str(dtype).split('.')[-1]}_relative_error"] = err
        if not err <= tol:
            problems.append(
                f"a {dtype} matrix product on the GPU is off by {err:.3g} (relative; limit {tol})"
            )
    return info, problems


def run_environment(device: str) -> dict[str, Any]:
    """Versions, imports and the device; `problems` lists what fails the check."""
    versions, problems = check_versions()
    count, optional, import_problems = import_all()
    info, device_problems = _device_info(device)
    import sys

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        **{k: v for k, v in versions.items() if k != "torch"},
        **info,
        "torch_threads": torch.get_num_threads(),
        "modules_imported": count,
        "optional_missing": optional,
        "problems": problems + import_problems + device_problems,
        "platform": re.sub(r"\s+", " ", platform.platform()),
    }
