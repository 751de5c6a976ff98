"""The decoder-only Transformer, a causal language model: GPT (Radford et al. 2018),
GPT-2 (Radford et al. 2019), LLaMA (Touvron et al. 2023) and their descendants.

Token embeddings (optionally scaled) plus absolute positions, or positions inside
attention (RoPE); N causal blocks; a final norm; logits through the embedding matrix
(tied) or an output layer of its own. The settings express the published models zoo
imports: GPT-2 (learned positions, pre-norm LayerNorm, tanh-GELU, tied, biases),
Llama, Mistral and Qwen2 (RoPE, RMSNorm, SwiGLU, grouped-query attention with
``n_kv_heads``, no biases, untied).

A batch of prompts is padded on the left, as generation pads them: the padding mask
keeps every real token from seeing the padding, and positions that count real tokens
(``learned`` with ``count: real``, as transformers' generate numbers them) start each
row at 0.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import ConfigDict, Field, model_validator
from torch import nn

from zoo.plugin_api import Dropout, GenerationSettings, LanguageModelCache, Linear, Slot

from .layer_kinds import LayerKinds, layers_of_kinds
from .seq2seq import MAX_FF, MAX_HEADS, MAX_LAYERS, MAX_LENGTH, MAX_VOCAB, MAX_WIDTH


class DecoderSettings(LayerKinds):
    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(gt=0, le=MAX_VOCAB)
    d_model: int = Field(768, gt=0, le=MAX_WIDTH)
    n_heads: int = Field(12, gt=0, le=MAX_HEADS)
    n_kv_heads: int | None = Field(None, gt=0, le=MAX_HEADS)
    """Key/value heads (grouped-query attention, Ainslie et al. 2023); None: n_heads."""
    head_dim: int | None = Field(None, gt=0, le=MAX_WIDTH)
    """The width of one head; None: d_model / n_heads."""
    d_ff: int = Field(3072, gt=0, le=MAX_FF)
    layers: int = Field(12, ge=1, le=MAX_LAYERS)
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    """Residual dropout and dropout on the embeddings (GPT-2's resid_pdrop, embd_pdrop)."""
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    activation_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    max_len: int = Field(1024, gt=0, le=MAX_LENGTH)
    norm_placement: Literal["post", "pre"] = "pre"
    final_norm: bool | None = None
    """A norm after the last block; None means: only with pre-norm."""
    tie_output: bool = True
    """The output projection is the embedding matrix (GPT-2); Llama's is its own."""
    scale_embeddings: bool = False
    """Multiply the embeddings by sqrt(d_model) (the paper's sec. 3.4; Gemma)."""
    output_bias: bool = False
    """A bias of the output projection, ``lm_head.bias`` (GPT-J's); tied or not."""
    pad_id: int | None = Field(None, ge=0)
    """The padding token, for a padding mask read from the tokens (None: padding is
    given as a mask; GPT-2 and Llama have no pad token of their own)."""
    bos_id: int | None = Field(None, ge=0)
    """The token a text begins with (GPT-2's <|endoftext|>, Llama's <s>), if any: a
    format sets it from the config's ``bos_token_id`` where that is a token of the
    vocabulary. It and ``eos_id`` make the model's default generation settings, which a
    folder's own generation settings replace."""
    eos_id: int = Field(0, ge=0)
    """The token that ends a text (a format sets it from ``eos_token_id``)."""
    logit_softcap: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Logits soft-capped to (-cap, cap): cap * tanh(logits / cap) (Gemma 2's 30)."""

    @model_validator(mode="after")
    def _check(self) -> "DecoderSettings":
        if self.head_dim is None and self.d_model % self.n_heads:
            divisors = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads "
                             f"{self.n_heads}; n_heads could be one of {divisors}")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            divisors = [h for h in range(1, self.n_heads + 1) if self.n_heads % h == 0]
            raise ValueError(f"n_kv_heads {self.n_kv_heads} does not divide n_heads "
                             f"{self.n_heads}; n_kv_heads could be one of {divisors}")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if value is not None and value >= self.vocab_size:
                raise ValueError(f"{name} {value} is not a token of a vocabulary of "
                                 f"{self.vocab_size} (ids start at 0)")
        return self


class CausalLM(nn.Module):
    """Decoder-only Transformer: forward(tokens, padding_mask=None, cache=None) ->
    logits (B, L, vocab) of each next token."""

    Settings = DecoderSettings
    slots = {
        "attention": Slot("attention", {"causal": True, "padding_mask": True},
                          "self-attention is causal, and left padding is skipped"),
        "kernel": Slot("kernel", {"causal": True, "arbitrary_mask": True},
                       "padding and causal masks", default="sdpa"),
        "positional": Slot("positional", default="learned"),
        "norm": Slot("norm", default="layernorm"),
        "ffn": Slot("ffn", default="gelu"),
        "block": Slot("block", {"role": "causal"}, default="causal"),
    }

    decoder_only = True
    """Decoded from a prompt (``zoo.generate(model, prompt)`` gives the new tokens)."""

    def __init__(self, settings: DecoderSettings, parts) -> None:
        super().__init__()
        s = self.settings = settings
        self.pad_id = s.pad_id
        self.decodes_incrementally = parts.parts["attention"].component.capabilities.kv_cache
        """False when the attention keeps no KV cache: decoding re-runs the prefix."""
        start = s.bos_id if s.bos_id is not None else s.eos_id
        self.generation = GenerationSettings(
            start_id=start, eos_ids=(s.eos_id,),
            pad_id=s.pad_id if s.pad_id is not None else s.eos_id, max_new_tokens=128)
        """How the model decodes (``zoo.generate``) unless told otherwise: greedy, 128 new
        tokens at most, ending at ``eos_id``. An imported model's own settings replace
        these."""
        self.positions_see_padding = parts.parts["positional"].component.capabilities.padding_aware
        self.max_positions = (s.max_len if parts.parts["positional"].component.capabilities
                              .max_length else None)
        """The most positions the model reads (a learned table's rows), prompt and new
        tokens together; None: any number. ``zoo.generate`` refuses more before it
        starts."""
        self.embed_scale = s.d_model ** 0.5 if s.scale_embeddings else 1.0
        self.embed = nn.Embedding(s.vocab_size, s.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.positional = parts.embedding_positions(d_model=s.d_model, max_len=s.max_len)
        self.drop = Dropout(s.dropout)
        self.layers = layers_of_kinds(
            parts, s.kinds(),
            factories=dict(d_model=s.d_model, n_heads=s.n_heads, d_ff=s.d_ff, dropout=s.dropout,
                           attention_dropout=s.attention_dropout, max_len=s.max_len,
                           activation_dropout=s.activation_dropout, head_dim=s.head_dim,
                           n_kv_heads=s.n_kv_heads),
            block=dict(d_model=s.d_model, dropout=s.dropout,
                       norm_first=s.norm_placement == "pre"))
        final = s.norm_placement == "pre" if s.final_norm is None else s.final_norm
        self.norm = parts.make("norm", dim=s.d_model) if final else None
        self.lm_head = Linear(s.d_model, s.vocab_size, bias=s.output_bias)
        if s.output_bias:
            nn.init.zeros_(self.lm_head.bias)
        if s.tie_output:
            self.lm_head.weight = self.embed.weight

    static_decoding = True
    """Decode the steps after the prompts through
    :class:`~zoo.plugins.architectures.static_lm.StaticLM` (fixed buffers, zoo's native
    step) when every part of the model allows it; False always takes the general path
    (the same tokens)."""

    def static_decoder(self, cache: LanguageModelCache, *, length: int):
        """A :class:`~zoo.plugins.architectures.static_lm.StaticLM` going on from the
        prompts ``cache`` holds for at most ``length`` steps, or None when
        ``static_decoding`` is off or a part of the model needs the general path."""
        from .native_plan import may_run, refused
        from .static_lm import StaticLM

        if not length or not cache.offset or cache[0].k is None:
            return None  # nothing to go on from, or no step to take
        if not may_run(cache[0].k):
            refused("it runs in float32 without autograd")
            return None
        plan = self.native_plan()
        if not plan:
            refused(plan.reason)
            return None
        static = StaticLM(self, cache, length=length, plan=plan)
        return static if static.native is not None else None

    def native_plan(self):
        """The one gate of zoo's native decoding step for this model
        (:class:`zoo.plugin_api.StaticDecoding`): the sealed plan of its layers, made once
        and kept, or the :class:`zoo.plugin_api.Refusal` saying why its steps stay in
        Python. Nothing is decoded; a call still checks its own rows and dtype."""
        from .static_lm import gate

        return gate(self)

    def padding_mask(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """(B, L) True at ``pad_id``, or None without one (give the mask instead)."""
        return None if self.pad_id is None else tokens.eq(self.pad_id)

    def init_cache(self) -> LanguageModelCache:
        """An empty cache for decoding step by step with :meth:`forward`."""
        return LanguageModelCache(len(self.layers))

    def _embed(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None,
               cache: LanguageModelCache | None) -> torch.Tensor:
        if cache is None or not cache.offset:
            return self._embed_at(tokens, 0, None, padding_mask)
        return self._embed_at(tokens, cache.offset,
                              cache.real_counts(tokens.shape[0], tokens.device), padding_mask)

    def _embed_at(self, tokens: torch.Tensor, offset: int, counts: torch.Tensor | None,
                  padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The embeddings of ``tokens`` after ``offset`` positions (padding included), or,
        for positions that count real tokens, after each row's ``counts`` of them."""
        x = self.embed(tokens) * self.embed_scale
        if not self.positions_see_padding:
            return self.drop(self.positional(x, offset=offset))
        # each row goes on from its own count
        return self.drop(self.positional(x, offset=0 if counts is None else counts,
                                         padding_mask=padding_mask))

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None,
                cache: LanguageModelCache | None = None, *,
                last_only: bool = False) -> torch.Tensor:
        """tokens (B, L) -> logits (B, L, vocab). ``padding_mask`` (B, L), True at
        padding (left padding for prompts; None: none, or ``pad_id``'s). With ``cache``,
        tokens are the new ones and earlier keys and values come from the cache.
        ``last_only``: the logits of the last position only (B, 1, vocab), the output
        layer run on one position a row."""
        x = self._hidden(tokens, padding_mask, cache)
        return self.logits(x[:, -1:] if last_only else x)

    def read_prompt(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None,
                    cache: LanguageModelCache | None = None) -> torch.Tensor:
        """:meth:`forward`'s logits of the last position only (B, vocab), through the
        module's call (its hooks run): :class:`zoo.plugin_api.PromptReading`."""
        return self(tokens, padding_mask, cache, last_only=True)[:, -1]

    def _hidden(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None,
                cache: LanguageModelCache | None) -> torch.Tensor:
        """The last layer's output (B, L, d) of :meth:`forward`."""
        if padding_mask is None and self.pad_id is not None and cache is None:
            padding_mask = self.padding_mask(tokens)
        if (padding_mask is not None and not torch.compiler.is_exporting()
                and not bool(padding_mask.any())):
            padding_mask = None  # (an exported graph keeps the mask: it is an input)
        x = self._embed(tokens, padding_mask, cache)
        keys = (cache.keys_padding(padding_mask, *tokens.shape, tokens.device)
                if cache is not None else padding_mask)
        for i, layer in enumerate(self.layers):
            x = layer(x, key_padding_mask=keys, cache=cache[i] if cache is not None else None)
            if padding_mask is not None:
                # a padded query attends to nothing; what it gives is zeroed, so that no
                # NaN reaches a real token through the next layer's values
                x = x.masked_fill(padding_mask[..., None], 0.0)
        return x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output (B, L, d) -> logits: the final norm, the output layer,
        and the soft cap where the settings set one."""
        if self.norm is not None:
            x = self.norm(x)
        logits = self.lm_head(x)
        cap = self.settings.logit_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def generate(self, prompt: torch.Tensor, settings: GenerationSettings | None = None,
                 **changes) -> torch.Tensor:
        """``zoo.generate(self, prompt, settings, **changes)``: the new tokens after each
        prompt (B, L, padded on the left; ``padding_mask=`` says where), by the model's
        own settings with ``changes`` (``do_sample=True, temperature=0.8, seed=0``)."""
        from zoo.plugin_api import generate

        return generate(self, prompt, settings, **changes)
