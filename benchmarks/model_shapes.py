"""Folders of the models users pull, with random weights, for ``zoo bench decode --model
local-dir:FOLDER`` (docs/bench.md): what transformers saves from the published
configurations, with weights drawn at random (seeded), so that the timings need no download.
Decoding speed depends on the sizes and the layer, not on the weights' values; every
implementation is told to make exactly the same number of tokens.

- the seq2seq models at their published sizes: Helsinki-NLP/opus-mt-de-en (Marian),
  google-t5/t5-small, google/flan-t5-small and facebook/mbart-large-cc25;
- the decoder-only families at one size, llama-110m-shape's (width 768, 12 layers, a
  network 2048 wide, 32,000 words), each with its published layer: Qwen3-0.6B's (heads of
  128 wider than the width, queries and keys normed, 2 queries a key/value head), Mistral
  7B's (4 queries a key/value head, a window of 4096), Phi-3-mini's (fused projections),
  gemma-2b's (one key/value head, GELU, scaled embeddings), gemma-2-2b's (sandwich norms,
  soft caps, local and global layers) and gemma-3-1b's (queries and keys normed, one
  global layer in six, two RoPE bases). At one size, the families' figures compare with
  each other and with ``llama-110m-shape``'s.

    python benchmarks/model_shapes.py OUT [--only opus-mt-de-en,qwen3-at-110m] [--small]

writes OUT/NAME for each; ``--small`` shrinks the seq2seq models' widths, layers and
vocabularies (a quick check of the same code)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

SHAPES = {
    "opus-mt-de-en": ("MarianMTModel", "MarianConfig", dict(
        vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6,
        decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
        max_position_embeddings=512, scale_embedding=True, share_encoder_decoder_embeddings=True,
        pad_token_id=58100, eos_token_id=0, bos_token_id=0, decoder_start_token_id=58100,
        forced_eos_token_id=0, num_beams=4, max_length=512)),
    "t5-small": ("T5ForConditionalGeneration", "T5Config", dict(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
        relative_attention_num_buckets=32, feed_forward_proj="relu", layer_norm_epsilon=1e-6,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)),
    "flan-t5-small": ("T5ForConditionalGeneration", "T5Config", dict(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_decoder_layers=8,
        num_heads=6, relative_attention_num_buckets=32, relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, layer_norm_epsilon=1e-6,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)),
    "mbart-large-cc25": ("MBartForConditionalGeneration", "MBartConfig", dict(
        vocab_size=250027, d_model=1024, encoder_layers=12, decoder_layers=12,
        encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
        decoder_ffn_dim=4096, activation_function="gelu", max_position_embeddings=1024,
        scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2)),
}

AT_110M = dict(hidden_size=768, num_hidden_layers=12, intermediate_size=2048, vocab_size=32000,
               max_position_embeddings=2048, attention_dropout=0.0)
"""llama-110m-shape's sizes, which each decoder family below takes."""

FAMILIES = {
    "qwen3-at-110m": ("Qwen3ForCausalLM", "Qwen3Config", dict(
        num_attention_heads=8, num_key_value_heads=4, head_dim=128, hidden_act="silu",
        rms_norm_eps=1e-6, rope_theta=1000000, tie_word_embeddings=True,
        use_sliding_window=False, bos_token_id=31998, eos_token_id=31999)),
    "mistral-at-110m": ("MistralForCausalLM", "MistralConfig", dict(
        num_attention_heads=12, num_key_value_heads=3, hidden_act="silu", rms_norm_eps=1e-5,
        rope_theta=10000.0, sliding_window=4096, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2)),
    "phi3-at-110m": ("Phi3ForCausalLM", "Phi3Config", dict(
        num_attention_heads=12, num_key_value_heads=12, hidden_act="silu", rms_norm_eps=1e-5,
        rope_theta=10000.0, sliding_window=2047, original_max_position_embeddings=2048,
        tie_word_embeddings=False, vocab_size=32064, bos_token_id=1, eos_token_id=32000,
        pad_token_id=32000)),
    "gemma-at-110m": ("GemmaForCausalLM", "GemmaConfig", dict(
        num_attention_heads=12, num_key_value_heads=1, head_dim=64,
        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, rope_theta=10000.0,
        bos_token_id=2, eos_token_id=1, pad_token_id=0)),
    "gemma2-at-110m": ("Gemma2ForCausalLM", "Gemma2Config", dict(
        num_attention_heads=12, num_key_value_heads=6, head_dim=64, query_pre_attn_scalar=64,
        hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0, sliding_window=4096, rms_norm_eps=1e-6,
        rope_theta=10000.0, bos_token_id=2, eos_token_id=1, pad_token_id=0)),
    "gemma3-at-110m": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(
        num_attention_heads=12, num_key_value_heads=1, head_dim=64, query_pre_attn_scalar=64,
        hidden_activation="gelu_pytorch_tanh", sliding_window=512, sliding_window_pattern=6,
        rope_local_base_freq=10000, rope_theta=1000000, rms_norm_eps=1e-6,
        bos_token_id=2, eos_token_id=1, pad_token_id=0)),
}
"""Each decoder family's transformers class, config class and its published layer's keys
(sizes from ``AT_110M``)."""

SMALL = {"vocab_size": 512, "decoder_vocab_size": 512, "d_model": 64, "d_ff": 128, "d_kv": 16,
         "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_layers": 2, "num_decoder_layers": 2,
         "encoder_layers": 2, "decoder_layers": 2, "num_heads": 4, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4}


def save_shape(name: str, out: Path, small: bool = False) -> Path:
    """The folder of model ``name`` (a key of SHAPES or FAMILIES) in ``out / name``."""
    import transformers

    if name in FAMILIES:
        model_class, config_class, options = FAMILIES[name]
        options = {**AT_110M, **options}
    else:
        model_class, config_class, options = SHAPES[name]
        options = dict(options)
    if small:
        options.update({k: v for k, v in SMALL.items() if k in options})
        if "pad_token_id" in options and options["pad_token_id"] >= options["vocab_size"]:
            options["pad_token_id"] = options["decoder_start_token_id"] = options["vocab_size"] - 1
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**options))
    folder = out / name
    model.eval().save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default=",".join([*SHAPES, *FAMILIES]))
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    for name in args.only.split(","):
        print(save_shape(name, args.out, args.small))


if __name__ == "__main__":
    main()
