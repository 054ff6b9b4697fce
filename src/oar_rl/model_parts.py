"""A causal LM's parts as the scorers use them: body, LM head, positions, device and eval mode.

- Positions: every sequence is run at the positions it was generated with, counted from its first
  real token (``cumsum(attention_mask) - 1``, as ``generate`` does), so a row's scores do not depend
  on how much left padding its batch neighbours forced on it. For rotary models this is the default
  ``arange`` shifted per row, which attention does not see; for absolute-position models (GPT-2) it is
  the difference between right and wrong. (TRL's own log-prob pass passes no positions; for rotary
  models that is the same thing.)
- Logits: the LM head is applied only at probe positions (never [copies, L, V] logits), followed by the
  model's own logit post-processing: Granite's ``logits_scaling``, Cohere's ``logit_scale``, Gemma's
  final soft-capping. Once per model, :func:`verify_head` checks body + head against a plain
  ``model(input_ids)`` forward and refuses, naming the architecture, if they differ: a model that
  post-processes its logits some other way gets a clear error, never a silently wrong P_final.
- AS-Mean averages hidden states before the head when the head is affine (an ``nn.Linear``, a scalar
  logit scale, no soft-capping): mean(c(W h + b)) = c(W mean(h) + b) exactly; otherwise the logits are
  computed per position and averaged.
- Precision: probe math runs in float32, or float64 when the model is float64 (exact tests).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


def base_model(model: nn.Module) -> nn.Module:
    """The underlying ``PreTrainedModel`` (unwraps PEFT's ``get_base_model()`` when present)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decoder_body(model: nn.Module) -> nn.Module:
    """The transformer body (embeddings -> final norm) that yields last hidden states.

    Works for plain causal LMs (``get_decoder()`` or ``.model``) and PEFT-wrapped ones (LoRA layers are
    injected into the body's modules, so calling the body still applies them).
    """
    base = base_model(model)
    get_decoder = getattr(base, "get_decoder", None)
    body = get_decoder() if callable(get_decoder) else None
    if body is None:
        body = getattr(base, "model", None)
    if not isinstance(body, nn.Module):
        raise ValueError(
            f"cannot find the transformer body of {type(model).__name__}: "
            "it has neither get_decoder() nor .model"
        )
    return body


def lm_head(model: nn.Module) -> nn.Module:
    """The output embedding (LM head) of `model`."""
    head = base_model(model).get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings (LM head)")
    return head


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """(N, L) positions counted from each row's first real token, as ``generate`` counts them.

    ``cumsum(attention_mask) - 1``, clamped at 0 on the left padding (padding positions are never
    attended to, so their value does not matter). For rotary models this equals the default
    ``arange`` up to a per-row shift that attention does not see; for absolute-position models (GPT-2)
    it is what makes a row's scores independent of how much left padding its batch needed.
    """
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def body_hidden(
    model: nn.Module,
    attention_mask: Tensor,
    *,
    input_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
) -> Tensor:
    """Last hidden states (N, L, H) of the body, at the positions the completion was generated with."""
    body = decoder_body(model)
    kwargs = {"input_ids": input_ids} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
    try:
        out = body(
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
            **kwargs,
        )
    except TypeError as err:
        if "position_ids" not in str(err):
            raise
        raise ValueError(
            f"the body of {architecture_name(model)} takes no position_ids, so oar-rl cannot run it at "
            "the positions the completion was generated with"
        ) from err
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _logit_transform(model: nn.Module) -> tuple[float, float | None]:
    """(scale, soft cap) the model applies after its LM head, from the config fields transformers uses.

    Granite divides by ``logits_scaling``, Cohere multiplies by ``logit_scale``, Gemma 2/3 soft-cap by
    ``final_logit_softcapping``. :func:`verify_head` checks the result against the model's own forward.
    """
    config = getattr(base_model(model), "config", None)
    scale = 1.0
    div = getattr(config, "logits_scaling", None)
    if div:
        scale /= float(div)
    mul = getattr(config, "logit_scale", None)
    if mul:
        scale *= float(mul)
    cap = getattr(config, "final_logit_softcapping", None)
    return scale, float(cap) if cap else None


def head_logits(model: nn.Module, hidden: Tensor) -> Tensor:
    """(..., V) logits from hidden states, in float32 (float64 for a float64 model).

    Applies the output embedding, then the model's logit scaling and final-logit soft-capping (see
    :func:`_logit_transform`); :func:`verify_head` checks it reproduces the model's own logits.
    """
    logits = lm_head(model)(hidden)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    scale, cap = _logit_transform(model)
    if scale != 1.0:
        logits = logits * scale
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def head_is_affine(model: nn.Module) -> bool:
    return isinstance(lm_head(model), nn.Linear) and _logit_transform(model)[1] is None


# models whose body + head_logits were checked against their own forward (weak: models can be freed)
_VERIFIED: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


_VERIFY_TOKENS = 16


def architecture_name(model: nn.Module) -> str:
    """``ClassName (model_type)`` of the underlying model, for error messages."""
    base = base_model(model)
    model_type = getattr(getattr(base, "config", None), "model_type", None)
    return f"{type(base).__name__} (model_type={model_type!r})"


def verify_head(model: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> None:
    """Check once per model that body + :func:`head_logits` give the model's own logits; raise if not.

    The scorers apply the LM head themselves (only at probe positions), so a model that post-processes
    its logits in a way :func:`head_logits` does not know would get silently wrong probes. This runs a
    plain forward of the model's class (``type(model).forward``: an instance-level wrapper such as
    accelerate's can point at another model after a deep copy) on the first row of the batch (its
    first real tokens, at most 16, no padding) and compares its logits with the scorers' path. A mismatch
    larger than the dtype's rounding raises ValueError naming the architecture. The result is cached
    per model object.
    """
    base = base_model(model)
    if _VERIFIED.get(base):
        return
    row = input_ids[0][attention_mask[0].bool()][:_VERIFY_TOKENS][None]  # (1, n)
    if row.shape[1] == 0:
        return  # nothing to check against yet; the next batch will
    attn = torch.ones_like(row)
    with torch.no_grad(), eval_mode(model):
        # the class's forward: an instance-level wrapper (accelerate's) can be stale on a deep copy
        ref = type(base).forward(base, input_ids=row, attention_mask=attn, use_cache=False).logits
        got = head_logits(model, body_hidden(model, attn, input_ids=row))
    ref = ref.to(got.dtype)
    if got.shape != ref.shape:
        raise ValueError(
            f"oar-rl cannot verify the LM head of {architecture_name(model)}: its forward gives logits "
            f"of shape {tuple(ref.shape)}, the scorers' head path {tuple(got.shape)}"
        )
    eps = torch.finfo(lm_head(model).weight.dtype).eps if hasattr(lm_head(model), "weight") else 1e-6
    tol = 8 * max(eps, 1e-6) * (1.0 + float(ref.abs().max()))
    err = float((got - ref).abs().max())
    if not err <= tol:
        raise ValueError(
            f"oar-rl cannot verify the LM head of {architecture_name(model)}: the scorers' logits "
            f"(body + lm_head + logit scaling/soft-capping) differ from the model's own forward by "
            f"{err:.3g} (tolerance {tol:.3g}), so OAR-P/OAR-G would score against the wrong P_final. "
            "This architecture post-processes its hidden states or logits in a way oar-rl does not "
            "know; please report it."
        )
    _VERIFIED[base] = True


def vocab_size(model: nn.Module) -> int:
    """Width of the LM head output."""
    head = lm_head(model)
    if isinstance(head, nn.Linear):
        return head.out_features
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if size is None:
        raise ValueError(f"cannot tell the vocabulary size of {type(model).__name__}")
    return int(size)


def model_device(model: nn.Module) -> torch.device:
    emb = base_model(model).get_input_embeddings()
    return (
        emb.weight.device if emb is not None and hasattr(emb, "weight") else next(model.parameters()).device
    )


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Put every submodule in eval mode (no dropout) and restore each one's own flag afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        yield
    finally:
        for m, training in modes:
            m.training = training
