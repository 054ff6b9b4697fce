"""Fingerprints and CPU numerics profiles (issue 49).

The cross-machine test runs one training step's kernels (`python -m oar_rl.study.fingerprint --kernel`,
about a second plus the start of a process) under each profile and compares it with every committed
kernel fingerprint (`results/fingerprints/kernel.*.json`) made on another CPU model with the same torch:
`portable-x86` and `avx2` are meant to give the same bits there, `native` is expected to differ (an xfail
that names both machines and the first differing values). No profile has been checked on a CPU of
another vendor yet, so a profile's mismatch is an xfail naming both machines too, and a failure under
`OAR_RL_REQUIRE_PORTABLE=1` (run it so on an Intel machine to check the profiles). On the committed
machine's own CPU model there is nothing to compare across CPUs, and the test says so in its skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from oar_rl import numerics
from oar_rl.machine import cpu_model
from oar_rl.study.fingerprint import describe_machine, differences

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "fingerprints"


def test_differences_name_every_differing_value_and_read_run_files_and_kernel_fingerprints():
    a = {"steps": [{"step": 1, "loss": -0.1, "grad_norm": 0.5, "weights_sha256": "x", "step_time": 3.0}]}
    b = {"steps": [{"step": 1, "loss": -0.1, "grad_norm": 0.25, "weights_sha256": "y", "step_time": 9.0}]}
    assert differences(a, b) == ["step 1 grad_norm: 0.5 vs 0.25", "step 1 weights_sha256: 'x' vs 'y'"]
    run = {"history": [{"step": 1, "loss": -0.2, "grad_norm": 0.5, "reward": 0.3}, {"train_loss": 0.0}]}
    assert differences(a, run) == ["step 1 loss: -0.1 vs -0.2"]  # a run file has no weights: not compared
    k1 = {"loss": 1.0, "grad_norm": 2.0, "weights_sha256": "s", "weights_sum": 3.0, "weights_abs_sum": 4.0}
    assert differences(k1, dict(k1)) == []
    assert differences(k1, {**k1, "weights_sum": 3.5}) == ["step 0 weights_sum: 3.0 vs 3.5"]


def test_a_profile_is_checked_and_named_with_the_command_to_run(monkeypatch):
    for k in ("MKL_CBWR", "ATEN_CPU_CAPABILITY"):
        monkeypatch.delenv(k, raising=False)
    assert numerics.missing(None) == {} and numerics.missing("native") == {}
    numerics.check(None)
    assert numerics.missing("portable-x86") == {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2"}
    with pytest.raises(RuntimeError, match="MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=avx2"):
        numerics.check("portable-x86")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    numerics.check("portable-x86")
    numerics.apply("portable-x86")  # already under it: returns, no re-execution
    with pytest.raises(ValueError, match="valid: native, portable-x86, avx2"):
        numerics.profile_env("fast")


def test_a_plan_with_a_profile_has_it_in_its_protocol_and_the_committed_plans_keep_theirs(monkeypatch):
    from experiments.credit_long.plan import CREDIT_LONG
    from oar_rl.study.config import protocol_hash
    from oar_rl.study.screen import protocol, train_arms

    assert "cpu_numerics" not in protocol("confirm", CREDIT_LONG)
    assert protocol_hash(protocol("confirm", CREDIT_LONG)) == "5ea45901e27480ff"
    pinned = replace(CREDIT_LONG, numerics="portable-x86")
    d = protocol("confirm", pinned)
    assert d["cpu_numerics"] == {"profile": "portable-x86", "env": numerics.PROFILES["portable-x86"]}
    assert protocol_hash(d) != "5ea45901e27480ff"
    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(RuntimeError, match="must be set before Python starts"):
        train_arms(Path("unused"), list(pinned.arms[:1]), (1,), "confirm", None, pinned)


def test_a_study_with_a_profile_has_it_in_its_protocol_and_one_without_does_not():
    from oar_rl.study.args import build_parser, settings_from_args
    from oar_rl.study.config import PRESETS

    assert "cpu_numerics" not in PRESETS["full"].protocol()
    a = build_parser().parse_args(["--quick", "--cpu-numerics", "avx2"])
    s = settings_from_args(a)
    assert s.protocol()["cpu_numerics"] == {"profile": "avx2", "env": numerics.PROFILES["avx2"]}
    assert "cpu_numerics" in s.tuning_protocol()
    with pytest.raises(ValueError, match="unknown CPU numerics profile"):
        replace(s, cpu_numerics="fast")


def _committed(profile: str) -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted(COMMITTED.glob(f"kernel.*.{profile}.json"))]


@pytest.mark.parametrize("profile", ["portable-x86", "avx2", "native"])
def test_one_steps_kernels_on_another_cpu_match_the_committed_fingerprint(profile, tmp_path):
    import torch

    committed = _committed(profile)
    assert committed, f"no committed kernel fingerprint for {profile} under {COMMITTED}"
    version = torch.__version__
    others = [c for c in committed if c["machine"]["cpu"] != cpu_model()]
    if not others:
        pytest.skip(f"this CPU ({cpu_model()}) is the committed {profile} fingerprint's: nothing to compare "
                    "across CPUs (run this test on another CPU model)")  # fmt: skip
    others = [c for c in others if c["machine"]["versions"]["torch"] == version]
    if not others:
        pytest.skip(f"the committed {profile} fingerprints were made with another torch than {version}")
    out = tmp_path / "fp.json"
    drop = {*numerics.PROFILES["portable-x86"], "OAR_RL_NUMERICS_REEXEC"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    cmd = [sys.executable, "-m", "oar_rl.study.fingerprint", "--kernel", "--numerics", profile]
    subprocess.run(
        [*cmd, "--json", str(out)],
        check=True, capture_output=True, env={**env, "OMP_NUM_THREADS": "1"}, cwd=ROOT, timeout=300,
    )  # fmt: skip
    here = json.loads(out.read_text())
    for c in others:
        diff = differences(here, c)
        where = f"{describe_machine(here['machine'])} vs {describe_machine(c['machine'])}"
        if profile == "native" and diff:
            pytest.xfail(f"native kernels differ across CPUs, as measured in issue 49 ({where}): {diff[:2]}")
        if diff and not os.environ.get("OAR_RL_REQUIRE_PORTABLE"):
            # no profile has been checked across CPU vendors yet (issue 49: only AMD EPYCs were at hand); a
            # mismatch is reported, naming both machines, and fails under OAR_RL_REQUIRE_PORTABLE=1
            pytest.xfail(
                f"profile {profile} gives other bits on {where} (unverified across vendors): {diff[:2]}"
            )
        assert not diff, f"profile {profile} gives other bits on {where}: {diff}"
