"""The embedded default model's building blocks: a character-level tokenizer and a tiny Qwen2.

The tokenizer is a real `PreTrainedTokenizerFast` (it round-trips through `save_pretrained` /
`from_pretrained`), so everything downstream -- TRL, generation, evaluation -- treats it like any Hub
tokenizer. The model is a `Qwen2ForCausalLM`, the paper's model family, small enough for a laptop CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import string
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from oar_rl.cache_check import CACHE_ENV, COMPLETE_MARKER, RECIPE_FILE, cache_problem, default_cache_dir
from oar_rl.data.arithmetic import ArithmeticConfig
from oar_rl.data.wordproblems import WordProblemConfig

if TYPE_CHECKING:
    import torch

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
# Every printable ASCII character except the form-feed/vertical-tab/carriage-return whitespace.
ALPHABET = "".join(ch for ch in string.printable if ch not in "\r\x0b\x0c")


def _byte_level_char(byte: int) -> str:
    """The printable stand-in the GPT-2/Qwen2 byte-level scheme uses for `byte` (e.g. space -> 'Ġ')."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    if byte in keep:
        return chr(byte)
    return chr(256 + [b for b in range(256) if b not in keep].index(byte))


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer: one id per character of `alphabet`, plus pad/unk/bos/eos.

    Ids 0-3 are the special tokens; characters follow in `alphabet` order. Unknown characters map to
    `<unk>`. No BOS/EOS is added on encode (TRL appends EOS where it needs one).

    It is a byte-level BPE without merges over a byte-level alphabet (space is stored as 'Ġ', newline as
    'Ċ', as in Qwen2's vocabulary). That is what makes it survive `AutoTokenizer`: for a `qwen2` checkpoint
    transformers always rebuilds the tokenizer as `Qwen2Tokenizer` (byte-level BPE) from the saved vocab,
    whatever `tokenizer_config.json` says, and a plain ' ' entry would then be silently dropped. With this
    layout both classes give the same ids for every ASCII text.
    """
    chars = list(dict.fromkeys(alphabet))
    if not chars:
        raise ValueError("alphabet must contain at least one character, got an empty string")
    clash = [c for c in chars if c in SPECIAL_TOKENS]
    if clash:
        raise ValueError(f"alphabet characters {clash} clash with special tokens {SPECIAL_TOKENS}")
    wide = [c for c in chars if ord(c) > 127]
    if wide:
        raise ValueError(f"alphabet must be ASCII (one byte per character); got {wide[:5]}")
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *(_byte_level_char(ord(c)) for c in chars)])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK, fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="left",
        model_max_length=4096,
    )


def tiny_qwen2_config(
    vocab_size: int,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 1024,
    pad_token_id: int | None = 0,
    bos_token_id: int | None = 2,
    eos_token_id: int | None = 3,
    tie_word_embeddings: bool = True,
) -> Qwen2Config:
    """A small `Qwen2Config`; defaults give a ~100k-parameter model for tests."""
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        tie_word_embeddings=tie_word_embeddings,
        attn_implementation="eager",
    )


def tiny_qwen2(vocab_size: int, *, seed: int = 0, **config_kwargs) -> Qwen2ForCausalLM:
    """A randomly initialised tiny `Qwen2ForCausalLM` (deterministic for a given seed)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(tiny_qwen2_config(vocab_size, **config_kwargs))
    return model.eval()


# ----------------------------------------------------------------------------------------------------
# The embedded default model: a tiny Qwen2 warm-started by supervised fine-tuning on worked solutions.
#
# Not in the paper, which starts RL from Qwen2.5 checkpoints. A char-level model trained here for a few
# minutes on the synthetic arithmetic task plays that role so the arithmetic task and the tests need no
# download. The recipe is tuned so the warm start solves a fraction of held-out problems when sampling at
# temperature 1.0, leaving RL headroom. Measured for DEFAULT_RECIPE (342k parameters, 750 SFT steps of 64
# solutions; cold build 1 min 34 s - 1 min 50 s on 2 CPU cores shared with other light jobs, 4 min 9 s
# when heavily loaded, load average ~7): held-out "eval" split
# accuracy 48.5% sampled at T=1.0 (4 samples x 500 problems), 71.6% greedy; the 4-operand "hard" split
# 1.6% / 1.4% (it does not length-generalise). Learning is a sharp phase transition: 600 steps give
# ~12% sampled, 1000 steps ~76%, so changes to the recipe need re-measuring.
# ----------------------------------------------------------------------------------------------------

RECIPE_FORMAT_VERSION = 2
"""Bump when the meaning of a recipe field or the build procedure changes: it invalidates every cache."""
_COMPLETE_MARKER = COMPLETE_MARKER
_RECIPE_FILE = RECIPE_FILE


@dataclass(frozen=True)
class ModelSpec:
    """Shape of the tiny Qwen2 (passed to `tiny_qwen2_config`)."""

    hidden_size: int = 96
    num_layers: int = 3
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 288
    max_position_embeddings: int = 256
    init_seed: int = 0


@dataclass(frozen=True)
class SFTSpec:
    """Supervised warm start: AdamW, linear warm-up then cosine decay, loss on solution tokens (+ EOS)."""

    steps: int = 750
    batch_size: int = 64
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    num_problems: int = 20_000
    """Size of the pool of worked solutions the batches are drawn from (the train split's stream)."""
    seed: int = 0
    slip_prob: float = 0.0
    """Word problems only: the probability that each computed result of a demonstration is a teacher's
    slip (off by 1 or 2, carried through to a wrong answer; `wordproblems.teacher_slips`)."""
    misread_prob: float = 0.0
    """Long word problems only: the probability that the teacher misreads a trap event (writes the other
    operator of + and -, carried to a wrong answer; `wordproblems.teacher_slips`)."""

    def __post_init__(self) -> None:
        for name in ("slip_prob", "misread_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"SFTSpec.{name}={getattr(self, name)} must be in [0, 1)")
        for name in ("steps", "batch_size", "num_problems"):
            if getattr(self, name) < 1:
                raise ValueError(f"SFTSpec.{name}={getattr(self, name)} must be >= 1")
        if self.learning_rate <= 0:
            raise ValueError(f"SFTSpec.learning_rate={self.learning_rate} must be > 0")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"SFTSpec.warmup_steps={self.warmup_steps} must be in [0, steps={self.steps}]")


@dataclass(frozen=True)
class Recipe:
    """Everything that determines the warm-started model; its hash names the cache directory."""

    task: ArithmeticConfig | WordProblemConfig = field(default_factory=ArithmeticConfig)
    """The task (and with it the tokenizer): arithmetic (char-level) or word problems (word-level BPE)."""
    model: ModelSpec = field(default_factory=ModelSpec)
    sft: SFTSpec = field(default_factory=SFTSpec)
    format_version: int = RECIPE_FORMAT_VERSION

    def to_dict(self) -> dict:
        d = asdict(self)
        for later in ("slip_prob", "misread_prob"):  # added later: absent at the default (hashes kept)
            if d["sft"][later] == 0.0:
                del d["sft"][later]
        if isinstance(self.task, WordProblemConfig):
            d["task"] = self.task.to_dict()  # leaves out its later fields at their defaults
        return d

    def hash(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


DEFAULT_RECIPE = Recipe()
TEST_RECIPE = Recipe(
    model=ModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64),
    sft=SFTSpec(steps=8, batch_size=8, learning_rate=3e-3, warmup_steps=2, num_problems=64),
)
"""A seconds-to-build recipe for tests (the model is barely trained)."""


def _is_complete(path: Path, recipe: Recipe) -> bool:
    return cache_problem(path, recipe) is None


def load_model_dir(path: Path) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """The Qwen2 model (eval mode) and tokenizer saved in `path` (a warm start's or a trained run's folder).

    ValueError when the tokenizer's size is not the config's vocab_size."""
    # The config is read explicitly and passed in, so a load can never fall back to a default config.
    config = Qwen2Config.from_pretrained(path)
    model = Qwen2ForCausalLM.from_pretrained(path, config=config, attn_implementation="eager")
    tok = PreTrainedTokenizerFast.from_pretrained(path)
    if len(tok) != config.vocab_size:
        raise ValueError(
            f"tokenizer has {len(tok)} tokens but config.json says vocab_size={config.vocab_size}"
        )
    return model.eval(), tok


def load_default_model(
    recipe: Recipe = DEFAULT_RECIPE, *, cache_dir: str | os.PathLike | None = None, progress: bool = True
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast, Path]:
    """The warm-started model and tokenizer for `recipe`, built on first use and cached on disk.

    The cache entry is `cache_dir/<recipe hash>` (`cache_dir` defaults to `default_cache_dir()`). It is
    built in a temporary sibling directory and renamed into place only after `save_pretrained` and a
    completion marker are written, so an interrupted build leaves no entry. The whole entry is checked
    before anything is built from it (`cache_problem`: marker, recipe, config.json, weights, tokenizer);
    an entry that fails a check or fails to load is deleted and rebuilt (with a message on stderr),
    never loaded with a default-sized model. Returns (model in eval mode, tokenizer, path of the entry).
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    path = root / recipe.hash()
    if path.exists():
        problem = cache_problem(path, recipe)
        if problem is None:
            try:
                model, tok = load_model_dir(path)
                return model, tok, path
            except Exception as e:  # passed the checks but still does not load: rebuild
                _log(True, f"[oar-rl] cached model at {path} does not load ({e!r}); rebuilding")
        else:
            _log(True, f"[oar-rl] cached model at {path} is unusable: {problem}; rebuilding")
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            raise OSError(f"cannot remove the bad model cache entry {path}; delete it by hand")
    _log(progress, f"[oar-rl] building the warm-start model (recipe {recipe.hash()}) into {path}")
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{recipe.hash()}.", dir=root))
    except OSError as e:
        raise OSError(
            f"cannot write the model cache {root} ({e.strerror or e}); point ${CACHE_ENV} or cache_dir "
            "at a writable directory"
        ) from e
    try:
        model, tok = build_model(recipe, progress=progress)
        from oar_rl.console import no_load_bars

        with no_load_bars():
            model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / _RECIPE_FILE).write_text(json.dumps(recipe.to_dict(), indent=2, sort_keys=True))
        (tmp / _COMPLETE_MARKER).write_text("ok\n")
        tmp.chmod(0o777 & ~_umask())  # mkdtemp makes 0o700; give the entry a normal directory's mode
        try:
            os.rename(tmp, path)
        except OSError:  # another process finished the same recipe first: keep theirs if it is good
            if not _is_complete(path, recipe):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    problem = cache_problem(path, recipe)
    if problem is not None:  # never load something this process did not just verify
        raise OSError(f"the model cache entry {path} just built is unusable: {problem}")
    model, tok = load_model_dir(path)
    return model, tok, path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _log(enabled: bool, msg: str) -> None:
    if enabled:
        print(msg, file=sys.stderr, flush=True)


def sft_examples(
    tokenizer: PreTrainedTokenizerFast, prompts: list[str], solutions: list[str]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, labels), each (N, L); labels are -100 outside solution+EOS.

    The text is exactly what GRPO sees: the prompt string, then the completion (solution then EOS).
    """
    import torch

    rows, label_rows = [], []
    for p, s in zip(prompts, solutions, strict=True):
        p_ids = tokenizer(p, add_special_tokens=False)["input_ids"]
        s_ids = tokenizer(s, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(p_ids + s_ids)
        label_rows.append([-100] * len(p_ids) + s_ids)
    length = max(len(r) for r in rows)
    n = len(rows)
    ids = torch.full((n, length), tokenizer.pad_token_id, dtype=torch.long)  # (N, L)
    mask = torch.zeros((n, length), dtype=torch.long)  # (N, L)
    labels = torch.full((n, length), -100, dtype=torch.long)  # (N, L)
    for i, (r, lab) in enumerate(zip(rows, label_rows, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
        labels[i, : len(lab)] = torch.tensor(lab)
    return ids, mask, labels


def _task_sft_data(recipe: Recipe) -> tuple[PreTrainedTokenizerFast, list[str], list[str]]:
    """(tokenizer, SFT prompts, SFT solutions) of the recipe's task (train split stream)."""
    if isinstance(recipe.task, WordProblemConfig):
        from oar_rl.data import wordproblems

        problems = wordproblems.generate(
            recipe.task,
            recipe.sft.num_problems,
            wordproblems.SPLITS_BY_TASK[recipe.task.name]["train"][2],
            slip_prob=recipe.sft.slip_prob,
            misread_prob=recipe.sft.misread_prob,
        )
        tok = wordproblems.build_tokenizer(recipe.task)
    else:
        if recipe.sft.slip_prob or recipe.sft.misread_prob:
            raise ValueError(
                f"SFTSpec.slip_prob={recipe.sft.slip_prob} and misread_prob={recipe.sft.misread_prob} are "
                "supported for the word-problem tasks only; use 0.0 for arithmetic"
            )
        from oar_rl.data.arithmetic import SPLITS, generate

        problems = generate(recipe.task, recipe.sft.num_problems, SPLITS["train"][2])
        tok = build_char_tokenizer()
    return tok, [p.prompt for p in problems], [p.solution for p in problems]


def build_model(
    recipe: Recipe = DEFAULT_RECIPE, *, progress: bool = True, callback=None
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """Train the warm start from scratch (no caching): a plain torch loop, seeded, CPU-friendly.

    `callback(step, model, tokenizer)`, if given, runs after every optimizer step (for monitoring; it
    must not change the model, and the model is put back in train mode after it).
    """
    import math

    import torch
    from tqdm.auto import tqdm

    tok, prompts, solutions = _task_sft_data(recipe)
    m = recipe.model
    model = tiny_qwen2(
        len(tok),
        seed=m.init_seed,
        hidden_size=m.hidden_size,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        num_kv_heads=m.num_kv_heads,
        intermediate_size=m.intermediate_size,
        max_position_embeddings=m.max_position_embeddings,
    )
    s = recipe.sft
    ids, mask, labels = sft_examples(tok, prompts, solutions)
    gen = torch.Generator().manual_seed(s.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=s.learning_rate,
        betas=(0.9, 0.98),
    )

    def lr_at(step: int) -> float:
        if step < s.warmup_steps:
            return s.learning_rate * (step + 1) / s.warmup_steps
        frac = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
        return s.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    model.train()
    order = torch.randperm(len(prompts), generator=gen)
    cursor = 0
    bar = tqdm(range(s.steps), desc="warm start (SFT)", disable=not progress, mininterval=1.0)
    for step in bar:
        if cursor + s.batch_size > len(order):
            order, cursor = torch.randperm(len(prompts), generator=gen), 0
        idx = order[cursor : cursor + s.batch_size]
        cursor += s.batch_size
        b_mask = mask[idx]
        width = int(b_mask.sum(1).max())
        out = model(input_ids=ids[idx, :width], attention_mask=b_mask[:, :width], labels=labels[idx, :width])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{out.loss.item():.3f}")
        if callback is not None:
            callback(step + 1, model, tok)
            model.train()
    model.eval()
    return model, tok
