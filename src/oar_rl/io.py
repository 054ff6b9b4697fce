"""Small file and path helpers shared by the commands: atomic writes, output-directory checks, and the
`default` model name.

Every results file oar-rl writes goes through a temporary file in the same directory and `os.replace`,
so a crash or a Ctrl-C leaves either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any


def default_file_mode() -> int:
    """0o666 minus the process umask: the mode `open(path, "w")` would give (mkstemp gives 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _replace_from_temp(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp" + path.suffix)
    try:
        write(fd, tmp)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a synced temporary file in the same directory."""

    def write(fd: int, _tmp: str) -> None:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    _replace_from_temp(Path(path), write)


def savefig_atomic(fig: Any, path: str | os.PathLike, *, dpi: int = 110) -> None:
    """Save a matplotlib figure as PNG through a temporary file in the same directory."""

    def write(fd: int, tmp: str) -> None:
        os.close(fd)
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")

    _replace_from_temp(Path(path), write)


def ensure_writable_dir(out: str | os.PathLike, flag: str = "--out") -> Path:
    """Create `out` and write/delete a probe file in it; ValueError naming `flag` and the reason if not."""
    out = Path(out)
    try:
        if out.exists() and not out.is_dir():
            raise ValueError(f"{flag} {str(out)!r} exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".oar-rl-probe-"):
            pass
    except OSError as e:
        raise ValueError(f"{flag} {str(out)!r} is not writable: {e.strerror or e}") from e
    return out


def resolve_model(spec: str) -> str:
    """A `--model` value -> what `from_pretrained` loads.

    `default` -> the embedded default model's directory (built and cached on first use); a known model
    name (`oar_rl.fetch.KNOWN_MODELS`, e.g. `smollm2-135m`) that is not a local path -> its converted
    directory in the cache; a local `.gguf` file -> its de-quantised float32 directory in the cache (see
    `oar_rl.fetch`); anything else (a directory, a Hub id) unchanged.
    """
    if spec != "default":
        from oar_rl.fetch import KNOWN_MODELS, fetch_model, gguf_model_dir

        if spec in KNOWN_MODELS and not Path(spec).exists():
            return str(fetch_model(spec))
        if str(spec).lower().endswith(".gguf"):
            return str(gguf_model_dir(spec))
        return spec
    from oar_rl.console import no_load_bars
    from oar_rl.tiny import load_default_model

    with no_load_bars():  # the caller loads the model from the path (and shows that bar)
        return str(load_default_model()[2])


def display_model_name(spec: str) -> str:
    """A readable name for a model in tables: 'default (embedded)' for the embedded default model's cache
    entry (whose directory is a recipe hash), 'embedded (recipe <hash>)' for another recipe's, else the
    directory's name or the Hub id."""
    path = Path(spec)
    if (path / "oar_rl_recipe.json").is_file():
        from oar_rl.tiny import DEFAULT_RECIPE

        return (
            "default (embedded)" if path.name == DEFAULT_RECIPE.hash() else f"embedded (recipe {path.name})"
        )
    return path.name or spec
