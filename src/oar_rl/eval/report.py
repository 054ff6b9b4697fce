"""`oar-rl eval`'s results.md: the paper's Table 1 shape (a P@k column per benchmark and k, then Avg) and
the settings line, from the results dict of :func:`oar_rl.eval.evaluation.summarise`."""

from __future__ import annotations

from typing import Any


def _template_text(cfg: dict[str, Any], benchmarks: dict[str, Any]) -> str:
    """The prompt template as applied: task benchmarks are in their own format (results of earlier
    versions record no per-benchmark template and show the configured one)."""
    own = [k for k, b in benchmarks.items() if "template" in b and b["template"] is None]
    if not own:
        return str(cfg["template"])
    if len(own) == len(benchmarks):
        return "none (task benchmarks, in their own format)"
    return f"{cfg['template']} (not {', '.join(own)}: task benchmarks, in their own format)"


def results_markdown(results: dict[str, Any]) -> str:
    """A Table-1-shaped markdown table: one P@k column per benchmark and k, then Avg (percent)."""
    cfg = results["config"]
    ks = cfg["k"]
    keys = list(results["benchmarks"])
    head = ["Method", *[f"{key} P@{k}" for key in keys for k in ks], "Avg"]

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.1f}"

    from oar_rl.fetch import display_model_name

    row = [display_model_name(cfg["model"])]
    row += [pct(results["benchmarks"][key][f"pass@{k}"]) for key in keys for k in ks]
    row.append(pct(results["avg"]))
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|",
        "| " + " | ".join(row) + " |",
        "",
        f"Unbiased pass@k (Chen et al., 2021) in percent; n={cfg['n']} samples per problem, "
        f"temperature={cfg['temperature']}, top_p={cfg['top_p']}, max_new_tokens={cfg['max_new_tokens']}, "
        f"template={_template_text(cfg, results['benchmarks'])}, seed={cfg['seed']}. Avg = mean of the P@k "
        "cells.",
        "",
        "| benchmark | problems | scored |",
        "|---|---:|---:|",
        *[f"| {key} | {b['num_problems']} | {b['num_scored']} |" for key, b in results["benchmarks"].items()],
    ]
    return "\n".join(lines) + "\n"
