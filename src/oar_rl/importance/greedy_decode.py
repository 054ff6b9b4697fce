"""Greedy continuations of rollout prefixes from the rollouts' own key-value cache (issue 46).

first-error's search (:mod:`oar_rl.importance.first_error`) continues, greedily, prefixes y_<n of the
rollouts it searches. ``model.generate`` re-reads every prefix (a prefill over prompt + y_<n) and then
decodes the whole left-padded batch until its *last* row stops. Here instead:

- one teacher-forced pass over the searched rollouts keeps their key-value cache (:class:`RolloutCache`).
  Attention is causal, so the keys and values of a rollout's first m tokens are those of its prefix of
  length m on its own: a prefix's cache is the rollout's cache cut to the prefix (no prefill);
- each continuation starts by feeding the prefix's last token over the cache of the tokens before it,
  so every token it writes comes from the same kind of decode forward, and is the argmax of the float32
  logits, as greedy ``generate`` takes it;
- the batch is laid out as ``generate`` lays it out: each row's prefix right-aligned (left padding), an
  attention mask over the real tokens, positions counted from each row's first real token
  (``cumsum(mask) - 1``);
- a row leaves the batch as soon as it writes an EOS or spends its budget, and columns that are padding
  for every remaining row are dropped: the batch decodes only live rows.

The forward is the model's own (``model(...)`` over a ``DynamicCache``: its attention, positions, LM head
and logit post-processing), except on Llama-shaped decoders (Qwen2, Llama, Mistral), where
:class:`~oar_rl.importance.decode_step.LeanStep` runs the same modules over preallocated key/value buffers
(checked once per model against the model's own forward). There each forward also verifies a *draft*
(:func:`_drafted`, prompt-lookup decoding): the tokens that followed the row's last three tokens in the
batch's own texts of the same prompt (its rollouts, and every continuation once finished; the search's
continuations from neighbouring cuts repeat each other's sentences). A row keeps the draft's tokens up
to the first one the argmax disagrees with, plus that argmax; the rejected columns are masked. Every
token kept is still the argmax after its own prefix, so drafts change how many forwards run one after
the other (on the long regime about a third of them), never which tokens come out.

What it computes equals ``generate``'s greedy continuation up to float rounding: the cached keys come from
a pass over the whole rollout batch, rows leave the batch as they finish and drafts widen the forward, so
matrix products run on other shapes (as another batch composition does in ``generate`` itself). A
near-tie of the logits can go either way under such rounding; the tests compare the tokens with
``generate``'s and first-error's located tokens with the ``generate`` path's on the long regime's own
rollouts.

Models whose cache is not a plain per-layer key/value tensor (sliding-window or linear-attention layers,
a body without ``past_key_values``) get ``None`` from :func:`rollout_cache`; the caller then uses
``generate``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from oar_rl.importance.decode_step import lean_step
from oar_rl.model_parts import base_model, decoder_body, position_ids_from_mask

LEAN = True
"""Decode with :class:`~oar_rl.importance.decode_step.LeanStep` where it applies (tests turn it off to
compare with the model's own forward)."""
DRAFTS = True
"""With the lean step, verify prompt-lookup drafts in blocks (:func:`_drafted`)."""
GENERATE_MODES = ("generate", "generate-static", "generate-lookup")
"""`generate_continuations`' ways of calling ``generate`` (first-error's non-cached decodes)."""
LOOKUP_TOKENS = 10
"""Draft tokens per step of "generate-lookup" (transformers' documented example value)."""
SDPA_PASS = True
"""Run the teacher-forced pass with SDPA attention where the model has eager attention (:func:`_sdpa`)."""


@dataclass
class RolloutCache:
    """Keys and values of N whole rollouts (left-padded prompt of width P, then the completion).

    Row r's prefix of its prompt and first n completion tokens is columns ``lead[r] .. P + n`` of every
    layer's (N, heads, P + C, head dim) keys and values, at positions 0 .. (P + n - lead[r] - 1).
    """

    keys: list[Tensor]
    values: list[Tensor]
    input_ids: Tensor  # (N, P + C)
    lead: list[int]  # left padding of each row's prompt
    prompt_len: int
    seconds: float = 0.0  # the teacher-forced pass that made it
    drafts: Drafts | None = None  # texts the continuations' drafts are looked up in (built on first use)

    def group(self, row: int) -> tuple[int, ...]:
        """Row `row`'s prompt tokens: rows that share them share their drafts."""
        return tuple(self.input_ids[row, self.lead[row] : self.prompt_len].tolist())

    def prefix(self, row: int, n: int) -> list[int]:
        """Row `row`'s prompt and first n completion tokens."""
        return self.input_ids[row, self.lead[row] : self.prompt_len + n].tolist()


class Drafts:
    """Prompt-lookup drafts: the tokens that followed the last n tokens of a context in some text of the
    same prompt (the rollouts, then every continuation as it finishes; the latest text wins, and within it
    the n-gram's first place), for the first n of `ngrams` that has a match."""

    def __init__(self, ngrams: tuple[int, ...] = (6, 4, 3, 2), length: int = 6) -> None:
        self.ngrams, self.length = ngrams, length
        self.texts: list[list[int]] = []
        self.index: dict[tuple, tuple[int, int]] = {}
        self.groups: dict[tuple[int, ...], int] = {}

    def add(self, group: tuple[int, ...], tokens: list[int]) -> None:
        t, g = len(self.texts), self.groups.setdefault(group, len(self.groups))
        self.texts.append(tokens)
        own: dict[tuple, tuple[int, int]] = {}  # an n-gram's first place in this text: the longest draft
        for n in self.ngrams:
            for i in range(n, len(tokens)):
                own.setdefault((g, n, *tokens[i - n : i]), (t, i))
        self.index.update(own)

    def propose(self, group: tuple[int, ...], context: list[int], most: int) -> list[int]:
        """At most `most` (and `length`) tokens that followed the context's last n-gram."""
        g = self.groups.get(group)
        if g is None or most <= 0:
            return []
        for n in self.ngrams:
            hit = self.index.get((g, n, *context[-n:])) if len(context) >= n else None
            if hit is not None:
                t, i = hit
                return self.texts[t][i : i + min(most, self.length)]
        return []


def _plain_layers(cache) -> list | None:
    """The cache's layers if each holds the whole sequence's keys and values (no sliding window)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    if not isinstance(cache, DynamicCache):
        return None
    layers = list(getattr(cache, "layers", []))
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    return layers


def rollout_cache(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, prompt_len: int, *, batch_size: int
) -> tuple[RolloutCache | None, Tensor]:
    """One teacher-forced pass over (N, P + C) rollouts: their cache (None where the model's cache is not
    plain keys and values, see the module docstring) and the body's last hidden states (N, P + C, H)."""
    t0 = time.perf_counter()
    with _sdpa(model):
        cache, hidden = _teacher_forced(model, input_ids, attention_mask, prompt_len, batch_size)
    if cache is not None:
        cache.seconds = time.perf_counter() - t0
    return cache, hidden


@contextlib.contextmanager
def _sdpa(model: nn.Module) -> Iterator[None]:
    """Run the block with the model's SDPA attention where it has eager attention and supports SDPA: the
    same attention, without eager's (N, heads, L, L) score tensors (about 4x faster over whole rollouts
    on the CPU). Positions whose query sees no key (left padding) are never read from the pass."""
    base = base_model(model)
    impl = getattr(getattr(base, "config", None), "_attn_implementation", None)
    if impl != "eager" or not getattr(base, "_supports_sdpa", False) or not SDPA_PASS:
        yield
        return
    try:
        base.set_attn_implementation("sdpa")
    except (ValueError, ImportError, AttributeError):
        yield
        return
    try:
        yield
    finally:
        base.set_attn_implementation(impl)


def _teacher_forced(model, input_ids, attention_mask, prompt_len: int, batch_size: int):
    body = decoder_body(model)
    keys: list[list[Tensor]] = []
    values: list[list[Tensor]] = []
    hidden = []
    plain = True
    with torch.no_grad():
        for a in range(0, input_ids.shape[0], batch_size):
            ids, att = input_ids[a : a + batch_size], attention_mask[a : a + batch_size]
            try:
                out = body(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att),
                           use_cache=True)  # fmt: skip
            except TypeError as err:
                if "position_ids" not in str(err):
                    raise
                raise ValueError(f"the body of {type(model).__name__} takes no position_ids") from err
            hidden.append(out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0])
            layers = _plain_layers(getattr(out, "past_key_values", None)) if plain else None
            if layers is None or any(layer.keys.shape[-2] != ids.shape[1] for layer in layers):
                plain = False
                continue
            if not keys:
                keys, values = [[] for _ in layers], [[] for _ in layers]
            for i, layer in enumerate(layers):
                keys[i].append(layer.keys)
                values[i].append(layer.values)
    lead = (attention_mask[:, :prompt_len] == 0).sum(dim=1).tolist()
    cache = None
    if plain:
        cache = RolloutCache(
            [torch.cat(k) for k in keys], [torch.cat(v) for v in values], input_ids, lead, prompt_len
        )
    return cache, torch.cat(hidden)


@dataclass
class DecodeCost:
    """Rows x decode steps computed, and the seconds they took."""

    tokens: int = 0
    seconds: float = 0.0
    forwards: int = 0  # decode forwards, one after the other


def generate_continuations(
    model: nn.Module,
    tokenizer,
    prefixes: Sequence[Tensor],
    budgets: Sequence[int],
    *,
    eos: Sequence[int],
    batch_size: int,
    cost: DecodeCost | None = None,
    mode: str = "generate",
) -> list[list[int]]:
    """``model.generate``'s greedy continuations of the 1-D `prefixes` (prompt + completion prefix), at
    most `budgets[i]` new tokens each (0: none), cut after their first token in `eos`: left-padded
    batches of `batch_size`, each decoded until its last row stops (the search before issue 46;
    `cost.tokens` counts rows x new positions, padding included).

    `mode` "generate-static": the same batches over a static cache (`cache_implementation="static"`);
    "generate-lookup": one prefix at a time with prompt-lookup decoding (`prompt_lookup_num_tokens`
    :data:`LOOKUP_TOKENS`, drafts looked up in the prefix itself): transformers runs assisted decoding only
    at batch size 1 and refuses it over a static cache. Greedy either way: the same tokens up to rounding."""
    if mode not in GENERATE_MODES:
        raise ValueError(f"mode must be one of {', '.join(GENERATE_MODES)}, got {mode!r}")
    if mode == "generate-lookup":
        batch_size = 1
    extra = {"generate": {}, "generate-static": {"cache_implementation": "static"},
             "generate-lookup": {"prompt_lookup_num_tokens": LOOKUP_TOKENS}}[mode]  # fmt: skip
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = eos[0] if eos else tokenizer.eos_token_id
    stop = set(eos)
    out: list[list[int]] = [[] for _ in prefixes]
    order = [i for i in range(len(prefixes)) if budgets[i] > 0]
    t0 = time.perf_counter()
    calls = [0]  # forwards (prefills and decode steps), counted: prompt lookup verifies several tokens in one
    hook = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1)) if order else None
    try:
        _generate_chunks(model, prefixes, budgets, order, out, pad, stop, eos, batch_size, extra, cost)
    finally:
        if hook is not None:
            hook.remove()
    if cost is not None:
        cost.forwards += calls[0]
        cost.seconds += time.perf_counter() - t0
    return out


def _generate_chunks(model, prefixes, budgets, order, out, pad, stop, eos, batch_size, extra, cost) -> None:
    """`generate_continuations`' batches: each chunk of `order` left-padded and generated, into `out`."""
    for a in range(0, len(order), batch_size):
        chunk = order[a : a + batch_size]
        width = max(prefixes[i].numel() for i in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        attn = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, i in enumerate(chunk):  # left padding, as generate expects
            n = prefixes[i].numel()
            ids[r, width - n :] = prefixes[i].cpu()
            attn[r, width - n :] = 1
        device = next(model.parameters()).device
        gen = model.generate(
            input_ids=ids.to(device),
            attention_mask=attn.to(device),
            max_new_tokens=max(budgets[i] for i in chunk),
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=list(eos) or None,
            **extra,
        )
        if cost is not None:
            cost.tokens += len(chunk) * (gen.shape[1] - width)
        for r, i in enumerate(chunk):
            cont = gen[r, width : width + budgets[i]].tolist()
            cut = next((j + 1 for j, t in enumerate(cont) if t in stop), len(cont))
            out[i] = cont[:cut]


def continue_from_cache(
    model: nn.Module,
    cache: RolloutCache,
    items: Sequence[tuple[int, int]],
    budgets: Sequence[int],
    *,
    eos: Collection[int],
    batch_size: int,
    cost: DecodeCost | None = None,
) -> list[list[int]]:
    """Greedy continuations of the prefixes `items` = (row of `cache`, completion tokens kept n >= 0), at
    most `budgets[i]` new tokens each (0: none), each cut after its first token in `eos`."""
    out: list[list[int]] = [[] for _ in items]
    order = [i for i in range(len(items)) if budgets[i] > 0]
    t0 = time.perf_counter()
    with torch.inference_mode():  # nothing decoded here is ever differentiated
        for a in range(0, len(order), batch_size):
            chunk = order[a : a + batch_size]
            _decode(model, cache, [items[i] for i in chunk], [budgets[i] for i in chunk], set(eos),
                    [out[i] for i in chunk], cost)  # fmt: skip
    if cost is not None:
        cost.seconds += time.perf_counter() - t0
    return out


def _decode(model, cache: RolloutCache, items, budgets, stop: set[int], outs: list[list[int]], cost) -> None:
    """Decode one batch of continuations into `outs` (one list per item, appended to)."""
    from transformers.cache_utils import DynamicCache

    P = cache.prompt_len
    device = cache.input_ids.device
    # every row starts by feeding its prefix's last token over the cache of the tokens before it
    starts = [(cache.lead[r], P + n - 1) for r, n in items]  # cached columns [lo, hi), fed column hi
    width = max(hi - lo for lo, hi in starts)
    A = len(items)
    mask = torch.zeros((A, width + 1), dtype=torch.long, device=device)
    layers = []
    for k_all, v_all in zip(cache.keys, cache.values, strict=True):
        shape = (A, k_all.shape[1], width, k_all.shape[3])
        k, v = k_all.new_zeros(shape), v_all.new_zeros(shape)
        for j, ((r, _), (lo, hi)) in enumerate(zip(items, starts, strict=True)):
            if hi > lo:
                k[j, :, width - (hi - lo) :] = k_all[r, :, lo:hi]
                v[j, :, width - (hi - lo) :] = v_all[r, :, lo:hi]
        layers.append((k, v))
    for j, (lo, hi) in enumerate(starts):
        mask[j, width - (hi - lo) :] = 1
    lean = lean_step(model) if LEAN else None
    if lean is not None:
        lean.start([k for k, _ in layers], [v for _, v in layers], mask[:, :width], width + max(budgets))
        if DRAFTS:
            return _drafted(lean, cache, items, starts, budgets, stop, outs, cost)
    else:
        kv = DynamicCache(ddp_cache_data=layers)
    tokens = torch.stack([cache.input_ids[r, hi] for (r, _), (_, hi) in zip(items, starts, strict=True)])
    positions = torch.tensor([hi - lo for lo, hi in starts], device=device)
    rows: list[int | None] = list(range(A))  # the item each batch row decodes (None: finished)
    left = list(budgets)
    while True:
        if lean is not None:
            logits = lean.step(tokens, positions)
        else:
            logits = model(
                input_ids=tokens[:, None], attention_mask=mask, position_ids=positions[:, None],
                past_key_values=kv, use_cache=True,
            ).logits[:, -1]  # fmt: skip
        nxt = logits.to(dtype=torch.float32).argmax(dim=-1)
        if cost is not None:
            cost.tokens += len(rows)
            cost.forwards += 1
        for row, (j, t) in enumerate(zip(rows, nxt.tolist(), strict=True)):
            if j is None:
                continue
            outs[j].append(t)
            left[j] -= 1
            if left[j] <= 0 or t in stop:
                rows[row] = None
        live = [row for row, j in enumerate(rows) if j is not None]
        if not live:
            return
        # finished rows leave the batch, and so do columns only they used; the lean step's buffers are
        # copied to do so, so it keeps computing finished rows until a quarter of its rows are done
        if len(live) < len(rows) and (lean is None or len(live) <= 0.75 * len(rows)):
            index = torch.tensor(live, device=device)
            nxt, positions = nxt[index], positions[index]
            rows = [rows[row] for row in live]
            if lean is not None:
                lean.keep(index)
            else:
                mask = mask[index]
                drop = int((mask.cumsum(dim=1) == 0).all(dim=0).sum())  # leading columns padding for all
                mask = mask[:, drop:]
                for layer in kv.layers:
                    layer.keys = layer.keys[index, :, drop:]
                    layer.values = layer.values[index, :, drop:]
        tokens, positions = nxt, positions + 1
        if lean is None:
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)


def _drafted(lean, cache: RolloutCache, items, starts, budgets, stop: set[int], outs, cost) -> None:
    """The lean decode with drafts verified in blocks: each forward feeds every row's current token and
    its draft (:class:`Drafts`), keeps the draft's tokens up to the first the argmax disagrees with, plus
    the argmax there, and masks the rejected columns. The tokens kept are the argmax after their own
    prefix, as one token per forward would give them (up to float rounding of the wider block)."""
    if cache.drafts is None:
        cache.drafts = Drafts()
        for r in range(cache.input_ids.shape[0]):
            cache.drafts.add(cache.group(r), cache.input_ids[r, cache.lead[r] :].tolist())
    drafts = cache.drafts
    device = cache.input_ids.device
    groups = [cache.group(r) for r, _ in items]
    context = [cache.prefix(r, n) for r, n in items]  # prefix + emitted tokens; its last is fed next
    pos = [hi - lo for lo, hi in starts]  # position of the token fed next
    rows: list[int | None] = list(range(len(items)))  # the item each buffer row decodes (None: finished)
    left = list(budgets)
    while True:
        props = [[] if j is None else drafts.propose(groups[j], context[j], left[j] - 1) for j in rows]
        T = 1 + max(len(p) for p in props)
        feed = [
            [0 if j is None else context[j][-1], *p] + [0] * (T - 1 - len(p))
            for j, p in zip(rows, props, strict=True)
        ]  # finished rows (until they leave) and short drafts are padded; their columns are masked
        tokens = torch.tensor(feed, device=device)
        positions = torch.tensor([[0 if j is None else pos[j]] for j in rows], device=device)
        w = lean.width
        logits = lean.block(tokens, positions + torch.arange(T, device=device))
        preds = logits.float().argmax(dim=-1).tolist()
        if cost is not None:
            cost.tokens += len(rows) * T
            cost.forwards += 1
        for row, j in enumerate(rows):
            if j is None:
                continue
            p, kept = props[row], 0
            while True:
                t = preds[row][kept]
                outs[j].append(t)
                context[j].append(t)
                left[j] -= 1
                if left[j] <= 0 or t in stop:
                    rows[row] = None
                    break
                if kept < len(p) and p[kept] == t:
                    kept += 1  # the draft's token is the argmax: its column stays, its logits are next
                    continue
                break
            pos[j] += kept + 1
            if kept + 1 < T:
                lean.reject(row, w + kept + 1, w + T)
            if rows[row] is None:
                drafts.add(groups[j], context[j][len(cache.group(items[j][0])) :])
                lean.reject(row, 0, lean.width)  # a finished row attends to nothing (not kept by compact)
        live = [row for row, j in enumerate(rows) if j is not None]
        if not live:
            return
        if len(live) < len(rows) and len(live) <= 0.75 * len(rows):
            lean.keep(torch.tensor(live, device=device))
            rows = [rows[row] for row in live]
        lean.compact()
