"""The peers zoo is measured against, built to the same shapes and settings:

- ``torch``: ``torch.nn.Transformer`` with the same embeddings (one shared matrix,
  scaled by sqrt(d_model), sinusoidal positions) and the tied output layer;
- ``marian``: Hugging Face ``MarianMTModel`` from a ``MarianConfig`` equal to the
  zoo recipe (ReLU, sinusoidal, shared embeddings, post-norm);
- ``ct2``: CTranslate2 running the Marian peer's weights, converted by CTranslate2's
  own Marian loader (fp32, and int8 when the int8 rows are asked for), in a process of
  its own (:mod:`zoo.bench.ct2`);
- for a model read from a transformers folder (``--model local-dir:FOLDER``, an opus-mt,
  T5, BART or mBART): ``transformers``, the folder itself read by transformers'
  ``AutoModelForSeq2SeqLM``, and ``ct2``, the same folder converted by CTranslate2's own
  converter (:func:`ctranslate2_of_folder`);
- ``timm``: timm's ViT of the same name.

Each is imported only when asked for; a missing package is reported, not raised.
"""

from __future__ import annotations

import functools

import math
from typing import Any

import torch
from torch import nn


class PeerMissing(Exception):
    """A peer whose package is not installed (pip install 'zoo-transformers[bench]')."""


def _settings(model: nn.Module) -> dict[str, Any]:
    return dict(model.recipe.architecture.settings)


def sinusoid_table(length: int, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (sec. 3.5)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * inv), torch.cos(pos * inv)
    return table


class TorchTransformer(nn.Module):
    """``torch.nn.Transformer`` with the paper's embeddings and tied output layer."""

    def __init__(self, s: dict[str, Any]) -> None:
        super().__init__()
        d = s["d_model"]
        self.pad_id = s.get("pad_id", 0)
        self.embed = nn.Embedding(s["vocab_size"], d)
        nn.init.normal_(self.embed.weight, std=d**-0.5)
        self.scale = math.sqrt(d)
        self.register_buffer("table", sinusoid_table(s.get("max_len", 1024), d), persistent=False)
        self.drop = nn.Dropout(s["dropout"])
        self.transformer = nn.Transformer(
            d_model=d, nhead=s["n_heads"], num_encoder_layers=s["encoder_layers"],
            num_decoder_layers=s["decoder_layers"], dim_feedforward=s["d_ff"],
            dropout=s["dropout"], activation="relu", batch_first=True, norm_first=False,
            layer_norm_eps=1e-6,
        )
        # the same dropout as zoo's: nn.Transformer ties the feed-forward and attention
        # dropout to ``dropout``; set them to the recipe's own
        for layer in [*self.transformer.encoder.layers, *self.transformer.decoder.layers]:
            layer.dropout = nn.Dropout(s.get("activation_dropout", 0.0))
            for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = s.get("attention_dropout", 0.0)
        self.lm_head = nn.Linear(d, s["vocab_size"], bias=False)
        self.lm_head.weight = self.embed.weight

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.drop(self.embed(tokens) * self.scale + self.table[: tokens.shape[1]])

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """(B, Ls) sources and (B, Lt) targets -> (B, Lt, vocab) logits."""
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt.shape[1], device=tgt.device, dtype=torch.bool)
        src_pad, tgt_pad = src.eq(self.pad_id), tgt.eq(self.pad_id)
        out = self.transformer(
            self._embed(src), self._embed(tgt), tgt_mask=causal,
            src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad, tgt_is_causal=True,
        )
        return self.lm_head(out)

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, max_new_tokens: int, bos_id: int) -> torch.Tensor:
        """Greedy decoding the way torch.nn.Transformer allows: the decoder re-run over the
        whole prefix at each step (it has no KV cache)."""
        src_pad = src.eq(self.pad_id)
        memory = self.transformer.encoder(self._embed(src), src_key_padding_mask=src_pad)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_new_tokens):
            causal = nn.Transformer.generate_square_subsequent_mask(
                out.shape[1], device=src.device, dtype=torch.bool)
            h = self.transformer.decoder(self._embed(out), memory, tgt_mask=causal,
                                         memory_key_padding_mask=src_pad, tgt_is_causal=True)
            nxt = self.lm_head(h[:, -1]).argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
        return out


def torch_transformer(zoo_model: nn.Module) -> nn.Module:
    """A torch.nn.Transformer peer of ``zoo_model``'s sizes."""
    return TorchTransformer(_settings(zoo_model))


class MarianPeer(nn.Module):
    """``MarianMTModel`` (or another transformers seq2seq model) called like zoo's
    seq2seq: forward(src, tgt) -> logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """(B, Ls) sources and (B, Lt) targets -> (B, Lt, vocab) logits."""
        return self.model(input_ids=src, attention_mask=src.ne(0), decoder_input_ids=tgt,
                          use_cache=False).logits


def marian(zoo_model: nn.Module) -> nn.Module:
    """A Hugging Face Marian peer of ``zoo_model``'s sizes."""
    try:
        from transformers import MarianConfig, MarianMTModel
    except ImportError as exc:
        raise PeerMissing(f"transformers is not installed ({exc})") from None
    s = _settings(zoo_model)
    config = MarianConfig(
        vocab_size=s["vocab_size"], decoder_vocab_size=s["vocab_size"], d_model=s["d_model"],
        encoder_layers=s["encoder_layers"], decoder_layers=s["decoder_layers"],
        encoder_attention_heads=s["n_heads"], decoder_attention_heads=s["n_heads"],
        encoder_ffn_dim=s["d_ff"], decoder_ffn_dim=s["d_ff"], activation_function="relu",
        dropout=s["dropout"], attention_dropout=s.get("attention_dropout", 0.0),
        activation_dropout=s.get("activation_dropout", 0.0), max_position_embeddings=s.get("max_len", 1024),
        scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        forced_eos_token_id=None,
    )
    return MarianPeer(MarianMTModel(config))


def marian_tokens(vocab_size: int) -> list[str]:
    """The token strings of the vocabulary the CTranslate2 peer is converted with: ids 0-3
    are zoo's specials, the rest ``t<id>``, and the last is Marian's ``<pad>`` (its
    converter drops that row, as Marian's own vocabularies end with it)."""
    return ["<blank>", "<s>", "</s>", "<unk>",
            *(f"t{i}" for i in range(4, vocab_size - 1)), "<pad>"]


def ctranslate2_model(peer: MarianPeer, folder) -> str:
    """Convert the Marian peer's weights into a CTranslate2 model in ``folder`` with
    CTranslate2's ``TransformersConverter`` (its Marian loader), through a saved Hugging
    Face folder and a word-level tokenizer of :func:`marian_tokens`; returns the path."""
    from pathlib import Path

    folder = Path(folder)
    hf_dir, ct2_dir = folder / "marian", folder / "ct2"
    peer.model.save_pretrained(hf_dir)
    _convert_named(hf_dir, ct2_dir, marian_tokens(peer.model.config.vocab_size))
    return str(ct2_dir)


def _convert_named(hf_dir, ct2_dir, tokens: list[str]) -> None:
    """Write a word-level tokenizer of ``tokens`` (the ids' names; ``<unk>``, and ``<s>``,
    ``</s>``, ``<pad>`` where present, as its special tokens) into the transformers folder
    ``hf_dir``, then convert that folder with CTranslate2's ``TransformersConverter`` into
    ``ct2_dir``."""
    try:
        import ctranslate2  # noqa: F401
        from ctranslate2.converters import TransformersConverter
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast
    except ImportError as exc:
        raise PeerMissing(f"ctranslate2 is not installed ({exc})") from None
    specials = {key: name for key, name in (("pad_token", "<pad>"), ("bos_token", "<s>"),
                                            ("eos_token", "</s>")) if name in tokens}
    PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)},
                                                    unk_token="<unk>")),
        unk_token="<unk>", **specials,
    ).save_pretrained(hf_dir)
    TransformersConverter(str(hf_dir)).convert(str(ct2_dir), force=True)


def transformers_folder(folder) -> nn.Module:
    """The transformers folder a zoo model was read from, read by transformers'
    ``AutoModelForSeq2SeqLM`` (fp32): the peer of an imported model."""
    try:
        from transformers import AutoModelForSeq2SeqLM
    except ImportError as exc:
        raise PeerMissing(f"transformers is not installed ({exc})") from None
    return MarianPeer(AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval())


def folder_tokens(config: dict) -> list[str]:
    """Token names for the ids of a transformers folder's ``config``: ``t<id>``, but its
    end, pad and start ids (``</s>``, ``<pad>``, ``<s>``; the first name of an id holds)
    and an unknown token (its ``unk_token_id``, else the first id left: T5's 2, BART's 3,
    Marian's 1)."""
    size = config["vocab_size"]
    names = [f"t{i}" for i in range(size)]
    for key, name in (("eos_token_id", "</s>"), ("pad_token_id", "<pad>"),
                      ("bos_token_id", "<s>")):  # Marian's start is its end: </s>
        at = config.get(key)
        if isinstance(at, int) and 0 <= at < size and names[at].startswith("t"):
            names[at] = name
    unk = config.get("unk_token_id")
    if not (isinstance(unk, int) and 0 <= unk < size and names[unk].startswith("t")):
        unk = next(i for i, name in enumerate(names) if name.startswith("t"))
    names[unk] = "<unk>"
    return names


def ctranslate2_of_folder(source, config: dict, folder) -> tuple[str, str | None]:
    """The transformers folder ``source`` converted into a CTranslate2 model in
    ``folder`` by CTranslate2's ``TransformersConverter`` (its loader for the folder's
    family: Marian, T5, BART, mBART, ...), its ids named by :func:`folder_tokens` (a
    word-level tokenizer written beside links to the folder's weights). Returns the path,
    and the decoder's start token where the converted model names none (mBART's, which
    CTranslate2 takes from each target's prefix)."""
    import json
    from pathlib import Path

    source, folder = Path(source), Path(folder)
    hf_dir, ct2_dir = folder / "transformers", folder / "ct2"
    hf_dir.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():  # its weights, never its tokenizer's files
        if path.is_file() and (path.name == "generation_config.json"
                               or path.suffix in (".safetensors", ".bin")
                               or path.name.endswith(".index.json")):
            (hf_dir / path.name).symlink_to(path.resolve())
    written = dict(config)
    if written.get("model_type") in ("bart", "mbart"):
        # CTranslate2 4's BART loader reads normalize_before, which transformers 5's configs
        # no longer carry: mBART's layers are pre-norm, BART's post-norm
        written.setdefault("normalize_before", written["model_type"] == "mbart")
    (hf_dir / "config.json").write_text(json.dumps(written))
    tokens = folder_tokens(config)
    _convert_named(hf_dir, ct2_dir, tokens)
    named = json.loads((ct2_dir / "config.json").read_text()).get("decoder_start_token")
    start = config.get("decoder_start_token_id")
    return str(ct2_dir), (tokens[start] if named is None and isinstance(start, int) else None)


def timm_vit(zoo_model: nn.Module) -> nn.Module:
    """A timm ViT peer of ``zoo_model``'s sizes."""
    try:
        import timm
    except ImportError as exc:
        raise PeerMissing(f"timm is not installed ({exc})") from None
    from timm.models.vision_transformer import VisionTransformer

    s = zoo_model.recipe.architecture.settings
    defaults = {"image_size": 224, "patch_size": 16, "in_chans": 3, "num_classes": 1000,
                "d_model": 768, "n_heads": 12, "d_ff": 3072, "depth": 12,
                "class_token": True, "pool": "token"}
    s = {**defaults, **s}
    eps = zoo_model.recipe.components.get("norm")
    eps = (eps.settings.get("eps", 1e-6) if eps is not None else 1e-6)
    embed = {"patch_size": s["patch_size"]}
    if s.get("stem", "patch") == "conv":  # zoo's conv stem is timm's ConvStem in this layout
        from timm.layers import HybridEmbed
        from timm.models.vision_transformer_hybrid import ConvStem

        # the channels as zoo's stem has them: its 3x3 layers, then the 1x1 to the width
        chans = [layer.conv.out_channels for layer in list(zoo_model.patch_embed)[:-1]]
        n = len(chans)
        stem = ConvStem(in_chans=s["in_chans"], depth=n + 1, channels=(*chans, s["d_model"]),
                        kernel_size=(3,) * n + (1,), stride=(2,) * n + (1,))
        embed = {"patch_size": 1,
                 "embed_layer": functools.partial(HybridEmbed, backbone=stem, proj=False)}
    # built from the recipe's sizes, not its name: a recipe of zoo's own (vit-tiny-patch4-28)
    # has no timm name
    return VisionTransformer(
        img_size=s["image_size"], in_chans=s["in_chans"],
        num_classes=s["num_classes"], embed_dim=s["d_model"], depth=s["depth"],
        num_heads=s["n_heads"], mlp_ratio=s["d_ff"] / s["d_model"],
        class_token=s["class_token"], global_pool=s["pool"] if s["pool"] == "token" else "avg",
        fc_norm=False,  # zoo norms every token before pooling, as timm does without fc_norm
        norm_layer=functools.partial(nn.LayerNorm, eps=eps), **embed)
