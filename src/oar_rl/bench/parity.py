"""`oar-rl bench`'s generation parity check: generation is the same work in every credit mode with the
same engine, so a mode whose generation time differs is measuring something else (see
:mod:`oar_rl.bench.cli`)."""

from __future__ import annotations

from typing import Any

from oar_rl.bench.steps import METHOD_CONFIG

GENERATION_TOLERANCE = 0.10  # a mode's median generation s/token may differ from GRPO's by this share
VLLM_REFERENCE = "grpo-vllm"  # the reference of the modes that generate with vLLM


def generation_parity(summary: dict[str, dict], tolerance: float = GENERATION_TOLERANCE) -> dict[str, Any]:
    """Flag every mode whose median generation s/token differs from its engine's GRPO by more than
    `tolerance`.

    Generation is the same code on the same weights for every mode with the same engine, so a difference
    is the harness or the machine, not the credit mode; the step figures of a flagged mode are then not its
    cost. A ratio that cannot be taken (GRPO's generation time is 0) is flagged too. Modes generating with
    vLLM (``grpo-vllm``, ``oar-g-vllm``) are compared with ``grpo-vllm`` where it runs, and not otherwise:
    their difference from ``none`` is the engine's, which the table reports.
    """
    ratios = {m: s.get("generation_ratio_vs_grpo") for m, s in summary.items()}
    flagged = []
    for method, ratio in ratios.items():
        reference = VLLM_REFERENCE if METHOD_CONFIG.get(method, {}).get("use_vllm") else "none"
        if reference not in ratios:  # a vLLM mode without grpo-vllm: nothing of its engine to match
            continue
        base = ratios[reference]
        if ratio is None or not base:
            flagged.append(method)  # no ratio can be taken: flagged, never silently passed
        elif method != reference and abs(ratio / base - 1.0) > tolerance:
            flagged.append(method)
    return {"tolerance": tolerance, "ratios": ratios, "flagged": flagged, "ok": not flagged}


def parity_lines(parity: dict[str, Any]) -> list[str]:
    tol = f"{100 * parity['tolerance']:.0f}%"
    ratios = ", ".join(f"{m} {'n/a' if r is None else f'{r:.2f}×'}" for m, r in parity["ratios"].items())
    if parity["ok"]:
        return [
            f"Generation parity: OK -- every mode's median generation time per token is within {tol} "
            f"of its engine's GRPO's (none; grpo-vllm for the vLLM modes); × GRPO: {ratios}."
        ]
    return [
        f"**Generation parity: FAILED** -- median generation time per token differs from GRPO's by more "
        f"than {tol} for {', '.join(parity['flagged'])} ({ratios}). Generation is the same work in every "
        "mode, so those modes' step figures include something other than their credit cost; use the "
        "update-sweep columns, and rerun on an idle machine."
    ]
