"""CPU numerics profiles: the environment that picks the CPU kernels, and so the rounding, of a run.

Why (issue 49): the same run on two x86-64 CPUs with AVX-512 (an Intel Xeon and an AMD EPYC, torch
2.13.0+cpu with MKL, one thread) gives weights that differ in the last bits after the first optimizer
step, and on the long regime 30 steps later a final accuracy 3.6 points apart. On the AMD EPYC MKL runs
its AVX2 branch whatever it is asked (`MKL_CBWR=AVX512` and `MKL_ENABLE_INSTRUCTIONS=AVX512` give results
bit-identical to the default), while on an Intel Xeon with AVX-512 it runs its AVX-512 kernels; ATen's
own kernels follow `torch.backends.cpu.get_cpu_capability()` (AVX2 or AVX512 by CPU). oneDNN takes no
part in these runs (turning it off changes no bit).

A profile names the settings that remove both: `portable-x86` pins MKL to its conditional-numerical-
reproducibility branch that Intel documents as the same on Intel and compatible CPUs (`MKL_CBWR=
COMPATIBLE`) and ATen to its AVX2 kernels, which every AVX2 CPU runs (`ATEN_CPU_CAPABILITY=avx2`), at one
thread. Both are read when torch loads, so they must be in the environment before Python starts:
:func:`apply` re-executes the command with them (a command-line entry point calls it first), and
:func:`check` refuses to train in a process without them. A plan that names a profile records it in its
protocol; the plans made before issue 49 name none ("native": whatever the CPU picks) and keep their
protocol hashes. Measured on an AMD EPYC with AVX-512 (`results/fingerprints/README.md`, with the
cost): `avx2` reproduced a short-regime run made on an AMD EPYC with AVX2 only, every logged value of its
30 steps; whether either profile gives an Intel Xeon's bits is what the committed fingerprints let the
next machine check (`tests/test_fingerprint.py`).
"""

from __future__ import annotations

import os
import shlex
import sys

PROFILES: dict[str, dict[str, str]] = {
    "native": {},
    "portable-x86": {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2"},
    "avx2": {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
}
"""Profile name -> the environment variables it sets. `native`: none, the kernels the CPU picks (every
protocol before issue 49). `portable-x86`: the branch Intel documents as giving the same results on Intel
and compatible CPUs. `avx2`: MKL's AVX2 branch, what it runs on the AMD EPYC anyway (bit-identical to
its default there) and so nearly free; Intel documents that branch as reproducible across Intel CPUs
only, so whether an Intel Xeon gives the AMD EPYC's bits under it is for a committed fingerprint to say."""

_REEXEC = "OAR_RL_NUMERICS_REEXEC"


def profile_env(name: str | None) -> dict[str, str]:
    """The variables of profile `name` (None: native). ValueError names the valid profiles."""
    if name is None:
        return {}
    if name not in PROFILES:
        raise ValueError(f"unknown CPU numerics profile {name!r}; valid: {', '.join(PROFILES)}")
    return dict(PROFILES[name])


def missing(name: str | None) -> dict[str, str]:
    """The profile's variables that this process's environment does not hold (empty: it runs under it)."""
    return {k: v for k, v in profile_env(name).items() if os.environ.get(k) != v}


def command_line(name: str | None) -> str:
    """This process's command line prefixed with the profile's variables (what to run instead)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in profile_env(name).items())
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    return f"env {env} {shlex.join(argv)}" if env else shlex.join(argv)


def check(name: str | None) -> None:
    """RuntimeError, with the command to run instead, unless this process runs under profile `name`."""
    if missing(name):
        raise RuntimeError(
            f"this protocol runs under the CPU numerics profile {name!r} ({profile_env(name)}), which "
            f"must be set before Python starts; run: {command_line(name)}"
        )


def apply(name: str | None) -> None:
    """Re-execute this command under profile `name` unless it already runs under it (call it first in a
    command-line entry point: the variables are read when torch loads). Never loops: a re-executed
    process that still lacks them raises."""
    todo = missing(name)
    if not todo:
        return
    if os.environ.get(_REEXEC):
        check(name)
    argv = getattr(sys, "orig_argv", None)
    if not argv:
        check(name)
    print(f"[oar-rl] CPU numerics profile {name!r}: re-running with {todo}", file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, *argv[1:]], {**os.environ, **todo, _REEXEC: "1"})


def record(name: str | None) -> dict[str, object]:
    """What a protocol records about its profile: {"profile": name, "env": {...}}."""
    return {"profile": name or "native", "env": profile_env(name)}
