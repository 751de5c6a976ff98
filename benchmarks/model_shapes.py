"""Folders of the seq2seq models users pull, at their published sizes with random weights,
for ``zoo bench decode --model local-dir:FOLDER`` (docs/bench.md): what transformers saves
from the published configurations of Helsinki-NLP/opus-mt-de-en (Marian), google-t5/t5-small,
google/flan-t5-small and facebook/mbart-large-cc25, with weights drawn at random (seeded),
so that the timings need no download. Decoding speed depends on the sizes and the layer,
not on the weights' values; every implementation is told to make exactly the same number
of tokens.

    python benchmarks/model_shapes.py OUT [--only opus-mt-de-en,t5-small] [--small]

writes OUT/NAME for each; ``--small`` shrinks widths, layers and vocabularies (a test's
quick check of the same code)."""

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

SMALL = {"vocab_size": 512, "decoder_vocab_size": 512, "d_model": 64, "d_ff": 128, "d_kv": 16,
         "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_layers": 2, "num_decoder_layers": 2,
         "encoder_layers": 2, "decoder_layers": 2, "num_heads": 4, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4}


def save_shape(name: str, out: Path, small: bool = False) -> Path:
    """The folder of model ``name`` (a key of SHAPES) in ``out / name``."""
    import transformers

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
    parser.add_argument("--only", default=",".join(SHAPES))
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    for name in args.only.split(","):
        print(save_shape(name, args.out, args.small))


if __name__ == "__main__":
    main()
