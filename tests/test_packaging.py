"""The built wheel is what a user installs: it must carry the shipped warm start and run the CLI.

The wheel is built from a copy of the tracked layout (pyproject, README, LICENSE, src/, and experiments/,
which it must leave out) with
`pip wheel --no-deps --no-build-isolation` (about 2 s), then installed with `--no-deps` into a fresh
virtual environment that borrows this environment's third-party packages through a `.pth` file (no
download). The editable install of this checkout is not visible there (its `.pth` hook is not processed
through another `.pth`), so the commands run the wheel's own copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "oar_rl"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    for name in ("src", "experiments"):  # experiments/ beside src/, as in the repository: the wheel skips it
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            ".",
        ],
        cwd=tree,
        check=True,
    )
    (whl,) = out.glob("oar_rl-*.whl")
    return whl


def test_wheel_carries_the_package_and_the_shipped_warm_start(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {f"oar_rl/{p.relative_to(SRC).as_posix()}" for p in SRC.rglob("*.py")}
    assert sources - names == set()
    # Every file of every shipped directory, dotfiles included: a glob's "*" skips them, and an adapter
    # without its completion marker is refused on load (oar_rl.lora_sft.adapter_problem).
    shipped = {
        f"oar_rl/{p.relative_to(SRC).as_posix()}"
        for d in (SRC / "models").iterdir()
        if d.is_dir()
        for p in d.iterdir()
        if p.is_file()
    }
    assert "oar_rl/models/wordproblems/model.safetensors" in shipped
    assert "oar_rl/models/wordproblems/oar_rl_manifest.json" in shipped
    assert shipped - names == set()
    assert "oar_rl/py.typed" in names
    dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    entry_points = zipfile.ZipFile(wheel).read(f"{dist}/entry_points.txt").decode()
    assert "oar-rl = oar_rl.cli:main" in entry_points
    assert any(n.startswith(f"{dist}/") and "LICENSE" in n for n in names)
    assert not any("/tests/" in n or n.startswith("tests/") for n in names)


def test_wheel_ships_no_experiment(wheel):
    """The package holds what a user runs on their own model or task; the project's experiments (their
    plans, the real-model recall, the leaderboard, the scripts) stay in the repository (issue 34)."""
    names = zipfile.ZipFile(wheel).namelist()
    assert (ROOT / "experiments" / "credit_long" / "plan.py").is_file()  # the tree had them to leave out
    assert not any(n.startswith("experiments/") or "/experiments/" in n for n in names)
    for gone in ("real_recall", "real_report", "real_steps", "leaderboard", "credit_long", "credit_screen"):
        assert not any(gone in n for n in names), gone
    plan = zipfile.ZipFile(wheel).read("oar_rl/study/screen_plan.py").decode()
    assert "class ScreenPlan" in plan and "CREDIT_LONG =" not in plan and "ARMS" not in plan


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX venv layout")
def test_wheel_installs_in_a_fresh_venv_and_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # --ignore-installed: the borrowed site-packages hold this checkout's editable oar-rl of the same
    # version, which pip would otherwise count as installed (it never uninstalls outside the venv)
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps"]
    subprocess.run([*pip, "--ignore-installed", str(wheel)], check=True, env=env)
    for command in ("demo", "attribute"):
        run = subprocess.run(
            [str(venv / "bin" / "oar-rl"), command, "--help"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        assert f"usage: oar-rl {command}" in run.stdout
    check = subprocess.run(
        [
            str(py),
            "-c",
            "import oar_rl, oar_rl.shipped as s; print(oar_rl.__file__); print(s.verify_shipped())",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout.split()
    assert all(line.startswith(purelib) for line in check), check
    adapter = SRC / "models" / "wordproblems-smollm2"
    if adapter.is_dir():  # the pretrained regime's shipped adapter: whole in the wheel's copy too
        code = (
            "import json, oar_rl.lora_sft as L; from oar_rl.tasks.pretrained import shipped_adapter as s; "
            "p = s(); print(p); print(L.adapter_problem(p, json.loads((p / L.RECIPE_FILE).read_text())))"
        )
        where, problem = subprocess.run(
            [str(py), "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
        ).stdout.splitlines()
        assert where.startswith(purelib) and problem == "None", (where, problem)
