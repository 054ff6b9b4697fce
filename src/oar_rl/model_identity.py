"""Which model a run used: a Hub id resolved to one commit, a local directory fingerprinted by its files.

A Hub id names a branch that moves: without a pin, a resumed evaluation could sample its remaining
problems from a newer upload and mix the two in one pass@k, and a resumed training run with a LoRA adapter
(or a KL reference model) could load another base model under it, silently. So `oar-rl eval` and
`oar-rl train` resolve the id and its revision (a branch, tag or commit; default the repository's default
branch) to a commit before anything loads -- asked of the Hub when it can be reached, else read from the
local cache (offline, ``HF_HUB_OFFLINE=1``) -- give every loader that commit, and record
``hub:<commit>``; a local directory is fingerprinted by its config.json and weight files. A resume whose
model's identity differs is refused.
"""

from __future__ import annotations

import hashlib
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


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_EDGE = 1 << 20


def model_fingerprint(model: str, revision: str | None = None) -> str | None:
    """A local model directory's fingerprint: sha256 over config.json and, per weight file (those at the
    top, else those in its subfolders), its name, size and first and last MiB (retraining into the same
    directory changes it; reading whole checkpoints would cost more than it tells). A Hub id's is
    ``hub:<commit>``, its `revision` resolved to a commit (:func:`resolve_hub_commit`); None for a Hub id
    without one."""
    root = Path(model).expanduser()
    if not root.is_dir():
        return f"hub:{revision}" if revision else None
    digest = hashlib.sha256()
    config = root / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    weights = sorted(p for p in root.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not weights:  # weights in subfolders only (e.g. an adapter's or a pipeline's): those, by their path
        weights = sorted(p for p in root.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    for path in weights:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(root).as_posix()}:{size}".encode())
        with path.open("rb") as f:
            digest.update(f.read(_EDGE))
            if size > _EDGE:
                f.seek(max(_EDGE, size - _EDGE))
                digest.update(f.read(_EDGE))
    return digest.hexdigest()[:16]
