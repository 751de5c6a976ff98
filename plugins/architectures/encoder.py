"""The encoder-only Transformer: BERT (Devlin et al. 2019, "BERT: Pre-training of Deep
Bidirectional Transformers for Language Understanding") and the models of its shape
(MiniLM, Wang et al. 2020; the sentence encoders of Reimers and Gurevych 2019).

Token, position and token-type (segment) embeddings summed, a norm over the sum, then N
encoder blocks over every token at once (post-norm as BERT, or pre-norm with a final
norm), each token attending to every real token of its text. What comes out depends on
``head``:

- ``hidden``: the last layer's hidden states (B, L, d): what sentence embeddings pool
  (:func:`zoo.embed`), and BERT's ``last_hidden_state``;
- ``masked_lm``: logits (B, L, vocab) of each token, through BERT's prediction
  transform (a dense layer, GELU, a norm) and the embedding matrix (tied) plus a bias;
- ``classification``: logits (B, num_labels) of the text, from the pooler (a dense layer
  and tanh over the first token, ``[CLS]``).

``pooler`` keeps BERT's pooler for the ``hidden`` head too, as ``BertModel`` has it (its
weights load, ``pooled`` gives its output).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import ConfigDict, Field, model_validator
from torch import nn

from zoo.plugin_api import Dropout, Linear, RecipeError, Slot

from .layer_kinds import LayerKinds, layers_of_kinds
from .native_encoder import encode
from .seq2seq import MAX_FF, MAX_HEADS, MAX_LAYERS, MAX_LENGTH, MAX_VOCAB, MAX_WIDTH


class EncoderSettings(LayerKinds):
    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(gt=0, le=MAX_VOCAB)
    d_model: int = Field(768, gt=0, le=MAX_WIDTH)
    n_heads: int = Field(12, gt=0, le=MAX_HEADS)
    d_ff: int = Field(3072, gt=0, le=MAX_FF)
    layers: int = Field(12, ge=1, le=MAX_LAYERS)
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    """Dropout on the embeddings and the residuals (BERT's hidden_dropout_prob)."""
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    max_len: int = Field(512, gt=0, le=MAX_LENGTH)
    type_vocab_size: int = Field(2, ge=0, le=2**10)
    """Token types (segments A and B); 0: none (RoBERTa-style models have one)."""
    causal: bool = False
    """Each token attends to itself and those before it only (CLIP's text tower, whose
    vector is read at the end of the text); the attention must claim ``causal``."""
    norm_placement: Literal["post", "pre"] = "post"
    final_norm: bool | None = None
    """A norm after the last block; None means: only with pre-norm."""
    embedding_norm: bool = True
    """A norm over the summed embeddings (BERT's embeddings.LayerNorm)."""
    head: Literal["hidden", "masked_lm", "classification"] = "hidden"
    pooler: bool = True
    """BERT's pooler (a dense layer and tanh over the first token); the classification
    head needs it."""
    pooler_activation: Literal["tanh", "relu", "gelu"] = "tanh"
    """The pooler's activation: BERT's tanh, DistilBERT's ReLU (its pre_classifier), or
    ModernBERT's GELU (its head)."""
    pooler_norm: bool = False
    """A norm after the pooler's activation (ModernBERT's head: dense, GELU, norm)."""
    pooling: Literal["first", "mean"] = "first"
    """What the pooler reads: the first token (BERT's [CLS]), or the mean of the real
    tokens (ModernBERT's ``classifier_pooling: mean``)."""
    head_bias: bool = True
    """A bias in the dense layer of the pooler and of the masked-LM head (BERT's; not
    ModernBERT's, whose ``classifier_bias`` is false)."""
    num_labels: int = Field(2, gt=0, le=2**20)
    """Classes of the classification head."""
    pad_id: int | None = Field(0, ge=0)
    """The padding token (BERT's [PAD] is 0): the padding mask is read from the tokens
    unless one is given."""

    @model_validator(mode="after")
    def _check(self) -> "EncoderSettings":
        if self.d_model % self.n_heads:
            divisors = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads "
                             f"{self.n_heads}; n_heads could be one of {divisors}")
        if self.pad_id is not None and self.pad_id >= self.vocab_size:
            raise ValueError(f"pad_id {self.pad_id} is not a token of a vocabulary of "
                             f"{self.vocab_size} (ids start at 0)")
        if self.head == "classification" and not self.pooler:
            raise ValueError("head 'classification' reads the pooler: set pooler: true")
        return self


ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu,
               "gelu": torch.nn.functional.gelu}
"""The pooler's activations by ``pooler_activation``."""


class MaskedLMHead(nn.Module):
    """BERT's prediction head: dense, GELU, norm, then the (tied) embedding matrix and a
    bias of its own."""

    def __init__(self, d_model: int, vocab_size: int, norm: nn.Module,
                 bias: bool = True) -> None:
        super().__init__()
        self.dense = Linear(d_model, d_model, bias=bias)
        self.act = nn.GELU()
        self.norm = norm
        self.decoder = Linear(d_model, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """hidden states (B, L, d) -> logits (B, L, vocab)."""
        return self.decoder(self.norm(self.act(self.dense(x)))) + self.bias


def causal(parts, factories: dict) -> dict:
    """``factories`` with make_attention making each attention causal; refused by name
    when the attention does not claim it."""
    attention = parts.parts["attention"].component
    if not attention.capabilities.causal:
        raise RecipeError(f"encoder setting causal: true needs an attention that claims "
                          f"'causal', and {attention.name!r} does not; use 'vanilla'")
    make = factories["make_attention"]
    return {**factories, "make_attention": lambda **kwargs: make(**{**kwargs, "causal": True})}


class Encoder(nn.Module):
    """Encoder-only Transformer: forward(tokens, padding_mask=None, token_types=None) ->
    the ``head``'s output (see the module)."""

    Settings = EncoderSettings
    slots = {
        "attention": Slot("attention", {"padding_mask": True},
                          "every token attends to every real token"),
        "kernel": Slot("kernel", {"arbitrary_mask": True}, "the padding mask", default="sdpa"),
        "positional": Slot("positional", default="learned"),
        "relative": Slot("positional", {"kind": "bias"}, "a bias of the scores by the "
                         "distance, beside the absolute positions (MPNet)", optional=True),
        "norm": Slot("norm", default="layernorm"),
        "ffn": Slot("ffn", default="gelu"),
        "block": Slot("block", {"role": "encoder"}, default="encoder"),
    }

    native_pass = True
    """Set False (on the class or one model) to keep every pass in Python; else a pass
    over few rows with fixed weights runs in zoo's native code (:mod:`.native_encoder`)."""

    encoder_only = True
    """Reads whole texts and decodes nothing (``zoo.embed`` pools its hidden states)."""

    def __init__(self, settings: EncoderSettings, parts) -> None:
        super().__init__()
        s = self.settings = settings
        self.pad_id = s.pad_id
        self.positions_see_padding = parts.parts["positional"].component.capabilities.padding_aware
        self.embed = nn.Embedding(s.vocab_size, s.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.token_types = nn.Embedding(s.type_vocab_size, s.d_model) if s.type_vocab_size \
            else None
        if self.token_types is not None:
            nn.init.normal_(self.token_types.weight, std=0.02)
        self.positional = parts.embedding_positions(d_model=s.d_model, max_len=s.max_len)
        self.layers = layers_of_kinds(
            parts, s.kinds(),
            factories=dict(d_model=s.d_model, n_heads=s.n_heads, d_ff=s.d_ff, dropout=s.dropout,
                           attention_dropout=s.attention_dropout, max_len=s.max_len),
            block=dict(d_model=s.d_model, dropout=s.dropout,
                       norm_first=s.norm_placement == "pre"),
            adapt=causal if s.causal else None)

        def norm() -> nn.Module:
            return parts.make("norm", dim=s.d_model)

        self.embed_norm = norm() if s.embedding_norm else None
        self.drop = Dropout(s.dropout)
        final = s.norm_placement == "pre" if s.final_norm is None else s.final_norm
        self.norm = norm() if final else None
        self.pooler = Linear(s.d_model, s.d_model, bias=s.head_bias) if s.pooler else None
        self.pooler_norm = norm() if s.pooler and s.pooler_norm else None
        self.lm_head = MaskedLMHead(s.d_model, s.vocab_size, norm(), bias=s.head_bias) \
            if s.head == "masked_lm" else None
        if self.lm_head is not None:
            self.lm_head.decoder.weight = self.embed.weight
        self.classifier = Linear(s.d_model, s.num_labels) if s.head == "classification" \
            else None
        self.classifier_drop = Dropout(s.dropout)

    def padding_mask(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """(B, L) True at ``pad_id``, or None without one (give the mask instead)."""
        return None if self.pad_id is None else tokens.eq(self.pad_id)

    def hidden_states(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None,
                      token_types: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, L) -> the last layer's hidden states (B, L, d). ``padding_mask``
        (B, L) True at padding (None: ``pad_id``'s); ``token_types`` (B, L) each token's
        segment (None: all 0). Padding's states mean nothing (pooling and heads skip them):
        where the layers ran in native code (:mod:`.native_encoder`), which leaves padding
        out, they are the final norm's of zeros."""
        if padding_mask is None:
            padding_mask = self.padding_mask(tokens)
        x = self.embed(tokens)
        if self.token_types is not None:
            types = torch.zeros_like(tokens) if token_types is None else token_types
            x = x + self.token_types(types)
        if self.positions_see_padding:
            x = self.positional(x, offset=0, padding_mask=padding_mask)
        else:
            x = self.positional(x, offset=0)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        x = self.drop(x)
        keys = padding_mask
        if (keys is not None and not torch.compiler.is_exporting()
                and not bool(keys.any())):
            keys = None  # (an exported graph keeps the mask: it is an input)
        native = encode(self, x, keys) if self.native_pass else None
        if native is not None:
            x = native
        else:
            for layer in self.layers:
                x = layer(x, key_padding_mask=keys)
        return self.norm(x) if self.norm is not None else x

    def pooled(self, hidden: torch.Tensor,
               padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """BERT's pooler output (B, d): tanh (or ``pooler_activation``) of a dense layer
        over the first token (or the real tokens' mean, ``pooling: mean``; ``padding_mask``
        (B, L) True at padding), normed where ``pooler_norm`` says."""
        if self.pooler is None:
            raise ValueError("this encoder has no pooler (pooler: false)")
        if self.settings.pooling == "mean":
            real = (torch.ones_like(hidden[..., 0]) if padding_mask is None
                    else (~padding_mask).to(hidden.dtype))[..., None]
            first = (hidden * real).sum(1) / real.sum(1)
        else:
            first = hidden[:, 0]
        out = ACTIVATIONS[self.settings.pooler_activation](self.pooler(first))
        return self.pooler_norm(out) if self.pooler_norm is not None else out

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None,
                token_types: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, L) -> hidden states (B, L, d), masked-LM logits (B, L, vocab) or
        class logits (B, num_labels), by ``head``."""
        if padding_mask is None:
            padding_mask = self.padding_mask(tokens)
        hidden = self.hidden_states(tokens, padding_mask, token_types)
        if self.lm_head is not None:
            return self.lm_head(hidden)
        if self.classifier is not None:
            return self.classifier(self.classifier_drop(self.pooled(hidden, padding_mask)))
        return hidden
