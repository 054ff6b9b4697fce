"""Validation of a cached embedded-model entry, as a whole, before anything is built from it.

Also where the cache is: `default_cache_dir()` (`$OAR_RL_CACHE/models` or ~/.cache/oar-rl/models), shared
by the embedded models and `oar-rl fetch-model`.

A cache entry (`oar_rl.tiny.load_default_model`) is a `save_pretrained` directory plus the recipe it was
built from and a completion marker. Loading trusts none of it: a missing or foreign `config.json` would
make transformers build its default Qwen2 (hidden 4096, 32 layers, ~24 GB), a truncated weights file
fails deep inside safetensors. `cache_problem` reads only small files and the safetensors header.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CACHE_ENV = "OAR_RL_CACHE"
COMPLETE_MARKER = "OAR_RL_COMPLETE"
RECIPE_FILE = "oar_rl_recipe.json"
MANIFEST_FILE = "oar_rl_manifest.json"  # every shipped directory's and LoRA adapter's file digests
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def default_cache_dir() -> Path:
    """`$OAR_RL_CACHE/models` if set, else `~/.cache/oar-rl/models`."""
    root = os.environ.get(CACHE_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "oar-rl"
    return base / "models"


def safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is unusable (missing, empty, bad header, truncated), or None if it is whole."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{path.name} is empty or truncated ({size} bytes)"
            n = int.from_bytes(head, "little")
            if n <= 0 or 8 + n > size:
                return f"{path.name} has a bad header length ({n}) for a {size}-byte file"
            header = json.loads(f.read(n))
    except FileNotFoundError:
        return f"{path.name} is missing"
    except (OSError, ValueError) as e:
        return f"{path.name} is unreadable ({e})"
    try:
        ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
    except (AttributeError, KeyError, TypeError, IndexError, ValueError):
        return f"{path.name} has a malformed header"
    if not ends:
        return f"{path.name} holds no tensors"
    if 8 + n + max(ends) != size:
        return f"{path.name} is {size} bytes but its header describes {8 + n + max(ends)} (truncated?)"
    return None


def cache_problem(path: Path, recipe: Any) -> str | None:
    """Why the cache entry at `path` cannot be used for `recipe`, or None when it is whole.

    Checks everything a load would read, before anything is built from it: the completion marker, the
    recipe, `config.json` (it must describe exactly the recipe's model: without it transformers would
    silently build its default multi-GB Qwen2), the weights file (complete, not truncated) and the
    tokenizer files.
    """
    if not (path / COMPLETE_MARKER).is_file():
        return "no completion marker (an interrupted build)"
    try:
        if json.loads((path / RECIPE_FILE).read_text()) != recipe.to_dict():
            return "it was built from a different recipe"
    except (OSError, ValueError) as e:
        return f"{RECIPE_FILE} is missing or unreadable ({e.__class__.__name__})"
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        return f"config.json is missing or unreadable ({e.__class__.__name__})"
    m = recipe.model
    expected = {
        "model_type": "qwen2",
        "hidden_size": m.hidden_size,
        "num_hidden_layers": m.num_layers,
        "num_attention_heads": m.num_heads,
        "num_key_value_heads": m.num_kv_heads,
        "intermediate_size": m.intermediate_size,
        "max_position_embeddings": m.max_position_embeddings,
    }
    wrong = {k: config.get(k) for k, v in expected.items() if config.get(k) != v}
    if wrong:
        return f"config.json does not describe the recipe's model ({wrong}, expected {expected})"
    for name in TOKENIZER_FILES:
        try:
            json.loads((path / name).read_text())
        except (OSError, ValueError) as e:
            return f"tokenizer file {name} is missing or unreadable ({e.__class__.__name__})"
    return safetensors_problem(path / WEIGHTS_FILE)
