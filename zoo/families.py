"""The component families, their call contracts and capability models.

A family is a kind of interchangeable part. Every member honours the family's
call contract (written here, and in ``docs/concepts.md``) and declares what it
can do as a capabilities record: plain data, checked against a recipe before
anything is built. This module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from .deprecations import warn_deprecated

from .kinds import Kind


class Capabilities(BaseModel):
    """Base of every family's capability record: frozen, no unknown fields. A claim (a
    capability that lets a component fill more slots) is False until the component
    declares it, so the checks that refuse bad combinations hold for every plugin."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class AttentionCapabilities(Capabilities):
    """What an attention mechanism can do."""

    causal: bool = False
    """Built with ``causal=True``, position t sees only positions up to t (a decoder's
    self-attention)."""
    cross_attention: bool = False
    """Built with ``cross=True``, takes keys and values from another sequence (``context``)."""
    padding_mask: bool = False
    """Honours ``key_padding_mask`` (B, Lk), True at padding: padded keys change nothing."""
    arbitrary_mask: bool = False
    """Honours a boolean ``attn_mask`` (Lq, Lk) or (B, Lq, Lk), True where attending is
    allowed."""
    kv_cache: bool = False
    """Decodes incrementally with a ``KVCache``: a prefix, then a token at a time, gives what
    the whole sequence gives."""
    uses_kernel: bool = True
    """Computes its scores through the ``kernel`` slot (so a kernel that takes no float
    bias cannot serve bias positions). Declare False when the kernel is not called."""
    positions: tuple[str, ...] = ()
    """Positional kinds it applies inside attention: ``rotary``, ``bias``, ``relative``,
    ``disentangled``."""
    needs_cuda: bool = False
    """Runs only on a CUDA device."""


class KernelCapabilities(Capabilities):
    """What an attention kernel can do, and what it needs."""

    causal: bool = False
    """Honours ``is_causal=True`` (square scores: query i sees keys up to i)."""
    arbitrary_mask: bool = False
    """Honours a boolean ``attn_mask``, True where attending is allowed, broadcast to
    (B, H, Lq, Lk)."""
    dropout: bool = False
    """Drops attention weights with probability ``dropout_p``."""
    bias: bool = False
    """Accepts a float ``attn_mask`` added to the scores (ALiBi, T5 bias)."""
    needs_cuda: bool = False
    """Runs only on CUDA tensors."""
    requires_package: str | None = None
    """Import name of an optional dependency the kernel needs."""


class PositionalCapabilities(Capabilities):
    """How a positional encoding acts, and its limits."""

    kind: Literal["absolute", "rotary", "bias", "relative", "disentangled", "none"]
    """``absolute`` is added to the embeddings; ``rotary``, ``bias``, ``relative`` and
    ``disentangled`` (DeBERTa's table, which the attention projects itself) act inside
    attention (an attention applies them only if its ``positions`` lists the kind);
    ``none`` adds nothing. Every positional component declares it."""
    learned: bool = False
    """Has trained parameters."""
    max_length: bool = False
    """Covers only positions below a set ``max_len``."""
    per_layer: bool = False
    """Inside-attention kinds: one module (own parameters) per attention layer, rather
    than one shared by all layers of a stack (as T5 shares its bias)."""
    padding_aware: bool = False
    """Absolute kinds: ``forward`` also takes ``padding_mask=`` (B, L), True at padding,
    and the architecture gives it, so positions may count the real tokens only
    (fairseq's, RoBERTa's, M2M100's); without it a component sees only the embeddings
    and the offset."""


class NormCapabilities(Capabilities):
    """What a normalisation layer computes (descriptions, not claims)."""

    centered: bool = True
    """Subtracts the mean (LayerNorm) or not (RMSNorm)."""
    bias: bool = True
    """Has a learned bias."""


class FFNCapabilities(Capabilities):
    """What a feed-forward network computes (a description, not a claim)."""

    gated: bool = False
    """A gated linear unit (SwiGLU, GEGLU): two input projections multiplied."""


class BlockCapabilities(Capabilities):
    """Where a block goes: an encoder's or a decoder's stack."""

    role: Literal["encoder", "decoder", "causal"]
    """``encoder``: ``module(x, key_padding_mask=None)``; ``decoder``: ``module(x, memory,
    self_padding_mask=None, memory_padding_mask=None, cache=None)``; ``causal`` (a
    decoder-only language model's layer): ``module(x, key_padding_mask=None,
    cache=None)``, causal over x, the mask and a ``KVCache`` over every key so far."""
    norm_placements: tuple[Literal["post", "pre"], ...] = ("post", "pre")
    """The architecture's ``norm_placement`` values the block honours (its ``norm_first``
    argument): both by default; a block that exists in one layout only (GPT-NeoX's
    parallel block: ``("pre",)``) says so, the conformance kit checks only those, and a
    recipe asking for another is refused by name before anything is built."""


class ArchitectureCapabilities(Capabilities):
    """What a whole model takes and gives, and what kind of model it is."""

    inputs: Literal["tokens", "images", "images-and-tokens"]
    """What the model reads."""
    outputs: Literal["tokens", "classes", "vectors"]
    """What its logits are over (``vectors``: hidden states, which a use pools)."""
    kind: Kind | None = None
    """What the engine, the CLI and export may call on it: ``seq2seq``,
    ``language-model``, ``encoder``, ``image-classifier`` or ``image-text``, each a protocol of the plugin
    API (``zoo.plugin_api.Seq2SeqModel``, ...) its class is checked against. Left out (an
    architecture of an older plugin), zoo infers it with a DeprecationWarning."""


class LossCapabilities(Capabilities):
    """What a training loss honours."""

    ignore_index: bool = False
    """Targets equal to ``ignore_index`` (padding) add nothing to the loss and are not
    counted in its mean. Sequence tasks need it."""


class FormatCapabilities(Capabilities):
    """Which foreign folders a format reads, and what it writes: an export target of
    ``zoo export`` is a format too."""

    model_types: tuple[str, ...] = ()
    """The ``model_type`` values of a transformers ``config.json`` it reads (``marian``)."""
    writes: str | None = None
    """The export target it writes, by the name ``zoo export --format`` takes
    (``transformers``, ``ctranslate2``, ``onnx``, or a plugin's own); several formats may
    write one target (each transformers family), tried in turn until one expresses the
    model. None: it only reads."""
    exports: bool = False
    """The former way to say ``writes="transformers"`` (still taken, with a
    DeprecationWarning)."""
    overrides: tuple[str, ...] = ()
    """The ``model_type`` values it reads in place of another format that lists them too
    (two formats claiming one type are refused unless one says it overrides)."""

    @model_validator(mode="after")
    def _former_exports(self) -> "FormatCapabilities":
        if self.exports:
            warn_deprecated("format-exports", "the format capability exports=True is now "
                            "writes='transformers'", stacklevel=4)
        return self

    @property
    def target(self) -> str | None:
        """The export target it writes: ``writes``, or ``transformers`` where an older
        format says ``exports``."""
        return self.writes or ("transformers" if self.exports else None)


class RuleCapabilities(Capabilities):
    """Where a decoding rule acts on each step's scores."""

    sampling: bool = False
    """Only when sampling (``do_sample``): a filter of the distribution drawn from
    (transformers' warpers: temperature, top-k, top-p, ...). False: every decoding
    (transformers' processors: repetition penalty, forced tokens, ...)."""
    order: int = 0
    """Its place among the rules of its stage, smallest first; rules of one order run in
    the order of their names. The built-ins follow transformers' order in steps of 100
    (``docs/decoding.md`` lists them), so a plugin's rule goes between two of them with a
    number in between."""
    replaces: tuple[str, ...] = ()
    """Rules (by name: ``min-p``) this one stands in for: while it is registered they are
    never built, so a rule that extends a built-in one (min-p with
    ``min_tokens_to_keep``) reads the built-in's settings beside its own and applies
    them alone, never twice."""


class TaskCapabilities(Capabilities):
    """The architectures a task trains."""

    architectures: tuple[str, ...] = ()
    """Architecture names whose models the task can feed (empty: any)."""


@dataclass(frozen=True)
class Family:
    """A kind of interchangeable part: its name, contract, capability model and hook."""

    name: str
    summary: str
    capabilities: type[Capabilities]
    hook: str
    """The pluggy hook through which plugins register members."""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "attention",
            "Attention mechanisms: projections, positions inside attention, KV cache. "
            "Built as cls(settings, d_model=, n_heads=, dropout=, kernel=, positional=, "
            "causal=, cross=); called as module(x, context=None, *, key_padding_mask=None, "
            "attn_mask=None, cache=None) -> (B, Lq, d_model).",
            AttentionCapabilities,
            "register_attentions",
        ),
        Family(
            "kernel",
            "Attention kernels: a function fn(q, k, v, *, attn_mask=None, is_causal=False, "
            "dropout_p=0.0, scale=None) over (B, H, L, D) tensors -> (B, H, Lq, D). "
            "attn_mask is boolean (True where attention is allowed) or float (added to "
            "the scores), broadcastable to (B, H, Lq, Lk).",
            KernelCapabilities,
            "register_kernels",
        ),
        Family(
            "positional",
            "Positional encodings. absolute: cls(settings, d_model=, max_len=) called as "
            "module(x, offset=0) -> x plus positions. Inside attention: cls(settings, "
            "d_model=, n_heads=, max_len=, causal=), d_model being the width attention "
            "works in (n_heads x head_dim), handed to each self-attention as "
            "positional=; rotary: rotate(x (B, H, L, D), positions (L,)); bias: "
            "bias(rel) -> (H, *rel.shape) added to the scores, rel = key position - query "
            "position; relative: scores(q, rel) and values_term(weights, rel) or None, "
            "and content_query(q) (Shaw et al., Transformer-XL).",
            PositionalCapabilities,
            "register_positionals",
        ),
        Family(
            "norm",
            "Normalisation over the last dimension: cls(settings, dim=); module(x) -> x.",
            NormCapabilities,
            "register_norms",
        ),
        Family(
            "ffn",
            "Position-wise feed-forward networks: cls(settings, d_model=, d_ff=, dropout=); "
            "module(x) -> x.",
            FFNCapabilities,
            "register_ffns",
        ),
        Family(
            "block",
            "Transformer layers built from an attention, a norm and an ffn factory. "
            "encoder: module(x, key_padding_mask=None) -> x; decoder: module(x, memory, "
            "self_padding_mask=None, memory_padding_mask=None, cache=None) -> x.",
            BlockCapabilities,
            "register_blocks",
        ),
        Family(
            "architecture",
            "Whole models. cls(settings, parts) where parts builds each slot's component.",
            ArchitectureCapabilities,
            "register_architectures",
        ),
        Family(
            "loss",
            "Training losses: cls(settings); module(logits (N, C), target (N,), "
            "ignore_index=-100) -> the mean loss over the targets that are not "
            "ignore_index, a 0-d tensor. A training recipe names one (loss: focal).",
            LossCapabilities,
            "register_losses",
        ),
        Family(
            "format",
            "Foreign model formats (a transformers folder, say): a subclass of "
            "zoo.plugin_api.Format, built as cls(None), with files (the patterns to fetch), "
            "recipe(config) -> a recipe as data, weights(state, config) -> the state dict "
            "in zoo's names, generation(config, generation) -> zoo's generation settings "
            "as data; and, with exports, export(recipe, state, generation) -> (config, "
            "generation_config, state). The contract: docs/contract/format.md.",
            FormatCapabilities,
            "register_formats",
        ),
        Family(
            "rule",
            "Decoding rules (logits processors): a subclass of zoo.plugin_api.Rule, built "
            "as cls(settings, span=) from the generation settings its Settings names; "
            "called as rule(tokens (N, T), scores (N, V)) -> scores at every step where "
            "Rule.wanted(settings, span) holds. The contract: docs/contract/rule.md.",
            RuleCapabilities,
            "register_rules",
        ),
        Family(
            "task",
            "Training tasks: data, collate, loss and metrics.",
            TaskCapabilities,
            "register_tasks",
        ),
    )
}


@dataclass(frozen=True)
class Slot:
    """A place in an architecture that a recipe fills with a component.

    ``requires`` maps capability fields to the values this slot needs, e.g.
    ``{"causal": True}``; ``why`` says in words what needs them. An ``optional`` slot
    with no default may be left empty: the architecture then builds without it.
    """

    family: str
    requires: dict[str, object] = field(default_factory=dict)
    why: str = ""
    default: str | None = None
    optional: bool = False
