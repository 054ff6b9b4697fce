"""Key/value-cache prefix reuse for the importance scorers (no new math: the same forward, fewer tokens).

Perturbing completion token t (OAR-P) or adding noise to the completion only (OAR-G) leaves every
position before the change exactly as in the clean sequence (causal attention). So the clean sequence
is run once with the model's key/value cache kept, and a perturbed copy recomputes only its *suffix*,
attending to the cached keys/values of its unchanged prefix.

- :func:`clean_pass` runs the body over N rows once and returns their last hidden states and a
  :class:`PrefixCache` (per layer keys/values, (N, heads, L, d)).
- :func:`suffix_hidden` runs suffix tokens of some rows (rows may repeat: a chunk of perturbed copies)
  on top of the first ``start`` cached positions of those rows and returns the suffix hidden states.

Positions and masks are the ones :func:`oar_rl.model_parts.body_hidden` uses: the 2-D attention mask over
prefix + suffix, and positions counted from each row's first real token
(:func:`oar_rl.model_parts.position_ids_from_mask`, the suffix takes its slice), as ``generate`` counts
them. The tests compare the cached path against the
full-recompute path with left-padded prompts of different lengths; if the full path's positions ever
change (e.g. mask-derived positions), those tests fail rather than letting the two paths disagree.

Only plain full-attention caches are reused: every layer of the model's own cache must be a
``transformers`` ``DynamicLayer`` (no sliding-window, linear-attention, quantised or
encoder-decoder layers). Anything else makes :func:`clean_pass` return ``None`` and the scorer falls
back to full recomputation with a warning, never a different result.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from oar_rl.model_parts import decoder_body, position_ids_from_mask


@dataclass
class PrefixCache:
    """Keys and values of N clean sequences, one (N, heads, L, d) pair per layer."""

    keys: list[Tensor]
    values: list[Tensor]

    @property
    def length(self) -> int:
        return self.keys[0].shape[-2] if self.keys else 0

    def select(self, rows: Tensor, start: int):
        """A fresh ``DynamicCache`` holding positions [0, start) of `rows` (rows may repeat)."""
        from transformers import DynamicCache

        data = [(k[rows, :, :start], v[rows, :, :start]) for k, v in zip(self.keys, self.values, strict=True)]
        return DynamicCache(data)

    def cat(self, other: PrefixCache) -> PrefixCache:
        return PrefixCache(
            [torch.cat([a, b]) for a, b in zip(self.keys, other.keys, strict=True)],
            [torch.cat([a, b]) for a, b in zip(self.values, other.values, strict=True)],
        )


def _plain_cache(cache: object) -> PrefixCache | None:
    """The cache's tensors when every layer is a plain full-attention ``DynamicLayer``, else None."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - very old transformers
        return None
    if type(cache) is not DynamicCache:
        return None
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or not layer.is_initialized for layer in layers):
        return None
    keys = [layer.keys for layer in layers]
    values = [layer.values for layer in layers]
    if any(
        k.ndim != 4 or k.shape[:1] != v.shape[:1] or k.shape[-2] != v.shape[-2]
        for k, v in zip(keys, values, strict=True)
    ):
        return None
    return PrefixCache(keys, values)


_WARNED: set[str] = set()


def _warn_once(model: nn.Module, why: str) -> None:
    name = type(model).__name__
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(
            f"prefix reuse is not available for {name} ({why}); recomputing whole sequences instead "
            "(same result, slower)",
            RuntimeWarning,
            stacklevel=3,
        )


def clean_pass(
    model: nn.Module,
    attention_mask: Tensor,
    *,
    input_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
) -> tuple[Tensor, PrefixCache | None]:
    """Hidden states (N, L, H) of the clean rows and their cache (None: not reusable, see module doc)."""
    body = decoder_body(model)
    kwargs = {"input_ids": input_ids} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
    out = body(
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=True,
        **kwargs,
    )
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    cache = _plain_cache(getattr(out, "past_key_values", None))
    if cache is None:
        _warn_once(
            model,
            f"its cache is {type(getattr(out, 'past_key_values', None)).__name__}, "
            "not a plain full-attention DynamicCache",
        )
    elif cache.length != attention_mask.shape[1] or cache.keys[0].shape[0] != attention_mask.shape[0]:
        _warn_once(model, "its cache does not hold one entry per input position")
        cache = None
    return hidden, cache


def suffix_hidden(
    model: nn.Module,
    cache: PrefixCache,
    rows: Tensor,
    start: int,
    attention_mask: Tensor,
    *,
    input_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
) -> Tensor:
    """Hidden states (n, S, H) of suffix tokens at full positions [start, start + S) of `rows` of `cache`.

    Args:
        cache: the clean rows' cache; positions [0, start) of each of `rows` are reused unchanged.
        rows: (n,) long, which cached row each suffix continues (may repeat).
        start: first recomputed position (≥ 1; 0 would be a full forward).
        attention_mask: (n, start + S) 2-D mask over prefix and suffix.
        input_ids / inputs_embeds: (n, S) suffix ids, or (n, S, H) suffix embeddings.
    """
    if not 1 <= start <= cache.length:
        raise ValueError(f"start={start} must lie in [1, {cache.length}] (the cached length)")
    body = decoder_body(model)
    kwargs = {"input_ids": input_ids} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
    out = body(
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask)[:, start:],
        past_key_values=cache.select(rows, start),
        use_cache=True,
        **kwargs,
    )
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
