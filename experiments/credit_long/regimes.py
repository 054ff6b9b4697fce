"""Short regime vs long regime: does each credit rule's paired gap to GRPO grow with the chain length?

The prediction under test in results/credit-long/PREREGISTRATION.md ("Prediction under test"): for each
rule screened in both regimes, its long-regime gap minus its short-regime gap, each the mean of its 5
paired differences to GRPO on the validation split. The two regimes' seeds are unrelated (2000-2004 and
3000-3004), so the difference is unpaired: a Welch 95% interval (`oar_rl.study.stats.welch_difference`).
Verdict, as pre-registered: **supported** if the interval lies above 0 for OAR-G or for first-error and
below 0 for no rule; **refuted** if it lies below 0 for both OAR-G and first-error; otherwise **not
decided** at this power.

    python -m experiments.credit_long.regimes   # reads both screens' committed run files
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

RULES = ("oar-g", "first-error", "position", "oar-p-span", "entropy-80-20", "entropy", "random")
"""The rules screened in both regimes (the pre-registration's list), in its order."""
DECIDING = ("oar-g", "first-error")


def cross_regime(
    short: dict[str, dict[int, dict[str, Any]]],
    long: dict[str, dict[int, dict[str, Any]]],
    rules: tuple[str, ...] = RULES,
    seeds: int = 5,
) -> dict[str, Any]:
    """One row per rule (its gaps in each regime, their means and the Welch interval of long − short) and
    the pre-registered verdict, which stays "incomplete" until every rule has `seeds` gaps in both."""
    from oar_rl.study.screen import gaps
    from oar_rl.study.stats import mean_ci, welch_difference

    rows, complete = [], True
    for rule in rules:
        gs, gl = gaps(short, rule, "grpo"), gaps(long, rule, "grpo")
        row: dict[str, Any] = {
            "rule": rule,
            "short": mean_ci(list(gs.values())) | {"seeds": sorted(gs)},
            "long": mean_ci(list(gl.values())) | {"seeds": sorted(gl)},
            "growth": welch_difference(list(gl.values()), list(gs.values()))
            if min(len(gs), len(gl)) >= 2
            else None,
        }
        complete &= len(gs) >= seeds and len(gl) >= seeds
        rows.append(row)
    return {"rows": rows, "verdict": verdict(rows) if complete else "incomplete"}


def _side(row: dict[str, Any]) -> int:
    """+1 if the row's growth interval lies above 0, -1 if below, 0 otherwise (or no interval)."""
    g = row["growth"]
    if not g or g["low"] is None:
        return 0
    return 1 if g["low"] > 0 else -1 if g["high"] < 0 else 0


def verdict(rows: list[dict[str, Any]]) -> str:
    """The pre-registration's rule: "supported", "refuted" or "not decided"."""
    side = {r["rule"]: _side(r) for r in rows}
    if any(side.get(r) == 1 for r in DECIDING) and not any(v == -1 for v in side.values()):
        return "supported"
    if all(side.get(r) == -1 for r in DECIDING):
        return "refuted"
    return "not decided"


def ci_text(c: dict[str, Any] | None) -> str:
    """A mean with its interval, "+1.2 (-0.3, +2.7)" (a bound next to 0: "+0.05"); "–" for none."""
    from oar_rl.study.screen_report import fmt_ci

    return fmt_ci(c, signed=True)


def markdown(result: dict[str, Any]) -> str:
    """The table: per rule, its mean gap to GRPO in each regime and the Welch interval of long − short."""
    v = result["verdict"]
    head = (
        "# Do the rules' gaps to GRPO grow from the short regime to the long one?\n\n"
        "Per rule, the mean of its per-seed paired differences to GRPO on each regime's validation split "
        "(percentage points; t-interval over seeds), and long − short with a Welch 95% interval (the "
        "regimes' seeds are unrelated). The prediction under test (results/credit-long/"
        "PREREGISTRATION.md): **supported** if long − short lies above 0 for oar-g or first-error and below "
        "0 for no rule; **refuted** if below 0 for both. "
    )
    head += (
        f"**Verdict: {v}.**\n\n"
        if v != "incomplete"
        else "**No verdict yet: the screens are not complete** (seeds per regime in the table).\n\n"
    )
    lines = [
        "| rule | short: seeds | short: Δ vs GRPO | long: seeds | long: Δ vs GRPO "
        "| long − short (Welch 95% CI) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        short, long = (f"{len(r[g]['seeds'])} | {ci_text(r[g])}" for g in ("short", "long"))
        lines.append(f"| {r['rule']} | {short} | {long} | {ci_text(r['growth'])} |")
    return head + "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Each rule's mean gap to GRPO (t-interval) in the two regimes, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from oar_rl.io import savefig_atomic

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(8, 4))
    series = (
        ("short", -0.15, "tab:blue", "short regime (2-3 events)"),
        ("long", 0.15, "tab:red", "long regime (6-8)"),
    )
    for regime, dx, color, label in series:
        xs, ys, lo, hi = [], [], [], []
        for i, r in enumerate(rows):
            c = r[regime]
            if c.get("mean") is None:
                continue
            xs.append(i + dx)
            ys.append(c["mean"])
            lo.append(c["mean"] - (c["low"] if c.get("low") is not None else c["mean"]))
            hi.append((c["high"] if c.get("high") is not None else c["mean"]) - c["mean"])
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", color=color, capsize=3, label=label)
    ax.axhline(0, color="grey", lw=0.8)
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, -100), min(high, 100))  # a difference of two accuracies lies in [-100, 100]
    ax.set_xticks(range(len(rows)), [r["rule"] for r in rows], rotation=20)
    ax.set_ylabel("Δ accuracy vs GRPO (points)")
    ax.set_title(f"Paired gap to GRPO by regime (verdict: {result['verdict']})")
    ax.legend()
    fig.tight_layout()
    savefig_atomic(fig, path)
    plt.close(fig)


def folder_args(argv: list[str] | None, module: str, doc: str, writes: str):
    """The command line of a module of this experiment that reads both regimes' folders."""
    import argparse

    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog=f"python -m experiments.credit_long.{module}",
        description=doc.split("\n\n")[0],
    )
    p.add_argument("--short", default="results/credit-screen", help="the short regime's folder")
    p.add_argument("--long", default="results/credit-long", help="the long regime's folder")
    p.add_argument("--out", default="results/credit-long", help=f"where {writes} go")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Write regimes.json, regimes.md and regimes.png under `--out` from the two screens' run files."""
    import json

    from experiments.credit_long.plan import CREDIT_LONG
    from experiments.credit_screen.plan import CREDIT_SCREEN
    from oar_rl.io import ensure_writable_dir, write_text_atomic
    from oar_rl.study.screen import load_runs

    a = folder_args(argv, "regimes", __doc__, "regimes.{json,md,png}")
    result = cross_regime(
        load_runs(Path(a.short), "screen", CREDIT_SCREEN), load_runs(Path(a.long), "screen", CREDIT_LONG)
    )
    out = ensure_writable_dir(a.out)
    write_text_atomic(out / "regimes.json", json.dumps(result, indent=2) + "\n")
    write_text_atomic(out / "regimes.md", markdown(result))
    plot(result, out / "regimes.png")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
