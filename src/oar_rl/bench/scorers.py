"""Scorer-level part of `oar-rl bench`: importance cost on one fixed batch, OAR-G's and OAR-P's compute
floors, recall.

On a batch of the step's shape (rows = prompts × generations, prompt ``P`` and completion ``C`` random
tokens, all valid), each case below is timed ``repeats`` times, interleaved (A B C A B C …), after one
warm-up call of the cheap cases (:data:`WARMED`); the OAR-P cases are not warmed up separately (one
OAR-P call at L = 256 is hundreds of forward passes, and the cheap cases have warmed up the kernels):

- ``train fwd+bwd``: one training forward + backward of the batch (full logits, log-probs of the
  completion tokens, parameter gradients) -- what one GRPO loss pass costs.
- ``forward``: one no-grad body forward of the batch; its tokens/s is the model's forward throughput.
- ``oar-g``, ``oar-p`` (prefix reuse), ``oar-p-full`` (whole copies recomputed), ``oar-gp``.
- ``oar-p-span``: span-level OAR-P (:mod:`oar_rl.importance.span`), one masked copy per step, with
  prefix reuse. The batch is random tokens (no sentences or lines), so a step is a fixed run of
  ``span_tokens`` tokens (:func:`oar_rl.importance.span.fixed_length_steps`).
- ``oar-g floor: clean`` and ``oar-g floor: noisy``: OAR-G's compute floor in its two parts
  (:func:`oar_g_floor`): the clean probe pass (one no-grad forward of prompt + completion keeping the
  prompt's keys/values, the probe at the last position), and one noisy forward over the completion on
  that cached prompt plus the backward to the noisy input embeddings only, with every parameter's
  ``requires_grad`` off (so autograd cannot do any parameter work). No scorer that needs the clean probe
  and the gradient at a noisy point can do less; OAR-G / floor says how close the implementation is.
  ``oar-p-full`` costs the same per perturbed position, so ``full_stride`` k > 1 times it on every
  k-th completion position and scales the time by (all copies / timed copies).

Compute floor of exact OAR-P: the token-forwards it must do -- the clean rows once (Σ_rows L_b, L_b the
row's last probe position + 1) plus, per scored token t, the suffix it recomputes (L_b − (P + t)) --
divided by the measured forward throughput. measured/floor says how close the implementation is to
that floor; ``oar-p-full`` is set against the same floor (it does Σ L_b per token instead).

Recall: share of exact OAR-P's per-row top-20% tokens found in the top-20% of OAR-G, of OAR-GP and of
span-level OAR-P (:func:`oar_rl.importance.hybrid.topk_recall`; a span's tokens tie: the expected
figure under random tie-breaking).
On a random-initialised model this describes that random network only; the embedded model gives the
figure for a trained one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from oar_rl.importance import gradient_importance, hybrid_importance, perturbation_importance
from oar_rl.importance.gradient import row_noise, row_seeds
from oar_rl.importance.hybrid import topk_recall
from oar_rl.importance.prefix import clean_pass, suffix_hidden
from oar_rl.importance.span import fixed_length_steps, span_perturbation_scores
from oar_rl.model_parts import base_model, body_hidden, decoder_body
from oar_rl.probes import ProbeSpec, build_probe_spec, outcome_divergence, prepare_batch, probe_outcome

CASES = (
    "train fwd+bwd",
    "forward",
    "oar-g",
    "oar-g floor: clean",
    "oar-g floor: noisy",
    "oar-p",
    "oar-p-full",
    "oar-gp",
    "oar-p-span",
)
WARMED = ("train fwd+bwd", "forward", "oar-g", "oar-g floor: clean", "oar-g floor: noisy")


def random_batch(vocab: int, rows: int, prompt_len: int, completion_len: int, seed: int, device) -> list:
    g = torch.Generator().manual_seed(seed)
    low = min(4, vocab - 1)
    p_ids = torch.randint(low, vocab, (rows, prompt_len), generator=g)
    c_ids = torch.randint(low, vocab, (rows, completion_len), generator=g)
    ones = torch.ones
    return [
        t.to(device)
        for t in (
            p_ids,
            ones(rows, prompt_len, dtype=torch.long),
            c_ids,
            ones(rows, completion_len, dtype=torch.long),
        )
    ]


def oarp_token_forwards(model, batch: list) -> dict[str, int]:
    """Token-forwards of exact OAR-P (LT-Logits) with prefix reuse (the floor) and with whole copies."""
    sb = prepare_batch(model, *batch)
    P = sb.prompt_len
    spec = build_probe_spec(P, sb.attention_mask, sb.input_ids[:, P:], None, "lt-logits")
    end = spec.index.cpu() + 1  # (B,) one probe position per row
    pairs = sb.completion_mask.cpu().nonzero()  # (R, 2)
    clean = int(end.sum())
    suffix = int((end[pairs[:, 0]] - (P + pairs[:, 1])).sum())
    return {"clean": clean, "floor": clean + suffix, "full": clean + int(end[pairs[:, 0]].sum())}


def oar_g_floor(model, batch: list, noise_std: float, seed: int = 0) -> tuple[Callable, Callable]:
    """OAR-G's compute floor (LT-Logits, one draw) on `batch`, as two callables to time in this order.

    ``clean()``: the clean probe pass -- a no-grad forward of prompt + completion that keeps the prompt's
    keys/values, and the probe at each row's last position. ``noisy()``: a forward over the completion
    embeddings plus Gaussian noise, on top of the cached prompt, and the gradient of Σ KL(P_0 ‖ P_ε)
    with respect to those noisy embeddings only, with every parameter's ``requires_grad`` off for the
    pass (restored after). Returns the (B, C, H) gradient. The noise is OAR-G's for a generator seeded
    with `seed`, so on an all-valid batch |⟨gradient, clean embedding⟩| is
    ``gradient_importance(..., generator=torch.Generator().manual_seed(seed))``. Where the model's cache
    cannot be reused the noisy pass runs over the whole sequence, as OAR-G does then.
    """
    sb = prepare_batch(model, *batch)
    P = sb.prompt_len
    spec = build_probe_spec(P, sb.attention_mask, sb.input_ids[:, P:], None, "lt-logits")
    embed = base_model(model).get_input_embeddings()
    state: dict[str, Any] = {}

    def clean() -> None:
        with torch.no_grad():
            emb = embed(sb.input_ids)  # (B, L, H)
            hidden, cache = clean_pass(model, sb.attention_mask, inputs_embeds=emb)
            state.update(emb=emb, cache=cache, clean=probe_outcome(model, hidden, spec))

    def noisy() -> torch.Tensor:
        emb, cache = state["emb"], state["cache"]
        B, C, H = emb[:, P:].shape
        seeds = row_seeds(torch.Generator().manual_seed(seed), B)  # OAR-G's own noise for this seed
        eps = torch.cat([row_noise(s, 1, C, H) for s in seeds]).to(emb.device)  # (B, C, H)
        x = (emb[:, P:].float() + noise_std * eps).requires_grad_(True)  # (B, C, H) leaf
        live = [p for p in model.parameters() if p.requires_grad]
        for p in live:
            p.requires_grad_(False)
        try:
            with torch.enable_grad():
                if cache is not None:
                    rows = torch.arange(x.shape[0], device=x.device)
                    hidden = suffix_hidden(model, cache, rows, P, sb.attention_mask, inputs_embeds=x.to(emb))
                    shifted = ProbeSpec(spec.kind, spec.row_ptr, spec.index - P, spec.target)
                    pert = probe_outcome(model, hidden, shifted)
                else:
                    full = torch.cat([emb[:, :P], x.to(emb)], dim=1)
                    pert = probe_outcome(
                        model, body_hidden(model, sb.attention_mask, inputs_embeds=full), spec
                    )
                J = outcome_divergence(state["clean"], pert, spec.kind, mode="gradient").sum()
                (grad,) = torch.autograd.grad(J, x)
        finally:
            for p in live:
                p.requires_grad_(True)
        return grad

    return clean, noisy


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run_scorers(
    model: torch.nn.Module,
    batch: list,
    *,
    repeats: int,
    noise_std: float,
    fraction: float,
    copies: int,
    full_stride: int = 1,
    span_tokens: int = 16,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Interleaved timings of :data:`CASES` on `batch`, the OAR-G and OAR-P floors and the recall figures."""
    device = batch[0].device
    ids, attn = torch.cat([batch[0], batch[2]], 1), torch.cat([batch[1], batch[3]], 1)
    C = batch[2].shape[1]

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, -C - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, batch[2][..., None]).squeeze(-1)
        (logp * batch[3]).sum().backward()

    def forward():
        with torch.no_grad():
            decoder_body(model)(input_ids=ids, attention_mask=attn, use_cache=False)

    def oar_g():
        return gradient_importance(
            model, *batch, noise_std=noise_std, generator=torch.Generator().manual_seed(0)
        )

    def oar_p(reuse=True):
        return perturbation_importance(model, *batch, batch_size=copies, prefix_reuse=reuse)

    # Whole-copy OAR-P costs the same for every perturbed position (each copy runs to its row's last
    # probe), so with full_stride k it is timed on every k-th position and scaled by the copy count.
    sample = (torch.arange(C, device=device) % full_stride == 0).expand_as(batch[3]) & batch[3].bool()
    full_scale = float(batch[3].sum()) / float(sample.sum())

    def oar_p_full():
        kw = {} if full_stride == 1 else {"positions": sample}
        return perturbation_importance(model, *batch, batch_size=copies, prefix_reuse=False, **kw)

    def oar_gp():
        return hybrid_importance(
            model,
            *batch,
            fraction=fraction,
            gradient_kwargs=dict(noise_std=noise_std, generator=torch.Generator().manual_seed(0)),
            perturbation_kwargs=dict(batch_size=copies),
        )

    span_batch = prepare_batch(model, *batch)
    span_steps = fixed_length_steps(span_batch.completion_mask, span_tokens)

    def oar_p_span():
        return span_perturbation_scores(model, span_batch, steps=span_steps, batch_size=copies)

    floor_clean, floor_noisy = oar_g_floor(model, batch, noise_std)
    cases: dict[str, Callable[[], Any]] = {
        "train fwd+bwd": fwd_bwd,
        "forward": forward,
        "oar-g": oar_g,
        "oar-g floor: clean": floor_clean,
        "oar-g floor: noisy": floor_noisy,
        "oar-p": oar_p,
        "oar-p-full": oar_p_full,
        "oar-gp": oar_gp,
        "oar-p-span": oar_p_span,
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    outputs: dict[str, Any] = {}
    was_training = model.training
    model.eval()
    try:
        for r in range(repeats + 1):  # round 0 is warm-up (cheap cases only)
            for name, fn in cases.items():
                if r == 0 and name not in WARMED:
                    continue
                if progress:
                    progress(f"scorers {name} ({'warm-up' if r == 0 else f'repeat {r}/{repeats}'})")
                _sync(device)
                t0 = time.perf_counter()
                out = fn()
                _sync(device)
                if r:
                    scale = full_scale if name == "oar-p-full" else 1.0
                    times[name].append((time.perf_counter() - t0) * scale)
                if (
                    isinstance(out, torch.Tensor)
                    and name in ("oar-g", "oar-p", "oar-gp", "oar-p-span")
                    and name not in outputs
                ):
                    outputs[name] = out.float().cpu()
        model.zero_grad(set_to_none=True)
    finally:
        model.train(was_training)
    med = {k: statistics.median(v) for k, v in times.items()}
    tf = oarp_token_forwards(model, batch)
    throughput = int(ids.numel()) / med["forward"]  # tokens per second, no-grad body forward
    floor_s = tf["floor"] / throughput
    mask = batch[3].bool().cpu()
    g_floor = med["oar-g floor: clean"] + med["oar-g floor: noisy"]
    return {
        "rows": int(ids.shape[0]),
        "prompt_len": int(batch[0].shape[1]),
        "completion_len": C,
        "seconds": {k: {"median": med[k], "min": min(v), "max": max(v), "all": v} for k, v in times.items()},
        "forward_tokens_per_second": throughput,
        "oar_p_token_forwards": tf,
        "oar_p_floor_seconds": floor_s,
        "oar_p_measured_over_floor": med["oar-p"] / floor_s,
        "oar_p_full_measured_over_floor": med["oar-p-full"] / floor_s,
        "prefix_speedup": med["oar-p-full"] / med["oar-p"],
        "oar_g_over_train_fwd_bwd": med["oar-g"] / med["train fwd+bwd"],
        "oar_g_floor_seconds": g_floor,
        "oar_g_over_floor": med["oar-g"] / g_floor,
        "oar_g_floor_over_train_fwd_bwd": g_floor / med["train fwd+bwd"],
        "oar_gp_fraction": fraction,
        "oar_p_full_stride": full_stride,
        "span_tokens": span_tokens,
        "oar_p_span_over_oar_p": med["oar-p-span"] / med["oar-p"],
        "recall_top20_of_oar_p": {
            "oar-g": topk_recall(outputs["oar-g"], outputs["oar-p"], mask, 0.2),
            "oar-gp": topk_recall(outputs["oar-gp"], outputs["oar-p"], mask, 0.2),
            "oar-p-span": topk_recall(outputs["oar-p-span"], outputs["oar-p"], mask, 0.2),
        },
    }


def scorer_lines(s: dict[str, Any]) -> list[str]:
    """Markdown lines for the scorer-level results."""
    sec = s["seconds"]
    base = sec["train fwd+bwd"]["median"]
    lines = [
        f"Scorers on one batch of {s['rows']} rows × ({s['prompt_len']} + {s['completion_len']}) tokens "
        "(median [min–max] of the repeats):",
        "",
        "| case | seconds | × train fwd+bwd |",
        "|---|---:|---:|",
    ]
    for name, v in sec.items():
        lines.append(
            f"| {name} | {v['median']:.3f} [{v['min']:.3f}–{v['max']:.3f}] | {v['median'] / base:.2f} |"
        )
    tf = s["oar_p_token_forwards"]
    rec = s["recall_top20_of_oar_p"]
    lines += [
        "",
        f"- forward throughput: {s['forward_tokens_per_second']:,.0f} tokens/s",
        f"- exact OAR-P token-forwards: {tf['floor']:,} with prefix reuse (clean {tf['clean']:,}), "
        f"{tf['full']:,} recomputing whole copies"
        + (
            f" (timed on every {s['oar_p_full_stride']}th position, scaled)"
            if s["oar_p_full_stride"] > 1
            else ""
        ),
        f"- OAR-P compute floor {s['oar_p_floor_seconds']:.3f} s; measured/floor: prefix reuse "
        f"{s['oar_p_measured_over_floor']:.2f}, whole copies {s['oar_p_full_measured_over_floor']:.2f}; "
        f"prefix reuse speed-up {s['prefix_speedup']:.2f}×",
        f"- OAR-G importance / train fwd+bwd: {s['oar_g_over_train_fwd_bwd']:.2f}; OAR-G compute floor "
        f"{s['oar_g_floor_seconds']:.3f} s (clean probe pass {sec['oar-g floor: clean']['median']:.3f} s "
        f"+ noisy forward and input-only backward over the completion "
        f"{sec['oar-g floor: noisy']['median']:.3f} s) = {s['oar_g_floor_over_train_fwd_bwd']:.2f}× train "
        f"fwd+bwd; OAR-G / floor {s['oar_g_over_floor']:.2f}",
        f"- recall of exact OAR-P's top-20% tokens: OAR-G {rec['oar-g']:.2f}, "
        f"OAR-GP (fraction {s['oar_gp_fraction']:g}) {rec['oar-gp']:.2f}"
        + (
            f", span-level OAR-P (steps of {s['span_tokens']} tokens) {rec['oar-p-span']:.2f}; span-level "
            f"OAR-P / exact OAR-P time {s['oar_p_span_over_oar_p']:.3f}"
            if "oar-p-span" in rec
            else ""
        ),
    ]
    return lines
