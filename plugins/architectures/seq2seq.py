"""The encoder-decoder Transformer (Vaswani et al. 2017).

Token embeddings scaled by sqrt(d_model) plus positions; N encoder and N
decoder blocks; output logits through the (optionally shared) embedding matrix.
Padding masks come from ``pad_id``; the decoder's self-attention is causal.

The settings also express the published descendants whose weights zoo imports
(``zoo.build("hf-hub:Helsinki-NLP/opus-mt-de-en")``, docs/from-the-hub.md): a norm
on the embeddings (BART), a bias on the logits (Marian, BART), heads of their own
width and an untied, rescaled output (T5).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
from torch.utils.checkpoint import checkpoint

from zoo.plugin_api import DecoderCache, Dropout, GenerationSettings, Linear, Slot, layer_dropped

from .native_encoder import encode as encode_natively

# Bounds far past any model one machine holds: a typo (d_model=10**9, 10**6 layers) is
# refused at once instead of being counted for minutes or passed to torch as an overflow.
MAX_WIDTH, MAX_HEADS, MAX_FF = 2**16, 2**10, 2**18
MAX_LAYERS, MAX_VOCAB, MAX_LENGTH = 2**10, 2**31, 2**20

SELF_ATTENTION = {"causal": True, "padding_mask": True}
START, END = 1, 2
"""The start and end tokens of zoo's own sequence tasks (``<s>`` and ``</s>``; 0 pads)."""
CROSS_ATTENTION = {"cross_attention": True, "padding_mask": True}


class Seq2SeqSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(gt=0, le=MAX_VOCAB)
    """Shared vocabulary (source = target) when share_embeddings; else the target's."""
    src_vocab_size: int | None = Field(None, gt=0, le=MAX_VOCAB)
    """Source vocabulary when embeddings are not shared (defaults to vocab_size)."""
    d_model: int = Field(512, gt=0, le=MAX_WIDTH)
    n_heads: int = Field(8, gt=0, le=MAX_HEADS)
    head_dim: int | None = Field(None, gt=0, le=MAX_WIDTH)
    """The width of one head; None: d_model / n_heads. T5 v1.1 small has 6 heads of 64
    in a width of 512, so its heads together are 384 wide."""
    d_ff: int = Field(2048, gt=0, le=MAX_FF)
    encoder_layers: int = Field(6, ge=0, le=MAX_LAYERS)
    decoder_layers: int = Field(6, ge=1, le=MAX_LAYERS)
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    activation_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout inside the feed-forward network, after its activation. The paper has none
    (sec. 5.4: residual dropout and dropout on the embedding sums only); fairseq and
    Marian call it activation_dropout, torch.nn.Transformer ties it to dropout."""
    encoder_layerdrop: float = Field(0.0, ge=0.0, lt=1.0)
    """LayerDrop (Fan et al. 2019; “PyTorch实现Transformer：从Self-Attention到实战调优” sec. 5.2): in training, each encoder layer
    is skipped for a batch with this probability (fairseq's ``encoder_layerdrop``)."""
    decoder_layerdrop: float = Field(0.0, ge=0.0, lt=1.0)
    """LayerDrop for the decoder's layers. Evaluation and decoding use every layer."""
    max_len: int = Field(1024, gt=0, le=MAX_LENGTH)
    norm_placement: Literal["post", "pre"] = "post"
    final_norm: bool | None = None
    """A norm after each stack; None means: only with pre-norm."""
    share_embeddings: bool = True
    """One matrix for the source and target embeddings (sec. 3.4)."""
    tie_output: bool = True
    """Output projection = target embedding (sec. 3.4). T5 v1.1 and Flan-T5 share their
    embeddings but not the output: share_embeddings true, tie_output false."""
    scale_embeddings: bool = True
    separate_positions: bool = False
    """A positional module each for the encoder and the decoder (BART's two learned
    tables); False: one for both (the paper's sinusoids)."""
    embedding_norm: bool = False
    """A norm (the norm slot's) on the embeddings plus positions, before dropout, in each
    stack: BART's and mBART's ``layernorm_embedding``."""
    output_bias: bool = False
    """A bias on the logits (Marian's and BART's ``final_logits_bias``)."""
    scale_output: bool = False
    """Multiply the decoder's output by d_model^-0.5 before the output projection (T5
    with tied embeddings, Mesh TensorFlow's rescaling)."""
    pad_id: int | None = Field(0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> "Seq2SeqSettings":
        if self.head_dim is None and self.d_model % self.n_heads:
            divisors = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            raise ValueError(
                f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}; "
                f"n_heads could be one of {divisors}"
            )
        if self.pad_id is not None and self.pad_id >= min(self.vocab_size,
                                                          self.src_vocab_size or self.vocab_size):
            raise ValueError(
                f"pad_id {self.pad_id} is not a token of a vocabulary of "
                f"{min(self.vocab_size, self.src_vocab_size or self.vocab_size)} (ids start at "
                "0); use an id below the vocabulary size, or pad_id: null for no padding"
            )
        if self.share_embeddings and self.src_vocab_size not in (None, self.vocab_size):
            raise ValueError(
                "share_embeddings needs one vocabulary: drop src_vocab_size or set "
                "share_embeddings: false"
            )
        return self


class Stack(nn.Module):
    """Blocks in sequence, with an optional final norm."""

    def __init__(self, layers: list[nn.Module], norm: nn.Module | None,
                 embed_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm
        self.embed_norm = embed_norm
        """The norm on the stack's embeddings (``embedding_norm``), or None."""


class Seq2Seq(nn.Module):
    """Encoder-decoder Transformer: forward(src, tgt) -> logits (B, Lt, vocab)."""

    Settings = Seq2SeqSettings
    slots = {
        "attention": Slot("attention", SELF_ATTENTION, "the decoder's self-attention is "
                          "causal, and padding is skipped"),
        "cross_attention": Slot("attention", CROSS_ATTENTION, "the decoder attends to the "
                                "encoder's output, skipping its padding", default="vanilla"),
        "kernel": Slot("kernel", {"causal": True, "arbitrary_mask": True},
                       "padding and causal masks", default="sdpa"),
        "positional": Slot("positional", default="sinusoidal"),
        "norm": Slot("norm", default="layernorm"),
        "ffn": Slot("ffn", default="relu"),
        "encoder_block": Slot("block", {"role": "encoder"}, default="encoder"),
        "decoder_block": Slot("block", {"role": "decoder"}, default="decoder"),
    }

    gradient_checkpointing = False
    """Recompute each block in the backward pass instead of keeping its activations."""

    static_decoding = True
    """Decode through :class:`~zoo.plugins.architectures.static_decoder.StaticDecoder`
    (fixed buffers, one product for self-attention's q, k and v) when every part of the
    decoder allows it; False always takes the general path (the same tokens)."""

    native_pass = True
    """Set False (on the class or one model) to keep every pass of the encoder in Python;
    else a pass over few rows with fixed weights (a decoding call's) runs in zoo's native
    code (:mod:`.native_encoder`)."""

    def __init__(self, settings: Seq2SeqSettings, parts) -> None:
        super().__init__()
        s = self.settings = settings
        self.pad_id = s.pad_id
        self.decodes_incrementally = all(
            parts.parts[slot].component.capabilities.kv_cache
            for slot in ("attention", "cross_attention") if slot in parts.parts)
        """False when an attention of the decoder has no KV cache: decoding then re-runs the
        decoder over the prefix at each step (zoo.decoding does so by itself)."""
        self.generation = GenerationSettings(
            start_id=START, eos_ids=(END,), pad_id=END if s.pad_id is None else s.pad_id,
            max_new_tokens=128, length_penalty=0.6, length_penalty_form="gnmt",
            early_stopping="never")
        """How the model decodes (``zoo.generate``) unless told otherwise: greedy, zoo's
        tasks' token ids, 128 new tokens at most, and for beams GNMT's length penalty
        (alpha 0.6) with the exact stopping bound. An imported model's own settings, or a
        trained run's task's, replace these."""
        self.positions_see_padding = any(
            parts.parts[slot].component.capabilities.padding_aware
            for slot in ("positional",) if slot in parts.parts)
        """The positional component takes the padding mask (its ``padding_aware``)."""
        self.drops_layers = bool(s.encoder_layerdrop or s.decoder_layerdrop)
        """Whole layers may be skipped in training (distributed runs must allow unused
        parameters)."""
        self.embed_scale = math.sqrt(s.d_model) if s.scale_embeddings else 1.0
        self.tgt_embed = nn.Embedding(s.vocab_size, s.d_model)
        nn.init.normal_(self.tgt_embed.weight, std=s.d_model**-0.5)
        if s.share_embeddings:
            self.src_embed = self.tgt_embed
        else:
            self.src_embed = nn.Embedding(s.src_vocab_size or s.vocab_size, s.d_model)
            nn.init.normal_(self.src_embed.weight, std=s.d_model**-0.5)
        self.lm_head = Linear(s.d_model, s.vocab_size, bias=s.output_bias)
        if s.output_bias:
            nn.init.zeros_(self.lm_head.bias)
        if s.tie_output:
            self.lm_head.weight = self.tgt_embed.weight
        self.output_scale = s.d_model**-0.5 if s.scale_output else None
        self.positional = parts.embedding_positions(d_model=s.d_model, max_len=s.max_len)
        self.max_positions = (s.max_len if parts.parts["positional"].component.capabilities
                              .max_length else None)
        """The most positions a source, and a translation, may take (a learned table's
        rows); None: any number. ``zoo.generate`` refuses more before it starts."""
        self.src_positional = (parts.embedding_positions(d_model=s.d_model, max_len=s.max_len)
                               if s.separate_positions else None)
        """The encoder's own positions (``separate_positions``); None: it shares the
        decoder's ``positional``."""
        self.drop = Dropout(s.dropout)

        factories = parts.layer_factories(
            d_model=s.d_model, n_heads=s.n_heads, d_ff=s.d_ff, dropout=s.dropout,
            attention_dropout=s.attention_dropout, max_len=s.max_len,
            activation_dropout=s.activation_dropout, head_dim=s.head_dim,
        )
        block = dict(d_model=s.d_model, dropout=s.dropout, norm_first=s.norm_placement == "pre",
                     **factories)
        norm = factories["make_norm"]
        final = s.norm_placement == "pre" if s.final_norm is None else s.final_norm
        self.encoder = Stack(
            [parts.make("encoder_block", **block) for _ in range(s.encoder_layers)],
            norm() if final else None, norm() if s.embedding_norm else None,
        )
        self.decoder = Stack(
            [parts.make("decoder_block", **block) for _ in range(s.decoder_layers)],
            norm() if final else None, norm() if s.embedding_norm else None,
        )

    # -- masks and embeddings -------------------------------------------------------------------
    def padding_mask(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """(B, L) True at padding, or None without a pad_id."""
        return None if self.pad_id is None else tokens.eq(self.pad_id)

    def _embed(self, embed: nn.Embedding, stack: Stack, positional: nn.Module,
               tokens: torch.Tensor, offset: int = 0,
               padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = embed(tokens) * self.embed_scale
        if self.positions_see_padding:
            mask = self.padding_mask(tokens) if padding_mask is None else padding_mask
            x = positional(x, offset=offset, padding_mask=mask)
        else:
            x = positional(x, offset=offset)
        return self.drop(stack.embed_norm(x) if stack.embed_norm is not None else x)

    # -- the two halves -------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, Ls) token ids -> memory (B, Ls, d)."""
        mask = self.padding_mask(src) if src_padding_mask is None else src_padding_mask
        positional = self.positional if self.src_positional is None else self.src_positional
        x = self._embed(self.src_embed, self.encoder, positional, src, padding_mask=mask)
        native = encode_natively(self.encoder, x, mask) if self.native_pass else None
        if native is not None:
            return self.encoder.norm(native) if self.encoder.norm is not None else native
        for layer in self.encoder.layers:
            if layer_dropped(self.settings.encoder_layerdrop, self.training):
                continue
            if self.gradient_checkpointing and self.training:
                x = checkpoint(layer, x, mask, use_reentrant=False)
            else:
                x = layer(x, key_padding_mask=mask)
        return self.encoder.norm(x) if self.encoder.norm is not None else x

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor | None,
        memory_padding_mask: torch.Tensor | None = None,
        tgt_padding_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """tgt (B, Lt) -> logits (B, Lt, vocab). With ``cache``, tgt holds only the new
        tokens and earlier keys/values come from the cache.

        The target's padding is not masked unless ``tgt_padding_mask`` is given: targets
        are padded on the right, where the causal mask already hides the padding from
        every real token, and the start token of Marian and T5 *is* the pad token."""
        offset = cache.offset if cache is not None else 0
        x = self._embed(self.tgt_embed, self.decoder, self.positional, tgt, offset,
                        tgt_padding_mask)
        for i, layer in enumerate(self.decoder.layers):
            if cache is None and layer_dropped(self.settings.decoder_layerdrop, self.training):
                continue
            if self.gradient_checkpointing and self.training and cache is None:
                x = checkpoint(layer, x, memory, tgt_padding_mask, memory_padding_mask,
                               use_reentrant=False)
                continue
            x = layer(
                x, memory, self_padding_mask=tgt_padding_mask,
                memory_padding_mask=memory_padding_mask,
                cache=cache[i] if cache is not None else None,
            )
        if self.decoder.norm is not None:
            x = self.decoder.norm(x)
        if self.output_scale is not None:
            x = x * self.output_scale
        return self.lm_head(x)

    def static_decoder(self, memory: torch.Tensor, memory_padding_mask: torch.Tensor | None,
                       *, groups: int, length: int):
        """A :class:`~zoo.plugins.architectures.static_decoder.StaticDecoder` over
        ``memory`` for ``groups`` rows per source and at most ``length`` steps, or None
        when ``static_decoding`` is off or a part of the decoder needs the general path."""
        from .native_plan import refused
        from .static_decoder import StaticDecoder, refusal

        why = "static_decoding is off" if not self.static_decoding else refusal(self)
        if why is not None:
            refused(why)
            return None
        return StaticDecoder(self, memory, memory_padding_mask, groups=groups, length=length)

    def native_plan(self):
        """The one gate of zoo's native decoding step for this model
        (:class:`zoo.plugin_api.StaticDecoding`): the sealed plan of its decoder's
        layers, made once and kept, or the :class:`zoo.plugin_api.Refusal` saying why its
        steps stay in Python (in fixed buffers where :meth:`static_decoder` still allows
        it). Nothing is decoded; a call still checks its own rows and dtype."""
        from .static_decoder import gate

        return gate(self)

    def init_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding with :meth:`decode`."""
        return DecoderCache(len(self.decoder.layers))

    def generate(self, src: torch.Tensor, settings: GenerationSettings | None = None,
                 **changes) -> torch.Tensor:
        """``zoo.generate(self, src, settings, **changes)``: decode ``src`` (B, Ls) by the
        model's own settings (``self.generation``) with ``changes``, e.g.
        ``model.generate(src, num_beams=4, max_new_tokens=64)``."""
        from zoo.plugin_api import generate

        return generate(self, src, settings, **changes)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_padding_mask: torch.Tensor | None = None,
        tgt_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """src (B, Ls), tgt (B, Lt) token ids -> logits (B, Lt, vocab)."""
        if src_padding_mask is None:
            src_padding_mask = self.padding_mask(src)
        memory = self.encode(src, src_padding_mask)
        return self.decode(tgt, memory, src_padding_mask, tgt_padding_mask)
