"""Small file and path helpers shared by the commands: atomic writes and output-directory checks.

(What a `--model` value names is resolved in `oar_rl.fetch.resolve_model`.)

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


def markdown_cell(text: object) -> str:
    """`text` as one cell of a Markdown table: `|` escaped (it would end the cell and, in a header, turn the
    whole table into a paragraph), line breaks and runs of spaces as one space."""
    return " ".join(str(text).split()).replace("|", "\\|")
