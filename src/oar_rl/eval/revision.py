"""The commit of a Hub model that `oar-rl eval` samples from, resolved once and pinned for the whole run.

A Hub id names a branch that moves: without a pin, a resumed evaluation could sample its remaining
problems from a newer upload and mix the two in one pass@k, silently. So before anything is loaded, the
id and ``--revision`` (a branch, tag or commit; default the repository's default branch) are resolved to
a commit -- asked of the Hub when it can be reached, else read from the local cache (offline,
``HF_HUB_OFFLINE=1``) -- and that commit is what every loader gets (tokenizer, model, vLLM) and what
each benchmark's meta file records (``model_fingerprint: hub:<commit>``); a resume that resolves to
another commit is refused. A local directory is fingerprinted by its files instead
(:func:`oar_rl.eval.evaluation.model_fingerprint`).
"""

from __future__ import annotations

import re
from pathlib import Path

COMMIT = re.compile(r"^[0-9a-f]{40}$")
HUB_TIMEOUT = 15.0
"""Seconds to wait for the Hub's answer before reading the local cache instead (an unreachable Hub)."""


def resolve_hub_commit(model: str, revision: str | None) -> str:
    """The 40-hex commit of Hub model `model` at `revision` (None: the default branch). ValueError naming
    both when neither the Hub nor the local cache can say."""
    if revision is not None and COMMIT.match(revision):
        return revision
    from huggingface_hub import constants, try_to_load_from_cache

    asked = "its default branch" if revision is None else f"revision {revision!r}"
    why = "offline (HF_HUB_OFFLINE)"
    if not constants.HF_HUB_OFFLINE:
        try:
            from huggingface_hub import HfApi

            sha = HfApi().model_info(model, revision=revision, timeout=HUB_TIMEOUT).sha
            if sha and COMMIT.match(sha):
                return sha
            why = f"the Hub gave no commit ({sha!r})"
        except Exception as exc:  # no network, unknown repository or revision, gated model
            why = f"the Hub could not be asked: {type(exc).__name__}: {exc}"
    cached = try_to_load_from_cache(model, "config.json", revision=revision or "main")
    if isinstance(cached, str) and COMMIT.match(Path(cached).parent.name):
        return Path(cached).parent.name
    raise ValueError(
        f"cannot resolve the Hub model {model!r} at {asked} to a commit ({why}; and it is not in the "
        "local Hugging Face cache); check the id and --revision, or pass a local directory"
    )
