"""A warm start made from a pretrained model: LoRA supervised fine-tuning on a task's reference solutions.

The embedded tasks start RL from tiny models trained from scratch (`oar_rl.tiny`, `oar_rl.shipped`); a
pretrained regime (`oar_rl.tasks.pretrained`) starts it from a fetched model (`oar-rl fetch-model`)
fine-tuned here. `LoraSFTSpec` is the whole recipe's knobs; `recipe(spec, base_dir)` adds what the
knobs do not pin -- the base model's source (the sha256 of its GGUF file, from `oar_rl_source.json`)
and a sha256 of the exact training texts -- and `recipe_hash` names the result.

The build (`build_adapter`): the first `num_examples` problems of the word-problem generator's train
stream, each rendered as chat (system line, the problem as the user message, the reference solution
`solution` as the assistant message), a rank-`rank` LoRA on every projection, AdamW at a constant rate,
`steps` batches drawn without replacement in a seeded order (reshuffled per epoch), the loss on the
solution tokens and the end-of-turn token only (the completion GRPO sees). Deterministic given the seed
on one machine and thread count (builds on two machines may differ in the last bits: issue 8).

On disk (`cache_dir`, default `oar_rl.cache_check.default_cache_dir()`):

- `<name>-<recipe hash>/`: the PEFT adapter (`adapter_config.json`, `adapter_model.safetensors`, about
  20 MB at rank 16), `oar_rl_recipe.json`, `oar_rl_manifest.json` (recipe, hash, every file's sha256,
  and descriptive build facts: versions, threads, seconds, the loss per step) and a completion marker,
  written last in a temporary directory that is then renamed into place. A package may ship such a
  directory instead (`shipped=`), as `oar_rl.shipped` ships the embedded warm starts.
- `<name>-<recipe hash>.merged/`: the base with the adapter merged in (float32, a plain model directory
  that TRL, `from_pretrained` and the study load), its tokenizer (left padding, the base's chat
  template) and `oar_rl_merged.json` (the adapter manifest's sha256 and every file's sha256). It is
  derived: made from a verified adapter on first load, and made again (said on stderr) when it does not
  match the adapter it claims to come from.

Loading never trusts the cache: an adapter directory whose manifest names another recipe, whose files do
not match their sha256, or that lacks its completion marker is refused with a `WarmStartError` (never
loaded, never silently rebuilt over); a missing one is built (`build=True`) or refused.

Departures from the paper, which starts RL from Qwen2.5 checkpoints as released: the backbone here is a
135M-parameter model (de-quantised Q4_1 weights, `oar_rl.fetch`), and it is first taught the task's
answer format by this fine-tune, because the model as released almost never gives a checkable answer
at T = 1 (results/real-model/solve_rate.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from oar_rl.cache_check import MANIFEST_FILE, default_cache_dir

FORMAT_VERSION = 1
"""Bump when the build procedure or a recipe field's meaning changes: it changes every recipe hash."""
RECIPE_FILE = "oar_rl_recipe.json"
MERGED_FILE = "oar_rl_merged.json"
COMPLETE_MARKER = ".oar-rl-complete"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", RECIPE_FILE)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHATML_END = "<|im_end|>"


class WarmStartError(ValueError):
    """A warm start that is missing, or on disk but not what its recipe says: never loaded."""


@dataclass(frozen=True)
class LoraSFTSpec:
    """The knobs of a LoRA SFT warm start (with `recipe`, everything that determines it)."""

    base: str = "smollm2-135m"
    """The pretrained model, a name `oar_rl.fetch.fetch_model` knows."""
    data_task: str = "wordproblems"
    """The word-problem generator's task (`oar_rl.data.wordproblems.SPLITS_BY_TASK`) whose train stream
    gives the problems and reference solutions."""
    num_examples: int = 1600
    system_prompt: str = ""
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = PROJECTIONS
    learning_rate: float = 5e-4
    batch_size: int = 8
    steps: int = 200
    seed: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        for name in ("num_examples", "rank", "batch_size", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"LoraSFTSpec.{name}={getattr(self, name)} must be >= 1")
        if self.batch_size > self.num_examples:
            raise ValueError(f"batch_size={self.batch_size} exceeds num_examples={self.num_examples}")
        if not self.learning_rate > 0 or self.alpha <= 0 or not 0 <= self.dropout < 1:
            raise ValueError(f"bad learning_rate, alpha or dropout in {self}")
        if not self.system_prompt.strip():
            raise ValueError("LoraSFTSpec.system_prompt is empty: the prompt the task asks in must be given")


def chatml_prompt(system: str, user: str) -> str:
    """The prompt text of a (system, user) conversation in ChatML with the assistant turn opened, as
    SmolLM2-Instruct's own chat template renders it (`check_chat_template` verifies that on the model)."""
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def check_chat_template(tokenizer: Any, system: str, user: str, answer: str) -> None:
    """WarmStartError unless `tokenizer`'s own chat template renders the conversation as `chatml_prompt`
    does and closes the assistant turn with its EOS token (what SFT trains on and GRPO stops at)."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": answer}], tokenize=False
    )
    want = chatml_prompt(system, user)
    if prompt != want or not full.startswith(want + answer + CHATML_END) or tokenizer.eos_token != CHATML_END:
        raise WarmStartError(
            f"the model's chat template does not render prompts as oar-rl's ChatML ({prompt!r} vs {want!r}) "
            f"or its EOS is {tokenizer.eos_token!r}, not {CHATML_END!r}: this regime needs SmolLM2's template"
        )


def sft_pairs(spec: LoraSFTSpec) -> tuple[list[str], list[str]]:
    """(chat prompts, reference solutions) of the first `num_examples` train problems of `data_task`."""
    from oar_rl.data.wordproblems import split_problems

    problems = split_problems("train", spec.num_examples, spec.data_task)
    return [chatml_prompt(spec.system_prompt, p.prompt) for p in problems], [p.solution for p in problems]


def _source_sha256(base_dir: Path) -> str:
    from oar_rl.fetch import SOURCE_FILE

    try:
        digest = json.loads((base_dir / SOURCE_FILE).read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise WarmStartError(
            f"{base_dir} has no readable {SOURCE_FILE} with the sha256 of its source ({e!r}); convert the "
            "model with `oar-rl fetch-model`"
        ) from e
    if not (isinstance(digest, str) and len(digest) == 64):
        raise WarmStartError(f"{base_dir / SOURCE_FILE}: {digest!r} is not a sha256")
    return digest


def recipe(spec: LoraSFTSpec, base_dir: Path, tokenizer: Any = None) -> dict[str, Any]:
    """Everything that determines the warm start: the spec, the base's source sha256 and the sha256 of the
    exact training texts (after checking the base's chat template renders them as trained)."""
    from transformers import AutoTokenizer

    tok = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(base_dir)
    prompts, solutions = sft_pairs(spec)
    check_chat_template(tok, spec.system_prompt, "1+1?", solutions[0])
    data = json.dumps([[p, s] for p, s in zip(prompts, solutions, strict=True)], separators=(",", ":"))
    knobs = asdict(spec)
    knobs["target_modules"] = list(spec.target_modules)
    return {
        "format_version": FORMAT_VERSION,
        "kind": "lora-sft",
        "spec": knobs,
        "base_source_sha256": _source_sha256(base_dir),
        "data_sha256": hashlib.sha256(data.encode()).hexdigest(),
    }


def recipe_hash(rec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def file_digests(path: Path, skip: tuple[str, ...] = (MANIFEST_FILE, MERGED_FILE, COMPLETE_MARKER)) -> dict:
    from oar_rl.fetch import sha256_file

    return {f.name: sha256_file(f) for f in sorted(path.iterdir()) if f.is_file() and f.name not in skip}


def adapter_problem(path: Path, rec: dict[str, Any]) -> str | None:
    """Why the adapter directory `path` is not the warm start of recipe `rec` (None when it is)."""
    if not (path / COMPLETE_MARKER).is_file():
        return "no completion marker (an interrupted or foreign build)"
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text())
    except (OSError, ValueError) as e:
        return f"{MANIFEST_FILE} is missing or unreadable ({e.__class__.__name__})"
    want = recipe_hash(rec)
    if manifest.get("recipe_hash") != want or manifest.get("recipe") != rec:
        return f"it was built from recipe {manifest.get('recipe_hash')}, not {want}"
    missing = [f for f in ADAPTER_FILES if not (path / f).is_file()]
    if missing:
        return f"{', '.join(missing)} missing"
    if file_digests(path) != manifest.get("files"):
        return "its files do not match the sha256 in its manifest (edited, corrupt or incomplete)"
    return None


def verify_adapter(path: Path, rec: dict[str, Any], fix: str) -> Path:
    """`path` when it holds the adapter of recipe `rec`; else WarmStartError (`fix`: what to do)."""
    problem = adapter_problem(path, rec)
    if problem is not None:
        raise WarmStartError(f"refusing the warm start at {path}: {problem}. It was not loaded; {fix}")
    return path


def _log(enabled: bool, msg: str) -> None:
    if enabled:
        print(msg, file=sys.stderr, flush=True)


def _load_base(base_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM

    from oar_rl.console import no_load_bars

    with no_load_bars():
        return AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)


def _peft():
    try:
        import peft
    except ImportError as e:  # pragma: no cover - peft is in the dev extra
        raise WarmStartError("a LoRA warm start needs peft: pip install 'oar-rl[peft]'") from e
    return peft


def train_adapter(spec: LoraSFTSpec, base_dir: Path, *, progress: bool = True) -> tuple[Any, list[float]]:
    """The LoRA fine-tune of `spec` on the base at `base_dir`: (PEFT model in eval mode, loss per step)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoTokenizer

    from oar_rl.tiny import sft_examples

    peft = _peft()
    tok = AutoTokenizer.from_pretrained(base_dir)
    prompts, solutions = sft_pairs(spec)
    ids, mask, labels = sft_examples(tok, prompts, solutions)  # (N, L) each; loss on solution + EOS
    base = _load_base(base_dir)
    config = peft.LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)  # LoRA's A matrices (B starts at zero)
        model = peft.get_peft_model(base, config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=spec.learning_rate, weight_decay=spec.weight_decay)
    gen = torch.Generator().manual_seed(spec.seed)
    order, cursor, losses = torch.randperm(len(prompts), generator=gen), 0, []
    model.train()
    bar = tqdm(range(spec.steps), desc="warm start (LoRA SFT)", disable=not progress, mininterval=1.0)
    for _ in bar:
        if cursor + spec.batch_size > len(order):  # the next epoch, in a new order
            order, cursor = torch.randperm(len(prompts), generator=gen), 0
        idx = order[cursor : cursor + spec.batch_size]
        cursor += spec.batch_size
        width = int(mask[idx].sum(1).max())  # right-padded: trim the batch to its longest row
        out = model(input_ids=ids[idx, :width], attention_mask=mask[idx, :width], labels=labels[idx, :width])
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, spec.max_grad_norm)
        opt.step()
        losses.append(out.loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    model.eval()
    return model, losses


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish(tmp: Path, out: Path, good) -> None:
    """Rename the finished `tmp` to `out`; if another process got there first, keep its entry when
    `good(out)` and drop ours."""
    tmp.chmod(0o777 & ~_umask())
    try:
        os.rename(tmp, out)
    except OSError:
        if not good(out):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def build_adapter(spec: LoraSFTSpec, base_dir: Path, out: Path, *, progress: bool = True) -> Path:
    """Fine-tune and write the adapter directory `out` atomically (files, manifest, then the marker)."""
    import torch
    import transformers

    peft = _peft()
    rec = recipe(spec, base_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, losses = train_adapter(spec, base_dir, progress=progress)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.peft_config["default"].base_model_name_or_path = spec.base  # a name, not this cache's path
        model.save_pretrained(tmp, save_embedding_layers=False)  # no Hub lookup: embeddings are not trained
        for f in tmp.iterdir():  # only the adapter (PEFT also writes a model card)
            if f.name not in ADAPTER_FILES:
                shutil.rmtree(f) if f.is_dir() else f.unlink()
        config = json.loads((tmp / "adapter_config.json").read_text())  # PEFT writes a set's order:
        config["target_modules"] = sorted(config["target_modules"])  # sorted, the same bytes every build
        (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        (tmp / RECIPE_FILE).write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
        build = {
            "seconds": round(time.perf_counter() - t0, 1),
            "torch_threads": torch.get_num_threads(),
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "peft": peft.__version__,
            },
            "loss": [round(x, 5) for x in losses],
        }
        manifest = {
            "recipe_hash": recipe_hash(rec),
            "recipe": rec,
            "files": file_digests(tmp),
            "build": build,
        }
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        (tmp / COMPLETE_MARKER).write_text("ok\n")  # last: the entry is whole from here on
        publish(tmp, out, lambda p: adapter_problem(p, rec) is None)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def merged_problem(path: Path, adapter: Path) -> str | None:
    """Why `path` is not the merge of the adapter at `adapter` (None when it is)."""
    from oar_rl.fetch import sha256_file

    if not (path / COMPLETE_MARKER).is_file():
        return "no completion marker"
    try:
        record = json.loads((path / MERGED_FILE).read_text())
    except (OSError, ValueError) as e:
        return f"{MERGED_FILE} is missing or unreadable ({e.__class__.__name__})"
    if record.get("adapter_manifest_sha256") != sha256_file(adapter / MANIFEST_FILE):
        return "it was merged from another adapter"
    if file_digests(path) != record.get("files"):
        return "its files do not match the sha256 recorded at the merge"
    try:
        padding = json.loads((path / "tokenizer_config.json").read_text()).get("padding_side")
    except (OSError, ValueError) as e:
        return f"tokenizer_config.json is missing or unreadable ({e.__class__.__name__})"
    if padding != "left":  # right padding would silently spoil batched generation
        return f"its tokenizer pads on the {padding or 'default (right)'} side, not the left"
    return None


def merge(adapter: Path, base_dir: Path, out: Path, *, progress: bool = True) -> Path:
    """The base at `base_dir` with the (verified) adapter merged in, saved at `out` (float32, with the
    base's tokenizer set to pad on the left); kept when it already is that merge."""
    from transformers import AutoTokenizer

    from oar_rl.console import no_load_bars
    from oar_rl.fetch import sha256_file

    if out.exists():
        problem = merged_problem(out, adapter)
        if problem is None:
            return out
        _log(True, f"[oar-rl] the merged warm start {out} is unusable ({problem}); merging again")
        shutil.rmtree(out)
    _log(progress, f"[oar-rl] merging the LoRA warm start {adapter.name} into its base -> {out}")
    peft = _peft()
    model = peft.PeftModel.from_pretrained(_load_base(base_dir), adapter).merge_and_unload()
    tok = AutoTokenizer.from_pretrained(base_dir, padding_side="left")  # saved so: batched generation
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with no_load_bars():
            model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        record = {
            "adapter_manifest_sha256": sha256_file(adapter / MANIFEST_FILE),
            "adapter": str(adapter),
            "files": file_digests(tmp),
        }
        (tmp / MERGED_FILE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        (tmp / COMPLETE_MARKER).write_text("ok\n")
        publish(tmp, out, lambda p: merged_problem(p, adapter) is None)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def cache_entry(name: str, rec: dict[str, Any], cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache directory of the adapter of recipe `rec` named `name` (`<name>-<recipe hash>`; its merge
    sits beside it, with `.merged` added)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / f"{name}-{recipe_hash(rec)}"


@dataclass
class LoadedWarmStart:
    """A loaded LoRA SFT warm start: the merged model (eval mode), its tokenizer, the merged directory
    (what training loads), the adapter directory, and the recipe with its hash."""

    model: Any
    tokenizer: Any
    path: Path
    adapter: Path
    recipe_hash: str
    recipe: dict[str, Any]


def load(
    spec: LoraSFTSpec,
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    base_dir: Path | None = None,
    shipped: Path | None = None,
    build: bool = True,
    progress: bool = True,
    command: str = "",
) -> LoadedWarmStart:
    """The warm start of `spec`, named `name` in the cache: verified, merged, loaded.

    `base_dir`: the base model's directory (default: `fetch_model(spec.base, cache_dir)`). `shipped`: a
    directory a package ships the adapter in; used (after verification) when it exists. Otherwise the
    cache entry `<cache_dir>/<name>-<recipe hash>`: verified when present (WarmStartError when it does
    not match), built when absent and `build` (else WarmStartError). `command`: the command that builds
    it, for messages.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from oar_rl.console import no_load_bars
    from oar_rl.fetch import fetch_model

    base_dir = Path(base_dir) if base_dir is not None else fetch_model(spec.base, cache_dir)
    rec = recipe(spec, base_dir)
    digest = recipe_hash(rec)
    entry = cache_entry(name, rec, cache_dir)
    how = f" with `{command}`" if command else ""
    if shipped is not None and shipped.exists():
        adapter = verify_adapter(shipped, rec, "the package's adapter is not the code's recipe: rebuild it")
    elif entry.exists():
        adapter = verify_adapter(entry, rec, f"delete {entry} and build it again{how}")
    elif build:
        what = f"{spec.steps} LoRA SFT steps of {spec.batch_size}"
        _log(progress, f"[oar-rl] building the warm start {name} (recipe {digest}; {what}) into {entry}")
        adapter = build_adapter(spec, base_dir, entry, progress=progress)
    else:
        raise WarmStartError(f"the warm start {entry} is not built; build it{how}")
    merged = merge(adapter, base_dir, entry.with_name(f"{entry.name}.merged"), progress=progress)
    with no_load_bars():
        model = AutoModelForCausalLM.from_pretrained(merged, dtype="float32")
    tok = AutoTokenizer.from_pretrained(merged)
    return LoadedWarmStart(model.eval(), tok, merged, adapter, digest, rec)
