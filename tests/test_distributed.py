"""Collective-safe scoring (oar_rl.distributed) under FSDP1 and FSDP2, sharded by hand in 2 gloo processes.

Each rank holds a different number of rows (rank 1 none at all in the first round), scores them with
every model-based scorer (entropy, OAR-G with and without prompt-cache reuse and with K draws, OAR-P with
and without prefix reuse, the OAR-GP hybrid, GRAIL) inside `ScoringSync.joined` + `scoring_params`, and
checks:
- the scores equal those of an unsharded copy of the model (the FSDP gathering is transparent);
- the ranks ran the same number of passes (padding filled the difference; a mismatch would deadlock
  or abort gloo with "collective mismatch"), including the one-time head verification that only the
  rank with rows runs, and the hybrid's OAR-G and OAR-P phases, which the ranks reach at different times;
- a training step after the scoring gives the same loss as an identical FSDP model that never scored
  (scoring leaves FSDP's state clean).
Plus single-process checks of the pass codes, the dummy pass and row-keyed noise.
"""

from __future__ import annotations

import functools
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from float64 import float64_copy
from oar_rl.distributed import (
    BACKWARD,
    FORWARD,
    ScoringSync,
    dummy_pass,
    row_generators,
    scoring_params,
)
from oar_rl.importance import (
    entropy_importance,
    gradient_importance,
    hybrid_importance,
    perturbation_importance,
    random_importance,
)
from oar_rl.importance.grail import grail_importance
from oar_rl.tiny import tiny_qwen2

VOCAB, P, C = 40, 3, 6


def _batch(rank: int, n: int, seed: int):
    g = torch.Generator().manual_seed(100 * seed + rank)
    pid = torch.randint(4, VOCAB, (n, P), generator=g)
    cid = torch.randint(4, VOCAB, (n, C), generator=g)
    pm = torch.ones(n, P, dtype=torch.long)
    cm = torch.ones(n, C, dtype=torch.long)
    if n > 1:
        cm[1, 3:] = 0  # a shorter completion
    return pid, pm, cid, cm


def _scorers(pid, pm, cid, cm, gens):
    """name -> scorer(model); `gens()` gives fresh row generators (the same draws for every call)."""
    ans = cm.bool().clone()
    ans[:, :2] = False  # an answer span: the last completion tokens

    def oar_p(prefix_reuse):
        return lambda m: perturbation_importance(
            m, pid, pm, cid, cm, batch_size=4, mask_token_id=0, prefix_reuse=prefix_reuse
        )

    return {
        "entropy": lambda m: entropy_importance(m, pid, pm, cid, cm, batch_size=1),
        "oar-g": lambda m: gradient_importance(m, pid, pm, cid, cm, batch_size=1, generator=gens()),
        "oar-g-noreuse": lambda m: gradient_importance(
            m, pid, pm, cid, cm, batch_size=1, generator=gens(), prefix_reuse=False
        ),
        "oar-g-K2": lambda m: gradient_importance(
            m, pid, pm, cid, cm, batch_size=2, num_draws=2, generator=gens()
        ),
        "oar-p": oar_p(True),
        "oar-p-noreuse": oar_p(False),
        "oar-gp": lambda m: hybrid_importance(
            m,
            pid,
            pm,
            cid,
            cm,
            fraction=0.5,
            gradient_kwargs=dict(batch_size=1, generator=gens()),
            perturbation_kwargs=dict(batch_size=2, mask_token_id=0),
        ),
        "grail": lambda m: grail_importance(m, pid, pm, cid, cm, answer_mask=ans, batch_size=1),
    }


def _shard(model: torch.nn.Module, version: int):
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    if version == 1:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer})
        wrapped = FSDP(model, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
        return wrapped, wrapped.module
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model, model


class _Acc:
    """The two attributes of `accelerate.Accelerator` that ScoringSync uses."""

    def __init__(self, world: int):
        self.num_processes = world
        self.device = torch.device("cpu")

    def reduce(self, t, reduction="max"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t


def _worker(rank: int, world: int, version: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ref = tiny_qwen2(VOCAB, seed=0)
        scored_wrapped, scored_model = _shard(tiny_qwen2(VOCAB, seed=0), version)
        plain_wrapped, _ = _shard(tiny_qwen2(VOCAB, seed=0), version)
        opts = [torch.optim.SGD(w.parameters(), lr=0.5) for w in (scored_wrapped, plain_wrapped)]
        before = scored_wrapped.unshard if version == 2 else None
        sync = ScoringSync(_Acc(world), collective=True, before=before)
        report = {"err": 0.0, "passes": [], "losses": []}
        for rnd, n in enumerate([(3, 0), (1, 2)]):  # rows per rank: rank 1 has none in round 0
            pid, pm, cid, cm = _batch(rank, n[rank], rnd)

            def gens(rank=rank, rnd=rnd, n=n):
                return row_generators(0, rnd, 0, [rank * 10 + i for i in range(n[rank])])

            with scoring_params(scored_wrapped, scored_model, version):
                for kind, fn in _scorers(pid, pm, cid, cm, gens).items():
                    before_passes = sync.passes + sync.padded
                    got = None
                    with sync.joined(scored_model):
                        if n[rank]:
                            got = fn(scored_model)
                    report["passes"].append((kind, sync.passes + sync.padded - before_passes))
                    if n[rank]:
                        want = _scorers(pid, pm, cid, cm, gens)[kind](ref)
                        report["err"] = max(report["err"], float((got - want).abs().max()))
            # one training step on both FSDP models, the same data
            ids = torch.cat([pid, cid], 1) if n[rank] else torch.full((1, P + C), 5)
            losses = []
            for wrapped, opt in zip((scored_wrapped, plain_wrapped), opts, strict=True):
                wrapped.train()
                loss = wrapped(input_ids=ids[:1], labels=ids[:1]).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
            report["losses"].append(losses)
            # keep the reference (unsharded) model equal to the trained one
            if version == 1:
                from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

                with FSDP.summon_full_params(scored_wrapped):
                    ref.load_state_dict(scored_wrapped.module.state_dict())
            else:
                full = {k: v.full_tensor() for k, v in scored_wrapped.state_dict().items()}
                ref.load_state_dict(full)
        report["padded"] = sync.padded
        queue.put((rank, report))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("version", [1, 2])
def test_fsdp_scoring_pads_passes_and_matches_unsharded(version):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, 2, version, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    reports = {}
    for _ in procs:
        rank, report = queue.get(timeout=240)
        reports[rank] = report
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # every scorer call: the same number of passes on both ranks
    assert reports[0]["passes"] == reports[1]["passes"]
    assert any(n > 0 for _, n in reports[0]["passes"])
    assert reports[1]["padded"] > 0  # rank 1 had no row in round 0: it only padded
    for rank in (0, 1):
        assert reports[rank]["err"] < 1e-5, reports[rank]
        for scored_loss, plain_loss in reports[rank]["losses"]:
            assert scored_loss == pytest.approx(plain_loss, abs=1e-6)


# ------------------------------------------------------------------------------------------------
# single process


def test_every_backward_pass_is_announced_and_followed_by_one_backward():
    """The join protocol's assumption, for every scorer: a BACKWARD-coded body forward is followed by
    exactly one backward through the body before the next body forward; other forwards have none."""
    from oar_rl.model_parts import decoder_body

    model = tiny_qwen2(VOCAB, seed=0)
    pid, pm, cid, cm = _batch(0, 3, 0)
    body = decoder_body(model)
    for kind, fn in _scorers(pid, pm, cid, cm, lambda: row_generators(0, 0, 0, range(3))).items():
        events = []
        from oar_rl.distributed import pass_code

        hooks = [
            body.register_forward_pre_hook(
                lambda m, a, kw, ev=events: ev.append(("f", pass_code(kw))), with_kwargs=True
            ),
            body.layers[0].register_full_backward_pre_hook(lambda m, g, ev=events: ev.append(("b", None))),
        ]
        sync = ScoringSync(_Acc(1), collective=False)
        try:
            with sync.joined(model):
                fn(model)
        finally:
            for h in hooks:
                h.remove()
        assert sync.passes == sum(e[0] == "f" for e in events) > 0, kind
        for i, (what, code) in enumerate(events):
            if what == "f":
                nxt = events[i + 1][0] if i + 1 < len(events) else None
                assert (nxt == "b") == (code == BACKWARD), (kind, events)
        backward = {"oar-g", "oar-g-noreuse", "oar-g-K2", "oar-gp", "grail"}
        assert any(c == BACKWARD for _, c in events) == (kind in backward), kind


def test_dummy_pass_leaves_no_grad_and_uses_one_body_forward():
    from oar_rl.distributed import pass_code
    from oar_rl.model_parts import decoder_body

    model = tiny_qwen2(VOCAB, seed=0).train()
    for code in (FORWARD, BACKWARD):
        codes = []
        h = decoder_body(model).register_forward_pre_hook(
            lambda m, a, kw, cs=codes: cs.append(pass_code(kw)), with_kwargs=True
        )
        dummy_pass(model, code)
        h.remove()
        assert codes == [code]
    assert all(p.grad is None for p in model.parameters())
    assert model.training
    with pytest.raises(ValueError, match="no dummy pass"):
        dummy_pass(model, 0)


def test_row_keyed_noise_does_not_depend_on_batching_or_padding():
    model = float64_copy(tiny_qwen2(VOCAB, seed=0))  # float64: batching may change only the rounding
    pid, pm, cid, cm = _batch(0, 3, 0)
    whole = gradient_importance(
        model, pid, pm, cid, cm, batch_size=3, generator=row_generators(0, 1, 0, [7, 8, 9])
    )
    # row 1 alone, with extra padding columns, gets the same scores
    cid_pad = torch.cat([cid[1:2], torch.zeros(1, 4, dtype=torch.long)], 1)
    cm_pad = torch.cat([cm[1:2], torch.zeros(1, 4, dtype=torch.long)], 1)
    alone = gradient_importance(
        model, pid[1:2], pm[1:2], cid_pad, cm_pad, generator=row_generators(0, 1, 0, [8])
    )
    torch.testing.assert_close(alone[:, :C], whole[1:2], rtol=1e-6, atol=0.0)
    assert not alone[:, C:].any()
    u = random_importance(cm, generator=row_generators(0, 1, 0, [7, 8, 9]))
    u1 = random_importance(cm[1:2], generator=row_generators(0, 1, 0, [8]))
    torch.testing.assert_close(u[1:2], u1)
    assert not u[1, 3:].any() and bool((u[0] > 0).all())
    with pytest.raises(ValueError, match="one per row"):
        gradient_importance(model, pid, pm, cid, cm, generator=row_generators(0, 1, 0, [1]))
