"""A lean one-token decode step for Llama-shaped decoders (Qwen2, Llama, Mistral; issue 46).

first-error's cached decode (:mod:`oar_rl.importance.greedy_decode`) runs thousands of one-token forwards
per training step. Through the model's own ``forward`` most of a step on a small model is not arithmetic:
the cache grows by concatenation (every layer's keys and values copied each step), eager attention
copies the grouped keys and values once per query head (``repeat_kv``), and the attention mask and the
module plumbing are rebuilt each step. This step calls the same modules (embedding, rotary embedding,
norms, projections, MLP, final norm, LM head with :func:`oar_rl.model_parts.head_logits`) and replaces
only the attention's bookkeeping: keys and values live in buffers preallocated for the whole decode,
written in place; each key/value head attends for its group of query heads at once (no copy); the
additive mask (0 or the dtype's minimum, as eager attention adds it) is built once.

The arithmetic is eager attention's, in another batch shape (query heads grouped per key/value head),
so logits agree with the model's forward up to float rounding. :func:`lean_step` checks that once per
model, on a small batch against the model's own cached forward, and returns None (the caller then uses
the forward) for any other architecture, a sliding window, or a disagreement.
"""

from __future__ import annotations

import sys
import weakref

import torch
from torch import Tensor, nn

from oar_rl.model_parts import base_model, decoder_body, head_logits

SUPPORTED = ("qwen2", "llama", "mistral")
"""Model types whose decoder layers are Llama's: pre-norm attention (q/k/v/o projections, rotary) + MLP."""

_CHECKED: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


class LeanStep:
    """One-token decode steps of `model` over preallocated key/value buffers (module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        body = decoder_body(model)
        self.embed, self.rotary, self.norm = body.embed_tokens, body.rotary_emb, body.norm
        self.layers = list(body.layers)
        attn = self.layers[0].self_attn
        self.rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.head_dim = attn.head_dim
        self.groups = attn.num_key_value_groups
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.mask: Tensor | None = None  # (A, capacity) additive
        # q/k/v and gate/up projections as one matrix each where they are plain Linears (fewer calls)
        self.qkv = [
            _fuse(la.self_attn.q_proj, la.self_attn.k_proj, la.self_attn.v_proj) for la in self.layers
        ]
        self.gate_up = [
            _fuse(la.mlp.gate_proj, la.mlp.up_proj) if type(la.mlp).__name__ in _MLPS else None
            for la in self.layers
        ]

    def start(self, keys: list[Tensor], values: list[Tensor], valid: Tensor, capacity: int) -> None:
        """Load (A, kv heads, W, d) prefix keys/values per layer and their (A, W) valid mask into buffers
        of `capacity` >= W columns; the first step writes column W."""
        A, H, W, d = keys[0].shape
        self.keys, self.values = [], []
        for k, v in zip(keys, values, strict=True):
            kb, vb = k.new_zeros((A, H, capacity, d)), v.new_zeros((A, H, capacity, d))
            kb[:, :, :W], vb[:, :, :W] = k, v
            self.keys.append(kb)
            self.values.append(vb)
        dtype = keys[0].dtype
        self.mask = torch.zeros((A, capacity), dtype=dtype, device=keys[0].device)
        self.mask[:, :W][~valid.bool()] = torch.finfo(dtype).min
        self.offset, self.width = 0, W

    def keep(self, index: Tensor) -> None:
        """Keep only the buffer rows `index`, and drop leading columns that are padding in all of them."""
        assert self.mask is not None
        self.mask = self.mask[index]
        lead = int((self.mask[:, self.offset : self.width] != 0).all(dim=0).int().cumprod(dim=0).sum())
        self.offset += lead
        self.keys = [k[index] for k in self.keys]
        self.values = [v[index] for v in self.values]

    def compact(self, slack: float = 1.5) -> bool:
        """If masked columns (rejected drafts, padding) make up most of the attended width (more than
        `slack` times the longest row's valid columns), move every row's valid columns, in order, to a
        fresh right-aligned layout (their positions are their own, so attention sees the same tokens).
        Returns whether it did."""
        assert self.mask is not None
        lo, w = self.offset, self.width
        valid = self.mask[:, lo:w] == 0  # (A, cols)
        counts = valid.sum(dim=1)
        W2 = int(counts.max())
        if w - lo <= slack * W2 + 16:
            return False
        a, c = valid.nonzero(as_tuple=True)
        dest = (W2 - counts)[a] + valid.cumsum(dim=1)[a, c] - 1
        cap = W2 + max(64, self.mask.shape[1] - w)
        A = valid.shape[0]
        for buffers in (self.keys, self.values):
            for i, b in enumerate(buffers):
                fresh = b.new_zeros((A, b.shape[1], cap, b.shape[3]))
                fresh[a, :, dest] = b[a, :, lo + c]
                buffers[i] = fresh
        mask = self.mask.new_full((A, cap), torch.finfo(self.mask.dtype).min)
        mask[:, W2:] = 0
        mask[a, dest] = 0
        self.mask, self.offset, self.width = mask, 0, W2
        return True

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """(A, V) float logits after feeding `tokens` (A,) at `positions` (A,), written at the next column."""
        return self.block(tokens[:, None], positions[:, None])[:, 0]

    def block(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """(A, T, V) float logits after feeding `tokens` (A, T) at `positions` (A, T), written at the next
        T columns, each attending to the columns before it (causal inside the block)."""
        assert self.mask is not None
        A, T = tokens.shape
        w, lo = self.width, self.offset
        self._room(w + T)
        h = self.embed(tokens)  # (A, T, H)
        cos, sin = self.rotary(h, positions)
        mask = self.mask[:, None, None, lo : w + T]  # (A, 1, 1, cols)
        if T > 1:
            cols = torch.arange(lo, w + T, device=tokens.device)
            rows = torch.arange(w, w + T, device=tokens.device)
            future = (cols[None, :] > rows[:, None]).to(mask.dtype) * torch.finfo(mask.dtype).min
            mask = (mask + future[None, None]).repeat(1, 1, self.groups, 1)  # (A, 1, g·T, cols)
        d, g = self.head_dim, self.groups
        for layer, kb, vb, qkv, gate_up in zip(self.layers, self.keys, self.values, self.qkv, self.gate_up,
                                               strict=True):  # fmt: skip
            attn = layer.self_attn
            x = _call(layer.input_layernorm, h)
            if qkv is not None:
                q, k, v = nn.functional.linear(x, qkv[0], qkv[1]).split(qkv[2], dim=-1)
            else:
                q, k, v = _call(attn.q_proj, x), _call(attn.k_proj, x), _call(attn.v_proj, x)
            q = q.reshape(A, T, -1, d).transpose(1, 2)
            k = k.reshape(A, T, -1, d).transpose(1, 2)
            v = v.reshape(A, T, -1, d).transpose(1, 2)
            q, k = self.rope(q, k, cos, sin)
            kb[:, :, w : w + T] = k
            vb[:, :, w : w + T] = v
            H = kb.shape[1]
            keys = kb[:, :, lo : w + T].transpose(2, 3)
            scores = torch.matmul(q.reshape(A, H, g * T, d), keys) * attn.scaling
            probs = nn.functional.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs, vb[:, :, lo : w + T])  # (A, H, g·T, d), query head = kv head · g + j
            out = out.view(A, H, g, T, d).permute(0, 3, 1, 2, 4).reshape(A, T, H * g * d)
            h = h + _call(attn.o_proj, out)
            x = _call(layer.post_attention_layernorm, h)
            if gate_up is not None:
                gate, up = nn.functional.linear(x, gate_up[0], gate_up[1]).split(gate_up[2], dim=-1)
                h = h + _call(layer.mlp.down_proj, layer.mlp.act_fn(gate) * up)
            else:
                h = h + _mlp(layer.mlp, x)
        self.width = w + T
        return head_logits(self.model, _call(self.norm, h))

    def reject(self, row: int, start: int, stop: int) -> None:
        """Mask columns [start, stop) of buffer row `row` for every later query (rejected draft tokens)."""
        assert self.mask is not None
        self.mask[row, start:stop] = torch.finfo(self.mask.dtype).min

    def _room(self, needed: int) -> None:
        """Grow the buffers (double) until they hold `needed` columns."""
        assert self.mask is not None
        cap = self.mask.shape[1]
        if needed <= cap:
            return
        grow = max(needed, 2 * cap) - cap

        def wider(t: Tensor) -> Tensor:
            return torch.cat([t, t.new_zeros((*t.shape[:2], grow, t.shape[3]))], dim=2)

        self.keys = [wider(k) for k in self.keys]
        self.values = [wider(v) for v in self.values]
        self.mask = torch.cat([self.mask, self.mask.new_zeros((self.mask.shape[0], grow))], dim=1)


_NORMS = ("Qwen2RMSNorm", "LlamaRMSNorm", "MistralRMSNorm")
_MLPS = ("Qwen2MLP", "LlamaMLP", "MistralMLP")


def _call(module: nn.Module, x: Tensor) -> Tensor:
    """`module(x)` without nn.Module's call machinery for a plain Linear or a Llama-family RMSNorm (the
    same operations as their forward, in the same order); any other module (LoRA, hooks) is called."""
    if module._forward_hooks or module._forward_pre_hooks:
        return module(x)
    kind = type(module)
    if kind is nn.Linear:
        return nn.functional.linear(x, module.weight, module.bias)
    if kind.__name__ in _NORMS:
        dtype = x.dtype
        y = x.to(torch.float32)
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
        return module.weight * y.to(dtype)
    return module(x)


def _fuse(*linears: nn.Module) -> tuple[Tensor, Tensor | None, list[int]] | None:
    """(stacked weight, stacked bias or None, output sizes) of plain, unhooked Linears; else None."""
    if any(type(m) is not nn.Linear or m._forward_hooks or m._forward_pre_hooks for m in linears):
        return None
    weight = torch.cat([m.weight for m in linears])
    biases = [m.bias for m in linears]
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat(
            [
                b if b is not None else m.weight.new_zeros(m.out_features)
                for b, m in zip(biases, linears, strict=True)
            ]
        )
    return weight, bias, [m.out_features for m in linears]


def _mlp(mlp: nn.Module, x: Tensor) -> Tensor:
    """A Llama-family MLP's forward, down(act(gate(x)) * up(x)), through :func:`_call`."""
    if type(mlp).__name__ not in _MLPS or mlp._forward_hooks or mlp._forward_pre_hooks:
        return mlp(x)
    return _call(mlp.down_proj, mlp.act_fn(_call(mlp.gate_proj, x)) * _call(mlp.up_proj, x))


def _eligible(model: nn.Module) -> bool:
    config = getattr(base_model(model), "config", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED:
        return False
    if getattr(config, "_attn_implementation", "eager") not in ("eager", "sdpa"):
        return False
    if getattr(config, "pretraining_tp", 1) != 1:
        return False
    types = getattr(config, "layer_types", None) or ["full_attention"]
    return all(t == "full_attention" for t in types) and not getattr(config, "use_sliding_window", False)


def lean_step(model: nn.Module) -> LeanStep | None:
    """A :class:`LeanStep` of `model`, or None where it does not apply or disagrees with the model's own
    cached forward (checked once per model on a small batch)."""
    if not _eligible(model):
        return None
    try:
        lean = LeanStep(model)
    except AttributeError:
        return None
    ok = _CHECKED.get(model)
    if ok is None:
        ok = _agrees(model, lean)
        _CHECKED[model] = ok
    return lean if ok else None


def _agrees(model: nn.Module, lean: LeanStep) -> bool:
    """The lean step's logits equal the model's forward over a DynamicCache (left padding, 3 steps)."""
    from transformers.cache_utils import DynamicCache

    config = base_model(model).config
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, int(config.vocab_size), (3, 7), generator=gen).to(device)
    att = torch.ones_like(ids)
    att[1, :2] = 0
    att[2, :5] = 0
    pos = (att.cumsum(dim=1) - 1).clamp(min=0)
    try:
        with torch.no_grad():
            out = model(input_ids=ids[:, :-1], attention_mask=att[:, :-1], position_ids=pos[:, :-1],
                        use_cache=True)  # fmt: skip
            kv = out.past_key_values
            layers = list(kv.layers)
            lean.start([la.keys for la in layers], [la.values for la in layers], att[:, :-1], 6 + 3)
            ref = DynamicCache(ddp_cache_data=[(la.keys, la.values) for la in layers])
            tok, p, mask = ids[:, -1], pos[:, -1], att
            for _ in range(3):
                want = model(input_ids=tok[:, None], attention_mask=mask, position_ids=p[:, None],
                             past_key_values=ref, use_cache=True).logits[:, -1].float()  # fmt: skip
                got = lean.step(tok, p)
                if not torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max().clamp(min=1))):
                    return False
                tok, p = want.argmax(dim=-1), p + 1
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return False
    return True
