"""The embedded default model's building blocks: a character-level tokenizer and a tiny Qwen2.

The tokenizer is a real `PreTrainedTokenizerFast` (it round-trips through `save_pretrained` /
`from_pretrained`), so everything downstream -- TRL, generation, evaluation -- treats it like any Hub
tokenizer. The model is a `Qwen2ForCausalLM`, the paper's model family, small enough for a laptop CPU.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
# Every printable ASCII character except the form-feed/vertical-tab/carriage-return whitespace.
ALPHABET = "".join(ch for ch in string.printable if ch not in "\r\x0b\x0c")


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer: one id per character of `alphabet`, plus pad/unk/bos/eos.

    Ids 0-3 are the special tokens; characters follow in `alphabet` order. Unknown characters map to
    `<unk>`. No BOS/EOS is added on encode (TRL appends EOS where it needs one).
    """
    chars = list(dict.fromkeys(alphabet))
    if not chars:
        raise ValueError("alphabet must contain at least one character, got an empty string")
    clash = [c for c in chars if c in SPECIAL_TOKENS]
    if clash:
        raise ValueError(f"alphabet characters {clash} clash with special tokens {SPECIAL_TOKENS}")
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *chars])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="left",
        model_max_length=4096,
    )
    return tok


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
