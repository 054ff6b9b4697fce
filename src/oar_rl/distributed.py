"""Collective-safe importance scoring: the same number of scoring passes on every rank, row-keyed noise.

Under FSDP (1 and 2) every forward and backward of a sharded unit is a collective (all-gather of the
unit's parameters), and so is every forward of DeepSpeed ZeRO-3 with ``ds3_gather_for_generation=False``.
Ranks score different numbers of rows (rows whose sequence advantage is 0 are skipped; completions
differ in length), so if each rank ran only its own passes, the ranks would issue different numbers of
collectives and hang or exchange garbage. This module makes them equal:

1. :func:`planned_passes` counts, before any forward, the passes the scorer will run for this rank's
   rows (mirroring the scorers' own chunking: rows per pass, and for OAR-P perturbed copies per pass).
2. :meth:`ScoringSync.max_passes` all-reduces the maximum over ranks (one collective per scorer call).
3. :meth:`ScoringSync.run` runs the real scorer, checks that it ran exactly the planned number of
   transformer-body forwards (:class:`PassCounter`; a scorer whose chunking drifted from the plan fails
   loudly, in every process, also in single-process tests), then runs ``max - planned`` dummy passes
   (one padding row, results discarded) with the same forward/backward pattern, so every rank issues
   the same sequence of collective calls.

The model's root-level parameters (embeddings, final norm, LM head) are called directly by the
scorers, outside the root module's forward, so they are gathered for the whole scoring phase
(:func:`scoring_params`): FSDP1 ``summon_full_params(root, recurse=False)`` as TRL does for generation;
FSDP2 ``root.unshard()`` before each body/embedding/head call (an OAR-G backward ends with FSDP2's
final callback, which reshards the root) and ``root.reshard()`` at the end. Decoder layers stay
sharded and gather per pass. The LM head and input embeddings must therefore belong to the root unit:
a wrap policy that shards them separately would make their (rank-dependent) calls collective, and is
refused with an error (use ``TRANSFORMER_BASED_WRAP``, the shipped ``configs/accelerate/fsdp*.yaml``).

FSDP1 detail: OAR-G's ``autograd.grad`` with respect to the input embeddings reaches no parameter, so
FSDP1's post-backward hooks (which reshard a unit) do not fire, and the layers stay gathered until the
training step's own forward/backward, which FSDP1 then completes normally (tested: the training step
is bit-identical with and without the scoring passes). Peak memory during OAR-G scoring under FSDP1 is
therefore that of the gathered layers, like ZeRO-3 with gathered generation; FSDP2 reshards each layer
after each pass.

Random draws (OAR-G noise, random credit) are keyed per row (:func:`row_generators`): a row's noise
depends on (seed, optimizer step, batch within the step, global row index) only, not on the rank, the
world size or the padding of the batch it sits in, so an N-process run draws the same noise as a
one-process run on the same data.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from oar_rl.probes import base_model, body_hidden, decoder_body, eval_mode, head_logits, model_device

T = TypeVar("T")

# transformer-body forwards per scoring pass, and whether the pass has a backward
PASS_FORWARDS: dict[str, int] = {"entropy": 1, "oar-p": 1, "oar-g": 2}
PASS_BACKWARD: dict[str, bool] = {"entropy": False, "oar-p": False, "oar-g": True}


def _chunks(n: int, size: int | None) -> int:
    return 0 if n == 0 else (1 if size is None else math.ceil(n / size))


def planned_passes(kind: str, scored: Tensor, *, batch_size: int | None, num_draws: int = 1) -> int:
    """Scoring passes `kind`'s scorer will run on rows whose scored positions are `scored` (R, C) bool.

    Mirrors the scorers (a drift is caught by :meth:`ScoringSync.run`): ``entropy`` runs one pass per
    `batch_size` rows that have a completion token; ``oar-g`` one pass (clean forward, noisy forward,
    backward) per max(1, `batch_size` // `num_draws`) rows that have a scored token (each row is
    `num_draws` sequences); ``oar-p`` one clean pass per `batch_size` such rows plus one pass per
    `batch_size` perturbed copies (one copy per scored token).
    """
    if kind not in PASS_FORWARDS:
        raise ValueError(f"no pass plan for credit={kind!r}; known: {', '.join(PASS_FORWARDS)}")
    scored = scored.bool()
    rows = int(scored.any(dim=1).sum()) if scored.numel() else 0
    if kind == "oar-p":
        if batch_size is None:
            raise ValueError("oar-p needs an explicit batch_size (perturbed copies per pass)")
        return _chunks(rows, batch_size) + _chunks(int(scored.sum()), batch_size)
    if kind == "oar-g" and batch_size is not None:
        batch_size = max(1, batch_size // num_draws)
    return _chunks(rows, batch_size)


class PassCounter:
    """Counts forward calls of the transformer body of `model` (a forward pre-hook) while active."""

    def __init__(self, model: nn.Module) -> None:
        self.body = decoder_body(model)
        self.count = 0

    def __enter__(self) -> PassCounter:
        self._hook = self.body.register_forward_pre_hook(self._tick)
        return self

    def _tick(self, *args: Any) -> None:
        self.count += 1

    def __exit__(self, *exc: Any) -> None:
        self._hook.remove()


def dummy_pass(model: nn.Module, kind: str) -> None:
    """One scoring pass of `kind` on a 2-token padding row (results discarded): the same modules, in the
    same order, as a real pass -- embeddings, body (twice and a backward for OAR-G), LM head."""
    if kind not in PASS_FORWARDS:
        raise ValueError(f"no dummy pass for credit={kind!r}; known: {', '.join(PASS_FORWARDS)}")
    device = model_device(model)
    pad = getattr(getattr(model, "config", None), "pad_token_id", None) or 0
    ids = torch.full((1, 2), int(pad), dtype=torch.long, device=device)
    attn = torch.ones_like(ids)
    embed = base_model(model).get_input_embeddings()
    with eval_mode(model):
        if not PASS_BACKWARD[kind]:
            with torch.no_grad():
                head_logits(model, body_hidden(model, attn, input_ids=ids)[:, -1])
            return
        with torch.no_grad():
            emb = embed(ids)
            head_logits(model, body_hidden(model, attn, inputs_embeds=emb)[:, -1])
        noisy = emb.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            out = head_logits(model, body_hidden(model, attn, inputs_embeds=noisy)[:, -1])
            torch.autograd.grad(out.float().logsumexp(dim=-1).sum(), noisy)


class ScoringSync:
    """Agree on the number of scoring passes across ranks and pad with dummy passes.

    Args:
        accelerator: the trainer's `accelerate.Accelerator`.
        collective: whether forwards are collective (FSDP, or ZeRO-3 without gathered parameters); when
            False, :meth:`run` only checks the pass count and nothing is padded or all-reduced.
    """

    def __init__(self, accelerator: Any, *, collective: bool) -> None:
        self.accelerator = accelerator
        self.collective = collective and accelerator.num_processes > 1
        self.padded = 0  # dummy passes run so far (for tests and logs)

    def max_passes(self, planned: int) -> int:
        if not self.collective:
            return planned
        n = torch.tensor([planned], dtype=torch.long, device=self.accelerator.device)
        return int(self.accelerator.reduce(n, reduction="max").item())

    def run(self, kind: str, model: nn.Module, planned: int, score: Callable[[], T]) -> T | None:
        """Run `score` (skipped when `planned` is 0), check its pass count, then pad to the ranks' max."""
        total = self.max_passes(planned)
        result = None
        if planned:
            with PassCounter(model) as counter:
                result = score()
            expected = planned * PASS_FORWARDS[kind]
            if counter.count != expected:
                raise RuntimeError(
                    f"credit={kind!r}: the scorer ran {counter.count} transformer-body forwards where "
                    f"{expected} were planned ({planned} passes); oar_rl.distributed.planned_passes no "
                    "longer mirrors the scorer, which would deadlock collective (FSDP/ZeRO-3) training"
                )
        for _ in range(total - planned):
            dummy_pass(model, kind)
            self.padded += 1
        return result


def _is_fsdp1_unit(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(module, FullyShardedDataParallel)


def _is_fsdp2_unit(module: nn.Module) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch < 2.6
        return False
    return isinstance(module, FSDPModule)


def check_root_owned(model: nn.Module, root: nn.Module) -> None:
    """Raise when the input embeddings or the LM head are FSDP units of their own (not in the root)."""
    base = base_model(model)
    for name, module in (
        ("input embeddings", base.get_input_embeddings()),
        ("LM head", base.get_output_embeddings()),
    ):
        if module is None or module is root:
            continue
        if _is_fsdp1_unit(module) or _is_fsdp2_unit(module):
            raise ValueError(
                f"the model's {name} ({type(module).__name__}) is sharded as its own FSDP unit; the OAR "
                "scorers call it a rank-dependent number of times, which would deadlock. Wrap only the "
                "decoder layers (fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP, configs/accelerate/fsdp.yaml)"
            )


@contextlib.contextmanager
def scoring_params(root: nn.Module, model: nn.Module, fsdp_version: int | None) -> Iterator[None]:
    """Keep the root unit's parameters gathered while the scorers run (see the module docstring).

    Args:
        root: the FSDP-wrapped model (the trainer's ``model_wrapped``).
        model: the unwrapped model the scorers are called with.
        fsdp_version: 1, 2, or None (not FSDP: nothing to do).
    """
    if fsdp_version is None:
        yield
        return
    check_root_owned(model, root)
    if fsdp_version == 1:
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(root, recurse=False):
            yield
        return
    if not _is_fsdp2_unit(root):
        raise ValueError(f"FSDP2 scoring needs the fully_shard-ed root model, got {type(root).__name__}")
    base = base_model(model)
    targets = [base.get_input_embeddings(), decoder_body(model), base.get_output_embeddings()]

    def unshard(*args: Any) -> None:
        root.unshard()  # a no-op while the root is gathered; gathers again after an OAR-G backward

    # FSDP2 picks its root as the first unit to run forward; TRL's generation normally did that already,
    # else the scoring passes (which call the body and the layers directly) would make layer 0 the root
    state = root._get_fsdp_state()
    if getattr(state, "_is_root", False) is None:
        state._lazy_init()
    hooks = [m.register_forward_pre_hook(unshard) for m in targets if m is not None]
    try:
        root.unshard()
        yield
    finally:
        for h in hooks:
            h.remove()
        root.reshard()


def row_generators(seed: int, step: int, batch: int, rows: Sequence[int]) -> list[torch.Generator]:
    """One CPU generator per row, seeded from (seed, optimizer step, batch within the step, global row)."""
    gens = []
    for row in rows:
        key = f"{seed}/{step}/{batch}/{int(row)}".encode()
        gens.append(torch.Generator().manual_seed(zlib.crc32(key)))
    return gens


def row_uniform(mask: Tensor, generators: Sequence[torch.Generator]) -> Tensor:
    """(R, C) float32 U(0, 1) on valid tokens, 0 on padding; row i drawn from generators[i], T_i values."""
    if len(generators) != mask.shape[0]:
        raise ValueError(f"got {len(generators)} generators for {mask.shape[0]} rows; pass one per row")
    out = torch.zeros(mask.shape, dtype=torch.float32)
    m = mask.bool().cpu()
    for i, gen in enumerate(generators):
        valid = m[i].nonzero()
        if valid.numel():
            T = int(valid.max()) + 1
            out[i, :T] = torch.rand(T, generator=gen)
    return (out * m).to(mask.device)
