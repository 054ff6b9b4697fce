"""Two CPU processes (DDP over gloo, `accelerate launch`) against one: same token advantages and metrics.

tests/multiprocess_worker.py runs two optimizer steps of OAR-G and OAR-P on the tiny CPU recipe with a
fixed global batch of 16 rows (8 per rank with 2 processes). At step 0 rank 1 has no row to score, at
step 1 rank 0 has none (the worker's scripted generation makes those groups reward-degenerate); the
busy rank scores 6-8 rows. Checked: both ranks trained (parameters changed, same log), the token
advantages of every row (the ranks' rows concatenated in global order) equal the one-process run's,
and so do the logged OAR metrics.

`accelerate launch --cpu` starts a single process whatever --num_processes says (accelerate's simple
launcher), so the two-process run uses `--multi_gpu` on this GPU-less machine: torchrun starts the
processes and accelerate falls back to CPU with gloo (`use_cpu: true` in the recipe).

FSDP cannot be launched this way on a CPU-only machine: with `--use_fsdp` and `use_cpu` accelerate
silently runs MULTI_CPU (DDP), and without `use_cpu` its FSDP plugin raises "There are currently no
available devices found, must be one of 'XPU', 'CUDA', ...". FSDP1 and FSDP2 themselves run on CPU
with gloo when sharded by hand: tests/test_distributed.py covers the scoring under both.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "multiprocess_worker.py"
CREDITS = ("oar-g", "oar-p")
METRICS = ("oar/ess_ratio", "oar/top10_mass", "oar/boosted_frac", "oar/probe_fallback_frac", "reward", "loss")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out: Path, processes: int) -> subprocess.Popen:
    out.mkdir(parents=True)
    mode = ["--cpu"] if processes == 1 else ["--multi_gpu", "--main_process_port", str(_free_port())]
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *mode,
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(WORKER),
        str(out),
        *CREDITS,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *sys.path]))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _rows(batch: dict, key: str) -> list[list[float]]:
    """Per row, `key` over the row's valid completion tokens."""
    return [v[: sum(m)] for v, m in zip(batch[key], batch["completion_mask"], strict=True)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("mp")
    procs = {n: _launch(root / f"world{n}", n) for n in (1, 2)}
    for n, proc in procs.items():
        out, _ = proc.communicate(timeout=540)
        assert proc.returncode == 0, f"{n}-process run failed:\n{out[-6000:]}"
    return {n: root / f"world{n}" for n in procs}


@pytest.mark.parametrize("credit", CREDITS)
def test_two_processes_equal_one_process(runs, credit):
    one = json.loads((runs[1] / f"{credit}-rank0.json").read_text())
    two = [json.loads((runs[2] / f"{credit}-rank{r}.json").read_text()) for r in (0, 1)]
    assert one["world"] == 1 and [t["world"] for t in two] == [2, 2]
    assert [t["rank"] for t in two] == [0, 1]
    # DDP: forwards are not collective, so nothing is padded (FSDP: tests/test_distributed.py)
    assert [t["distributed_type"] for t in two] == ["DistributedType.MULTI_CPU"] * 2
    assert [t["dummy_passes"] for t in two] == [0, 0]
    # training ran on both ranks, two steps, two generation batches
    assert all(t["params_changed"] for t in two) and one["params_changed"]
    assert len(one["batches"]) == 2 and all(len(t["batches"]) == 2 for t in two)

    for step in range(2):
        b1, b2 = one["batches"][step], [t["batches"][step] for t in two]
        assert b2[0]["rows"] + b2[1]["rows"] == b1["rows"] == list(range(16))
        scored = [sum(any(a) for a in b["advantages"]) for b in b2]
        idle = 1 if step == 0 else 0  # the rank with no row to score at this step
        assert scored[idle] == 0 and scored[1 - idle] > 0, scored
        for key in ("prompt_ids", "completion_ids"):
            assert b2[0][key] + b2[1][key] == b1[key]
        want = _rows(b1, "advantages")
        got = _rows(b2[0], "advantages") + _rows(b2[1], "advantages")
        for w, g in zip(want, got, strict=True):
            assert g == pytest.approx(w, abs=1e-4)

    for step in range(2):
        h1, h2 = one["log_history"][step], [t["log_history"][step] for t in two]
        for name in METRICS:
            assert h2[0][name] == h2[1][name], name  # every rank logs the gathered value
            assert h2[0][name] == pytest.approx(h1[name], abs=1e-5), name
