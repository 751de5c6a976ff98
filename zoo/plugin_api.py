"""The plugin API: everything a plugin's components subclass or call, in one place.

A plugin's hook module imports ``zoo.hookimpl`` (light: no torch); its component
modules import from here::

    from zoo.plugin_api import MultiHeadAttention, KVCache, Linear, RecipeError

Nothing a plugin needs lives in an underscored module, and a plugin imports
nothing else of zoo (``tests/test_layers.py`` holds the built-in plugins to that).
The contract each family's members honour is in ``docs/contract/``; the
conformance kit that checks it is :mod:`zoo.testing`.
"""

from __future__ import annotations

from .attention import (
    AttentionSettings,
    HeadNorm,
    InsideAttention,
    MultiHeadAttention,
    boolean_mask,
    relative_positions,
)
from .cache import DecoderCache, KVCache, LanguageModelCache
from .decoding import (
    GenerationSettings,
    beam_search,
    filter_logits,
    generate,
    greedy,
    length_penalty,
    sample,
    stream,
)
from .decoding.rules import Rule, Span
from .decoding.text import complete, stream_text, translate
from .format_base import (
    BOOKKEEPING,
    DECODER_FLAGS,
    Format,
    Options,
    copy_tokenizer_files,
    default_vocabulary,
    generation_json,
    generation_settings,
    is_tokenizer_file,
    refuse_options,
    start_and_end,
)
from .derived import derived as derived_copy
from .derived import fixed_weights, private_copy
from .derived import held as held_copy
from .derived import trusted as weights_fixed
from .embedding import Pooling, cosine, embed, pool, pooling_of
from .errors import (
    CapabilityError,
    ExportError,
    FormatError,
    MissingPluginError,
    PluginError,
    RecipeError,
    ZooError,
)
from .families import (
    ArchitectureCapabilities,
    AttentionCapabilities,
    BlockCapabilities,
    FFNCapabilities,
    FormatCapabilities,
    KernelCapabilities,
    LossCapabilities,
    NormCapabilities,
    PositionalCapabilities,
    RuleCapabilities,
    Slot,
    TaskCapabilities,
)
from .hardware import CPU
from .hardware import detect as detect_hardware
from .hookspecs import hookimpl
from .layer_flow import DataFlow, flow_of
from .kinds import (Encoder, ImageClassifier, ImageText, Kind, LanguageModel, Refusal,
                    Seq2SeqModel, StaticDecoding, PromptReading,
                    kind_of)
from .native import PRODUCTS as NATIVE_PRODUCTS
from .native import NativeLibrary
from .native import available as native_available
from .ops import (Dropout, DropPath, Linear, drop_path, dropout, layer_dropped, plain_linears,
                  rms_norm)
from .quantization import Int4Linear, QuantizedLinear, is_quantized
from .record import ModelRecord, record_of, update_record
from .resolver import filled
from .task import Task, TaskDataError, missing_debian_package

__all__ = [
    # hooks
    "hookimpl",
    # attention and positions inside attention
    "MultiHeadAttention", "AttentionSettings", "InsideAttention", "boolean_mask",
    "relative_positions", "KVCache", "DecoderCache", "LanguageModelCache",
    # layers
    "Linear", "Dropout", "dropout", "DropPath", "drop_path", "layer_dropped", "native_available",
    "QuantizedLinear", "Int4Linear", "is_quantized", "plain_linears", "rms_norm", "HeadNorm",
    # copies derived from weights (packed, joined), checked against them
    "derived_copy", "private_copy", "fixed_weights", "weights_fixed", "held_copy",
    # native code of a plugin's own, and the machine it runs on
    "NativeLibrary", "NATIVE_PRODUCTS", "detect_hardware", "CPU",
    # architectures, and the kinds of model they build
    "Slot", "Seq2SeqModel", "LanguageModel", "Encoder", "ImageClassifier", "ImageText", "kind_of",
    "Kind", "ModelRecord", "record_of", "update_record", "StaticDecoding", "PromptReading", "Refusal", "DataFlow", "flow_of",
    # decoding
    "generate", "stream", "translate", "complete", "stream_text", "GenerationSettings",
    "filter_logits", "length_penalty", "Rule", "Span",
    "greedy", "beam_search", "sample",  # deprecated: generate(...) with settings
    # sentence embeddings
    "embed", "pool", "pooling_of", "Pooling", "cosine",
    # formats
    "Format", "Options", "BOOKKEEPING", "DECODER_FLAGS", "generation_settings", "generation_json",
    "filled",
    # export targets (formats that write)
    "default_vocabulary", "start_and_end", "refuse_options", "is_tokenizer_file",
    "copy_tokenizer_files",
    # tasks
    "Task", "TaskDataError", "missing_debian_package",
    # capabilities
    "AttentionCapabilities", "KernelCapabilities", "PositionalCapabilities",
    "NormCapabilities", "FFNCapabilities", "BlockCapabilities", "ArchitectureCapabilities",
    "TaskCapabilities", "LossCapabilities", "FormatCapabilities", "RuleCapabilities",
    # errors
    "ZooError", "RecipeError", "CapabilityError", "PluginError", "MissingPluginError",
    "FormatError", "ExportError",
]
