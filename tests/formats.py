"""Small transformers models of each family the format plugins read, built with
transformers' own classes and random weights, at the real configs' options (opus-mt,
opus-mt-tc-big, t5-small, flan-t5, bart-base, mbart-large, vit-base) but small widths,
and a Marian with a SentencePiece tokenizer trained on the translate task's own text."""

from __future__ import annotations

import json
from pathlib import Path

import torch

VOCAB = 60
WIDTH = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
             max_position_embeddings=64)

# The options of the public configs, at a small width (the search tool's copies of
# Helsinki-NLP/opus-mt-de-en, opus-mt-tc-big-*, t5-small, google/flan-t5-small,
# facebook/bart-base, facebook/mbart-large-cc25 and google/vit-base-patch16-224).
OPUS_MT = dict(activation_function="swish", scale_embedding=True, static_position_embeddings=True,
               normalize_before=False, normalize_embedding=False, add_bias_logits=False,
               add_final_layer_norm=False, share_encoder_decoder_embeddings=True,
               bad_words_ids=[[VOCAB - 1]], decoder_start_token_id=VOCAB - 1,
               pad_token_id=VOCAB - 1, eos_token_id=0, bos_token_id=0, forced_eos_token_id=0,
               max_length=16, num_beams=4)
TC_BIG = dict(OPUS_MT, activation_function="relu", share_encoder_decoder_embeddings=False,
              decoder_vocab_size=50, decoder_start_token_id=49, pad_token_id=49,
              bad_words_ids=[[49]])
T5_SMALL = dict(feed_forward_proj="relu", tie_word_embeddings=True, d_kv=8, num_heads=4,
                decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
FLAN_T5 = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False, d_kv=16,
               num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
BART_BASE = dict(activation_function="gelu", scale_embedding=False, bos_token_id=0,
                 pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
                 forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=3,
                 num_beams=4, early_stopping=True, max_length=16)
MBART = dict(activation_function="gelu", scale_embedding=True, bos_token_id=0, pad_token_id=1,
             eos_token_id=2, decoder_start_token_id=3,  # a language code, as mBART starts forced_eos_token_id=2, max_length=16,
             num_beams=4)
M2M100 = dict(activation_function="relu", scale_embedding=True, bos_token_id=0, pad_token_id=1,
              eos_token_id=2, decoder_start_token_id=2,
              forced_bos_token_id=5,  # the target language's token (a code, as __fr__)
              early_stopping=True, max_length=16, num_beams=4)
"""facebook/m2m100_418M's and NLLB-200's options (its generation settings, with the target
language forced as transformers' generate(forced_bos_token_id=) forces it)."""
GENERATION_KEYS = ("bad_words_ids", "decoder_start_token_id", "pad_token_id", "eos_token_id",
                   "bos_token_id", "forced_eos_token_id", "forced_bos_token_id",
                   "no_repeat_ngram_size", "num_beams", "early_stopping", "max_length")


def _generation(model, options: dict) -> None:
    """The generation options on the model's generation config (written to
    generation_config.json by save_pretrained), as the Hub's folders hold them."""
    for key in GENERATION_KEYS:
        if key in options:
            setattr(model.generation_config, key, options[key])


def build_family(variant: str, *, generate: bool = False):
    """A transformers model (eval mode, seeded) of one of the variants, and the pad id.
    T5's decoder is one layer deeper than its encoder, except for ``generate``:
    transformers' T5 cache then sizes itself by the encoder (an IndexError)."""
    import transformers as tf

    torch.manual_seed(0)
    model_options = {k: v for k, v in {
        "opus-mt": OPUS_MT, "tc-big": TC_BIG, "t5": T5_SMALL, "flan-t5": FLAN_T5,
        "bart": BART_BASE, "mbart": MBART, "m2m100": M2M100}[variant].items()
        if k not in GENERATION_KEYS
        or k in ("pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id")}
    options = {"opus-mt": OPUS_MT, "tc-big": TC_BIG, "t5": T5_SMALL, "flan-t5": FLAN_T5,
               "bart": BART_BASE, "mbart": MBART, "m2m100": M2M100}[variant]
    if variant in ("opus-mt", "tc-big"):
        model = tf.MarianMTModel(tf.MarianConfig(vocab_size=VOCAB, **WIDTH, **model_options))
    elif variant in ("t5", "flan-t5"):
        model = tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=VOCAB, d_model=32, d_ff=48, num_layers=2,
            num_decoder_layers=2 if generate else 3,
            relative_attention_num_buckets=8, relative_attention_max_distance=20,
            **model_options))
    elif variant == "m2m100":
        model = tf.M2M100ForConditionalGeneration(tf.M2M100Config(
            vocab_size=VOCAB, **WIDTH, **model_options))
    else:
        cls, config = ((tf.BartForConditionalGeneration, tf.BartConfig) if variant == "bart"
                       else (tf.MBartForConditionalGeneration, tf.MBartConfig))
        model = cls(config(vocab_size=VOCAB, **WIDTH, **model_options))
    with torch.no_grad():
        # weights wide enough that sources decode differently and some end early
        for name, p in model.named_parameters():
            if "embed_positions" in name or p.dim() != 2:
                continue  # Marian's sinusoids stay
            if any(n in name for n in ("embed_tokens", "shared", "lm_head")):
                # M2M100's scaled embeddings, with no norm after them, would drown the
                # layers at 0.5 (the model copies its last token): smaller there
                p.normal_(std=0.1 if variant == "m2m100" else 0.5)
            else:
                p.mul_(2.0 if "t5" in variant else 6.0)  # T5 has no 1/sqrt(d_k)
        # the logits' bias, which transformers starts at zero, made to matter
        for name, b in [*model.named_parameters(), *model.named_buffers()]:
            if name.endswith("final_logits_bias"):
                b.normal_(std=0.1)
                if variant in ("opus-mt", "tc-big"):
                    b[0, options["eos_token_id"]] += 1.0  # some hypotheses end early
    _generation(model, options)
    return model.eval(), options["pad_token_id"]


def save_family(variant: str, folder: Path, *, generate: bool = False):
    """``build_family`` saved with save_pretrained; returns the model and its pad id."""
    model, pad = build_family(variant, generate=generate)
    model.save_pretrained(folder)
    return model, pad


def padded_batch(pad: int, vocab: int = VOCAB, low: int = 3):
    """A (4, 9) batch of token ids with right padding of three lengths, and its mask."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(low, min(vocab, 48) - 1, (4, 9), generator=g)
    for row, length in enumerate((9, 6, 3, 7)):
        src[row, length:] = pad
    return src, (src != pad).long()


def build_vit(folder: Path):
    import transformers as tf

    torch.manual_seed(0)
    model = tf.ViTForImageClassification(tf.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        image_size=16, patch_size=4, num_labels=5, layer_norm_eps=1e-12, qkv_bias=True,
        hidden_act="gelu")).eval()
    model.save_pretrained(folder)
    return model


def marian_with_tokenizer(folder: Path, lines: list[str], vocab_size: int = 120):
    """An opus-mt-like Marian whose SentencePiece models are trained here on ``lines``
    (German on the source side, English on the target side), saved with its
    tokenizer as MarianTokenizer writes it."""
    import sentencepiece as spm
    import transformers as tf

    work = folder.parent / (folder.name + "-spm")
    work.mkdir(parents=True, exist_ok=True)
    models = {}
    for side, text in (("source", [line.split("\t")[0] for line in lines]),
                       ("target", [line.split("\t")[-1] for line in lines])):
        corpus = work / f"{side}.txt"
        corpus.write_text("\n".join(text) + "\n", encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(corpus), model_prefix=str(work / side), vocab_size=vocab_size,
            character_coverage=1.0, model_type="unigram", bos_id=-1, eos_id=-1, pad_id=-1,
            unk_id=0, minloglevel=2)
        models[side] = work / f"{side}.model"
    pieces = ["</s>", "<unk>"]
    for side in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(models[side]))
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                   if sp.id_to_piece(i) not in pieces]
    pieces.append("<pad>")
    vocab = {piece: i for i, piece in enumerate(pieces)}
    (work / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = tf.MarianTokenizer(str(models["source"]), str(models["target"]),
                                   str(work / "vocab.json"))
    n = len(vocab)
    options = dict(OPUS_MT, bad_words_ids=[[n - 1]], decoder_start_token_id=n - 1,
                   pad_token_id=n - 1, max_length=24)
    torch.manual_seed(0)
    model = tf.MarianMTModel(tf.MarianConfig(
        vocab_size=n, **WIDTH, **{k: v for k, v in options.items()
                                  if k not in GENERATION_KEYS or k.endswith("token_id")}))
    _generation(model, options)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def xlm_roberta_tokenizer(folder: Path):
    """XLM-RoBERTa's tokenizer over a SentencePiece unigram model trained here on
    :data:`tests.language_models.TEXT`, its ids in XLM-RoBERTa's order (<s> <pad> </s>
    <unk>, the pieces, <mask>), saved in ``folder``; returns it (58 tokens)."""
    import sentencepiece as spm
    import transformers as tf

    from .language_models import TEXT

    work = folder.parent / (folder.name + "-spm")
    work.mkdir(parents=True, exist_ok=True)
    (work / "text.txt").write_text("\n".join(TEXT * 3) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(work / "text.txt"), model_prefix=str(work / "sp"),
                                   vocab_size=56, character_coverage=1.0,
                                   model_type="unigram", minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(work / "sp.model"))
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(sp.id_to_piece(i), sp.get_score(i)) for i in range(3, sp.get_piece_size())]
    tokenizer = tf.XLMRobertaTokenizer(vocab=[*vocab, ("<mask>", 0.0)])
    tokenizer.save_pretrained(folder)
    return tokenizer


def onnx_encoder(model, folder: Path):
    """An encoder exported by ``zoo export --format onnx`` to ``folder``, as a function of
    ``tokens`` and ``mask`` (1 at real tokens, 0 at padding) that ONNX Runtime runs: its
    head's output."""
    import onnxruntime

    from zoo.export import export

    export(model, folder, "onnx")
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"))

    def run(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        (out,) = session.run(None, {"tokens": tokens.numpy(),
                                    "padding_mask": (mask == 0).numpy(),
                                    "token_types": torch.zeros_like(tokens).numpy()})
        return torch.from_numpy(out)

    return run
