"""`oar-rl gpu-check --device cpu`: every check of the GPU command runs (tiny sizes) and passes.

The GPU run itself (docs/gpu.md) cannot run in CI; this keeps its code path alive: the same checks, the
same report writer, at sizes the CPU runs in seconds.
"""

from __future__ import annotations

import json

import pytest

from oar_rl.gpu_check.cli import CHECKS, main
from oar_rl.gpu_check.scorers import relative_error, spearman


def test_gpu_check_cpu_runs_every_check_and_passes(tmp_path, capsys):
    out = tmp_path / "gc"
    rc = main(["--device", "cpu", "--out", str(out), "--threads", "1"])
    report = json.loads((out / "gpu-check.json").read_text())
    failed = {
        c["name"]: c.get("error") or c.get("problems") for c in report["checks"] if c["status"] != "passed"
    }
    assert failed == {}
    assert rc == 0 and report["passed"]
    assert [c["name"] for c in report["checks"]] == list(CHECKS)
    checks = {c["name"]: c["details"] for c in report["checks"]}
    from oar_rl.credits import CREDITS

    for arch in ("train-qwen2", "train-llama"):
        assert set(checks[arch]["modes"]) == set(CREDITS)
        for mode, r in checks[arch]["modes"].items():
            assert r["parameters_changed"] > 0, mode
            assert all(len(v) == 2 for k, v in r["oar"].items()), mode
    rows = {(r["scorer"], r["dtype"]) for r in checks["scorer-precision"]["rows"]}
    assert rows == {(s, d) for s in ("oar-p", "oar-g", "oar-g-rms") for d in ("float32", "bfloat16")}
    steps = checks["cost-steps"]
    assert set(steps["methods"]) == {"none", "oar-gp"} and steps["steps"] >= 3
    spread = steps["methods"]["oar-gp"]["update_ratio"]
    assert spread["min"] <= spread["median"] <= spread["max"]
    # the whole-step ratio is shown only beside a passing generation-parity check
    assert (steps["methods"]["oar-gp"]["step_ratio"] is None) == (not steps["generation_parity_ok"])
    sc = checks["cost-scorers"]
    assert sc["repeats"] == 3 and {"oar-g", "oar-p", "oar-p-full", "oar-gp"} <= set(sc["over_train"])
    assert sc["oar_p_token_forwards"]["floor"] < sc["oar_p_token_forwards"]["full"]
    assert checks["oar-p-max-length"]["largest_fitting"] == 32
    md = (out / "gpu-check.md").read_text()
    assert all(f"## {name}: passed" in md for name in CHECKS)
    assert (out / "bench-scorers" / "bench.json").is_file() and (out / "bench-steps" / "bench.json").is_file()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"[gpu-check] {len(CHECKS)} checks: ") and "expected about" in lines[0]
    assert lines[-1].startswith(f"[gpu-check] {len(CHECKS)}/{len(CHECKS)} checks passed")


def test_a_failing_check_is_recorded_and_the_others_still_run(tmp_path, monkeypatch):
    from oar_rl.gpu_check import scorers

    def broken(*a, **k):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(scorers, "run_parity", broken)
    out = tmp_path / "gc"
    rc = main(["--device", "cpu", "--out", str(out), "--checks", "scorer-parity,oar-p-max-length"])
    report = json.loads((out / "gpu-check.json").read_text())
    assert rc == 1 and not report["passed"]
    parity, memory = report["checks"]  # in CHECKS order
    assert parity["status"] == "failed" and parity["error"]["message"] == "planted failure"
    assert any("in broken" in f for f in parity["error"]["frames"])
    assert memory["status"] == "passed"
    assert "planted failure" in (out / "gpu-check.md").read_text()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--device", "cpu", "--checks", "train-gpt"], "unknown check(s) ['train-gpt']; valid: environment"),
        (["--device", "cpu", "--threads", "0"], "--threads must be >= 1, got 0"),
    ],
)
def test_bad_arguments_name_the_value_and_the_choices(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_cuda_requested_without_a_gpu_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "use --device cpu" in capsys.readouterr().err


def test_relative_error_and_spearman_by_hand():
    import torch

    ref = torch.tensor([[3.0, 4.0, 0.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]])
    # ‖(3.3, 4, 0) − (3, 4, 0)‖ / ‖(3, 4, 0)‖ = 0.3 / 5 = 0.06; the padded 9 vs 0 is not counted
    got = torch.tensor([[3.3, 4.0, 0.0, 0.0]], dtype=torch.float64)
    assert relative_error(got, ref, mask) == pytest.approx(0.06)
    # ranks (1, 2, 0) vs (1, 2, 0): ρ = 1. Swapped (2, 1, 0): d = (1, 1, 0), ρ = 1 − 6·Σd²/(n(n²−1)) = 0.5
    assert spearman(got, ref, mask) == pytest.approx(1.0)
    swapped = torch.tensor([[4.0, 3.0, 0.0, 0.0]], dtype=torch.float64)
    assert spearman(swapped, ref, mask) == pytest.approx(0.5)


def test_all_zero_scores_fail_every_precision_limit():
    """Issue 36: the bf16 OAR-G limits once let all-zero scores pass (relative error exactly 1.0)."""
    import torch

    from oar_rl.gpu_check.scorers import PRECISION_LIMITS, _judge

    g = torch.Generator().manual_seed(0)
    ref = torch.rand(3, 12, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 12, dtype=torch.long)
    noisy = ref + 0.05 * torch.rand(3, 12, generator=g, dtype=torch.float64)  # a coarse but real ranking
    for key, limits in PRECISION_LIMITS.items():
        zero = _judge(torch.zeros_like(ref), ref, mask, limits)
        assert not zero["passed"] and "constant scores" in zero["why"], key
        assert not _judge(torch.full_like(ref, 0.5), ref, mask, limits)["passed"], key
    assert _judge(noisy, ref, mask, PRECISION_LIMITS[("oar-g", "bfloat16")])["passed"]
