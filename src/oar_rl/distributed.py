"""Collective-safe importance scoring: the same number of scoring passes on every rank, row-keyed noise.

Under FSDP (1 and 2) every forward and backward of a sharded unit is a collective (all-gather of the
unit's parameters), and so is every forward of DeepSpeed ZeRO-3 with ``ds3_gather_for_generation=False``.
Ranks score different numbers of rows (rows whose sequence advantage is 0 are skipped; completions
differ in length), so if each rank ran only its own passes, the ranks would issue different numbers of
collectives and hang or exchange garbage. This module makes them equal:

:class:`ScoringSync` announces every transformer-body forward of the scorers across ranks before it
runs (one small all-reduce of the pass kind: forward only, or forward + input-gradient backward); a rank
with a different or no pass to run at that point runs a dummy pass of the announced kind (one padding
row, results discarded), and a rank that has finished keeps padding until every rank has. So every rank
issues the same sequence of collective calls whatever each scorer's chunking, KV-cache prefix reuse,
number of noise draws, phases (OAR-GP: OAR-G then OAR-P) or one-time head verification do, without a
pass plan that would have to mirror them.

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
one-process run on the same data. Evaluation batches draw from a stream of their own, so evaluating
during training does not move training's keys.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from oar_rl.model_parts import base_model, body_hidden, decoder_body, eval_mode, head_logits, model_device

# pass codes announced before each transformer-body forward (higher wins the all-reduce max)
IDLE, FORWARD, BACKWARD = 0, 1, 2
PASS_KINDS: dict[int, str] = {FORWARD: "forward", BACKWARD: "forward+backward"}


def pass_code(kwargs: dict[str, Any]) -> int:
    """BACKWARD when this body forward is differentiated (input embeddings that require grad, grad
    enabled: OAR-G's noisy pass, GRAIL's pass; one ``autograd.grad`` follows before the next body
    forward), else FORWARD (clean passes, OAR-P, entropy, prefix/suffix passes, head verification)."""
    embeds = kwargs.get("inputs_embeds")
    if torch.is_grad_enabled() and isinstance(embeds, Tensor) and embeds.requires_grad:
        return BACKWARD
    return FORWARD


def dummy_pass(model: nn.Module, code: int) -> None:
    """One scoring pass on a 2-token padding row (results discarded): the same modules, in the same
    order, as a real pass -- embeddings, body, LM head, and for BACKWARD an input-gradient backward."""
    if code not in PASS_KINDS:
        raise ValueError(f"no dummy pass for code {code!r}; known: {PASS_KINDS}")
    device = model_device(model)
    pad = getattr(getattr(model, "config", None), "pad_token_id", None) or 0
    ids = torch.full((1, 2), int(pad), dtype=torch.long, device=device)
    attn = torch.ones_like(ids)
    embed = base_model(model).get_input_embeddings()
    with eval_mode(model):
        if code == FORWARD:
            with torch.no_grad():
                head_logits(model, body_hidden(model, attn, input_ids=ids)[:, -1])
            return
        with torch.no_grad():
            emb = embed(ids)
        noisy = emb.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            out = head_logits(model, body_hidden(model, attn, inputs_embeds=noisy)[:, -1])
            torch.autograd.grad(out.float().logsumexp(dim=-1).sum(), noisy)


class ScoringSync:
    """Keep every rank's transformer-body passes in lockstep while the scorers run (a join protocol).

    No scorer has to say in advance how many passes it will run (chunking, KV-cache prefix reuse, K
    noise draws, the hybrid's two phases and the one-time head verification all vary per rank). Inside
    :meth:`joined`, a forward pre-hook on the body announces each pass before it runs: every rank
    all-reduces the max of its code (:data:`BACKWARD` > :data:`FORWARD` > :data:`IDLE`). A rank whose
    code is below the max runs one dummy pass of the max's kind, then announces again; a rank that has
    finished announces IDLE until every rank does. So all ranks run the same sequence of pass kinds,
    hence the same sequence of collective calls. Assumption (true of every scorer here, and checked for
    each in tests/test_distributed.py): a BACKWARD pass is followed by exactly one backward through the
    body before the next body forward.

    Args:
        accelerator: the trainer's `accelerate.Accelerator`.
        collective: whether forwards are collective (FSDP, or ZeRO-3 without gathered parameters); when
            False, :meth:`joined` only counts passes and nothing is all-reduced or padded.
        before: called before every announcement (FSDP2: ``root.unshard``, so a root gather that a rank
            makes on its next embedding call happens at the same point on every rank).
    """

    def __init__(
        self, accelerator: Any, *, collective: bool, before: Callable[[], None] | None = None
    ) -> None:
        self.accelerator = accelerator
        self.collective = collective and accelerator.num_processes > 1
        self.before = before
        self.passes = 0  # real passes announced so far
        self.padded = 0  # dummy passes run so far (for tests and logs)
        self._dummy = False

    def _announce(self, code: int) -> int:
        if self.before is not None:
            self.before()
        n = torch.tensor([code], dtype=torch.long, device=self.accelerator.device)
        return int(self.accelerator.reduce(n, reduction="max").item())

    def _pad(self, model: nn.Module, code: int) -> None:
        self._dummy = True
        try:
            dummy_pass(model, code)
        finally:
            self._dummy = False
        self.padded += 1

    @contextlib.contextmanager
    def joined(self, model: nn.Module) -> Iterator[None]:
        """Run scorers of `model` inside; on exit, pad until every rank is done."""
        body = decoder_body(model)

        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            if self._dummy:
                return
            self.passes += 1
            if not self.collective:
                return
            code = pass_code(kwargs)
            while (top := self._announce(code)) > code:
                self._pad(model, top)

        handle = body.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()
        # not reached after an exception: the other ranks then hang in a collective, as they would
        # on any rank-local error under FSDP (torch.distributed's timeout ends them)
        if self.collective:
            while (top := self._announce(IDLE)) > IDLE:
                self._pad(model, top)


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


def row_generators(
    seed: int, step: int, batch: int, rows: Sequence[int], *, stream: str = "train"
) -> list[torch.Generator]:
    """One CPU generator per row, seeded from (seed, optimizer step, batch within the step, global row).

    `stream` separates draws that must not share keys with training's (evaluation batches): "train" keys
    as before, any other name is part of the key."""
    prefix = "" if stream == "train" else f"{stream}/"
    gens = []
    for row in rows:
        key = f"{prefix}{seed}/{step}/{batch}/{int(row)}".encode()
        gens.append(torch.Generator().manual_seed(zlib.crc32(key)))
    return gens
