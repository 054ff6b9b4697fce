"""Tiny random configs of the architectures the scorers are checked on (tests/test_architectures.py).

Each model is float32, two layers, hidden size 32-64, vocabulary 96, pad token 0, with weights drawn
at a larger scale than the Hub defaults so that probe distributions are far from uniform (KL values
well above float32 rounding). Configs set the logit post-processing each architecture has: Granite's
``logits_scaling``, Cohere's ``logit_scale``, Gemma's final soft-capping.
"""

from __future__ import annotations

import torch
import transformers as tf

VOCAB = 96
COMMON = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LLAMA_LIKE = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    tie_word_embeddings=False,
    **COMMON,
)


def _configs() -> dict[str, tuple[type, object]]:
    return {
        "qwen2": (tf.Qwen2ForCausalLM, tf.Qwen2Config(**LLAMA_LIKE)),
        "qwen3": (tf.Qwen3ForCausalLM, tf.Qwen3Config(head_dim=8, **LLAMA_LIKE)),
        "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(**LLAMA_LIKE)),
        "mistral": (tf.MistralForCausalLM, tf.MistralConfig(sliding_window=None, **LLAMA_LIKE)),
        "gemma2": (
            tf.Gemma2ForCausalLM,
            tf.Gemma2Config(
                head_dim=8,
                final_logit_softcapping=3.0,
                attn_logit_softcapping=50.0,
                query_pre_attn_scalar=8,
                sliding_window=4,
                **LLAMA_LIKE,
            ),
        ),
        "gemma3": (
            tf.Gemma3ForCausalLM,
            tf.Gemma3TextConfig(
                head_dim=8,
                final_logit_softcapping=3.0,
                query_pre_attn_scalar=8,
                sliding_window=4,
                **LLAMA_LIKE,
            ),
        ),
        "phi3": (tf.Phi3ForCausalLM, tf.Phi3Config(**LLAMA_LIKE)),
        "gpt2": (
            tf.GPT2LMHeadModel,
            tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128, **COMMON),
        ),
        "olmo2": (tf.Olmo2ForCausalLM, tf.Olmo2Config(**LLAMA_LIKE)),
        "granite": (tf.GraniteForCausalLM, tf.GraniteConfig(logits_scaling=4.0, **LLAMA_LIKE)),
        "cohere": (tf.CohereForCausalLM, tf.CohereConfig(logit_scale=3.0, **LLAMA_LIKE)),
        "qwen2_moe": (
            tf.Qwen2MoeForCausalLM,
            tf.Qwen2MoeConfig(
                num_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=32,
                shared_expert_intermediate_size=32,
                decoder_sparse_step=1,
                **LLAMA_LIKE,
            ),
        ),
    }


ARCHS: tuple[str, ...] = tuple(_configs())


def tiny_model(
    name: str, *, seed: int = 0, scale: float = 0.15, embed_std: float | None = None
) -> torch.nn.Module:
    """A tiny random float32 model of architecture `name` in eval mode (weights ~ N(0, scale²); the
    input embedding table ~ N(0, embed_std²) when given)."""
    cls, config = _configs()[name]
    torch.manual_seed(seed)
    model = cls(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:  # matrices and embeddings; norms keep their (unit) init
                p.normal_(0.0, scale)
        if embed_std is not None:
            model.get_input_embeddings().weight.normal_(0.0, embed_std)
    return model.float().eval()
