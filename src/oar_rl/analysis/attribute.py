"""`oar-rl attribute`: token-importance heatmaps of reasoning traces, one row per scorer.

Shared helpers for the analysis commands live here too: loading a model (a directory or the embedded
default), sampling trajectories with their token ids, batching them in TRL's layout (left-padded
prompts, right-padded completions) and scoring them with every importance method.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from oar_rl.io import ensure_writable_dir, resolve_model, write_text_atomic

METHODS = ("oar-p", "oar-g", "entropy", "random", "grail")
DEFAULT_METHODS = ("oar-p", "oar-g", "entropy", "random")  # "grail" on request (--methods ...,grail)
PROBES = ("lt-logits", "as-mean", "as-joint")


@dataclass
class Trajectory:
    """One sampled (or given) trace: unpadded ids and texts."""

    prompt: str
    completion: str
    answer: str
    prompt_ids: torch.Tensor  # (P,)
    completion_ids: torch.Tensor  # (T,)


def load_model(spec: str):
    """(model in eval mode, tokenizer) from a directory, or the embedded default model for 'default'."""
    spec = resolve_model(spec)
    if not Path(spec).is_dir():
        raise ValueError(f"--model {spec!r} is not a directory; pass a saved model dir or 'default'")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec)
    model = AutoModelForCausalLM.from_pretrained(spec)
    return model.eval(), tok


def parse_list(value: str, valid: tuple[str, ...], flag: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in valid]
    if bad or not items:
        raise ValueError(f"{flag}: unknown value(s) {bad or value!r}; valid: {', '.join(valid)}")
    return items


@torch.no_grad()
def sample_trajectories(
    model, tokenizer, prompts: list[str], answers: list[str], **kwargs
) -> list[Trajectory]:
    """One sampled completion per prompt, keeping the generated ids; keyword arguments as
    `oar_rl.tiny.sample_ids` (temperature, max_new_tokens, batch_size, seed, progress)."""
    from oar_rl.tiny import sample_ids

    pairs = sample_ids(model, tokenizer, prompts, **kwargs)
    return [
        Trajectory(prompt, tokenizer.decode(c_ids), answer, p_ids, c_ids)
        for prompt, answer, (p_ids, c_ids) in zip(prompts, answers, pairs, strict=True)
    ]


def batch_layout(trajs: list[Trajectory], pad_id: int):
    """TRL layout: (prompt_ids, prompt_mask) left-padded (B, P); (completion_ids, completion_mask)
    right-padded (B, C)."""
    p_len = max(t.prompt_ids.numel() for t in trajs)
    c_len = max(max(t.completion_ids.numel() for t in trajs), 1)
    b = len(trajs)
    prompt_ids = torch.full((b, p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, p_len), dtype=torch.long)
    completion_ids = torch.full((b, c_len), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((b, c_len), dtype=torch.long)
    for i, t in enumerate(trajs):
        n, m = t.prompt_ids.numel(), t.completion_ids.numel()
        prompt_ids[i, p_len - n :] = t.prompt_ids
        prompt_mask[i, p_len - n :] = 1
        completion_ids[i, :m] = t.completion_ids
        completion_mask[i, :m] = 1
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def method_scores(
    model,
    tokenizer,
    trajs: list[Trajectory],
    methods: list[str],
    *,
    probe: str = "lt-logits",
    seed: int = 0,
    answer_pattern: str | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Normalised importance (Eq. 14) of every method, and the (B, C) mask of the *reasoning* tokens.

    Reasoning tokens are the completion tokens before the answer span (all of them in a row without a
    span): the tokens credit assignment is about. Answer-span probes score only those; every method's
    scores are normalised over them, so rankings are comparable across methods.
    """
    from oar_rl.importance import compute_importance
    from oar_rl.probes import answer_span_mask, scored_positions
    from oar_rl.reshape import normalize_importance

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = batch_layout(trajs, pad)
    answer_mask = answer_span_mask(batch[2], batch[3], tokenizer, pattern=answer_pattern)
    reasoning = scored_positions(batch[3], answer_mask) & batch[3].bool()  # (B, C)
    out = {}
    for method in methods:
        kwargs: dict = {}
        if method in ("oar-g", "oar-p"):
            kwargs = {"probe": probe, "answer_mask": answer_mask if probe != "lt-logits" else None}
        if method in ("oar-g", "random"):
            kwargs["generator"] = torch.Generator().manual_seed(seed)
        if method == "grail":  # saliency of the answer span's NLL; rows without a span score 0
            kwargs = {"answer_mask": answer_mask}
        raw = compute_importance(method, model, *batch, **kwargs)
        out[method] = normalize_importance(raw.float(), reasoning)
    return out, reasoning


def heatmap_page(
    trajs: list[Trajectory],
    tokenizer,
    rows: dict[str, torch.Tensor],
    title: str,
    scored: torch.Tensor | None = None,
) -> str:
    """A self-contained HTML page: per trajectory, one coloured row per method (and the oracle if given).

    `scored` (B, C) marks the tokens that were scored (the reasoning tokens); the others (the answer span,
    padding) are drawn grey as "not scored", never as a white score of 0.
    """
    from oar_rl.analysis.heatmap import heatmap_html

    caption = (
        "Each character's background shows its normalised importance Î (Eq. 14) over the reasoning "
        "tokens; hover for the value. Grey characters (the answer span) are not scored."
    )
    if "oracle" in rows:
        caption += " The oracle row marks causal pivots (Eq. 19) in full colour."
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>" + title + "</title>",
        "<style>body{font-family:sans-serif;margin:2em} table.oar-heatmap{border-collapse:collapse;"
        "margin-bottom:1.5em} th{text-align:right;padding:2px 8px;vertical-align:top;white-space:nowrap}"
        " td code{font-size:14px;line-height:1.7}</style></head><body>",
        f"<h1>{title}</h1><p>{caption}</p>",
    ]
    for i, t in enumerate(trajs):
        n = t.completion_ids.numel()
        pieces = [tokenizer.decode([int(x)]) for x in t.completion_ids]
        keep = [True] * n if scored is None else [bool(v) for v in scored[i, :n].tolist()]
        heat = [
            (
                name,
                pieces,
                [float(v) if k else None for v, k in zip(scores[i, :n].tolist(), keep, strict=True)],
            )
            for name, scores in rows.items()
        ]
        parts.append(heatmap_html(t.prompt, heat))
    parts.append("</body></html>")
    return "\n".join(parts)


def add_scoring_arguments(p: argparse.ArgumentParser) -> None:
    """The options every analysis command shares: model, methods, probe, sampling length, seed."""
    from oar_rl.argparsing import add

    add(p, "--model", default="default", help="model directory, or 'default' (embedded model)")
    add(p, "--methods", default=",".join(DEFAULT_METHODS), help=f"comma-separated of {', '.join(METHODS)}")
    add(
        p,
        "--probe",
        default="as-mean",
        choices=PROBES,
        help="outcome probe of oar-p/oar-g; as-mean because on the arithmetic task every completion ends in "
        "the fixed text '</answer>', which leaves lt-logits almost no signal",
    )
    add(p, "--max-new-tokens", type=int, default=96, help="longest sampled completion, in tokens")
    add(p, "--seed", type=int, default=0, help="sampling and scoring seed")


def main(argv: list[str] | None = None) -> int:
    from oar_rl.argparsing import add, new_parser

    p = new_parser("oar-rl attribute", __doc__.split("\n\n")[0])
    add_scoring_arguments(p)
    add(p, "--prompt", help="prompt text; with --completion scores that trace, else one is sampled")
    add(p, "--completion", help="completion text to score (needs --prompt)")
    add(p, "--n", type=int, default=3, help="traces sampled from the arithmetic eval split (no --prompt)")
    add(p, "--out", default="attribute_out", help="directory for heatmaps.html")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        methods = parse_list(a.methods, METHODS, "--methods")
        if a.completion is not None and a.prompt is None:
            raise ValueError("--completion needs --prompt")
        if a.n < 1:
            raise ValueError(f"--n must be >= 1, got {a.n}")
        out = ensure_writable_dir(a.out)
        model, tok = load_model(a.model)
    except ValueError as exc:
        print(f"oar-rl attribute: {exc}", file=sys.stderr)
        return 2
    if a.prompt is not None and a.completion is not None:
        p_ids = torch.tensor(tok(a.prompt, add_special_tokens=False)["input_ids"])
        c_ids = torch.tensor(tok(a.completion, add_special_tokens=False)["input_ids"])
        trajs = [Trajectory(a.prompt, a.completion, "", p_ids, c_ids)]
    else:
        from oar_rl.data.arithmetic import load

        if a.prompt is not None:
            prompts, answers = [a.prompt], [""]
        else:
            ds = load("eval").select(range(a.n))
            prompts, answers = list(ds["prompt"]), list(ds["answer"])
        trajs = sample_trajectories(
            model, tok, prompts, answers, max_new_tokens=a.max_new_tokens, seed=a.seed
        )
    trajs = [t for t in trajs if t.completion_ids.numel() > 0]
    if not trajs:
        print("oar-rl attribute: every completion is empty; nothing to score", file=sys.stderr)
        return 1
    scores, reasoning = method_scores(model, tok, trajs, methods, probe=a.probe, seed=a.seed)
    page = heatmap_page(trajs, tok, scores, "oar-rl token importance", scored=reasoning)
    write_text_atomic(out / "heatmaps.html", page)
    print(f"[attribute] wrote {out / 'heatmaps.html'} ({len(trajs)} traces × {len(methods)} methods)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
