"""The ``format`` family's base: :class:`Format`, what a reader of a foreign folder (a
transformers ``config.json`` and its safetensors) subclasses, and what every such
reader shares: :class:`Options` (a config read key by key, any key nobody read refused
by name), :data:`BOOKKEEPING` (transformers' keys that change nothing a model
computes) and the generation settings' two directions (:func:`generation_settings`,
:func:`generation_json`).

The docstrings of :class:`Format` are the family's contract; ``docs/contract/format.md``
is generated from them. zoo (:mod:`zoo.foreign`) calls the hooks: it reads the files
(bounded JSON, safetensors only), builds nothing until the recipe is mapped, and turns
anything but a zoo error raised in a hook into one :class:`~zoo.errors.FormatError`
naming the format and its plugin.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .decoding.settings import plugin_rule_settings
from .errors import ExportError, FormatError
from .kinds import Kind, kind_of, said
from .record import record_of
from .quantization import is_quantized
from .reranking import CONFIG_KEYS as SCORE_KEYS
from .tied import apart, weights_to_save

BOOKKEEPING = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
    "_name_or_path", "_commit_hash", "use_cache", "return_dict", "output_attentions",
    "output_hidden_states", "torchscript", "use_return_dict", "pruned_heads",
    "chunk_size_feed_forward", "tie_encoder_decoder",
    "finetuning_task", "problem_type", "tokenizer_class", "prefix", "task_specific_params",
    "id2label", "label2id", "num_labels", "gradient_checkpointing", "init_std",
    "initializer_range", "initializer_factor", "cross_attention_hidden_size",
    "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "unk_token_id",
    "mask_token_id", "decoder_start_token_id", "_attn_implementation_autoset",
    "use_return_dict",
    "output_scores", "return_dict_in_generate", "classifier_dropout",
    "classif_dropout", "is_encoder_decoder", "tf_legacy_loss",
    "use_bfloat16", "_from_model_config", "_num_labels",
}
"""Keys that change nothing a model computes from its weights, in any family: names,
bookkeeping, what a call returns, initialisation, the token ids (read with the
generation settings), heads zoo's model has no use for. ``tests/test_formats.py`` holds
each to transformers' meaning: GPT-2, BERT and BART with the key changed give the same
outputs from the same weights. A key that changes a model (``num_hidden_layers``,
``layer_types``) is read by the formats it concerns, and refused by the others."""

DECODER_FLAGS = frozenset({"is_decoder", "add_cross_attention"})
"""Keys that change nothing in a decoder or an encoder-decoder (transformers builds the
same model), but make an encoder (BERT's) a causal decoder: inert among a decoder
format's ``legacy`` keys, read (and refused when true) by the encoders'."""

GENERATION_KEYS = {
    "max_length", "min_length", "num_beams", "length_penalty", "early_stopping",
    "bad_words_ids", "forced_bos_token_id", "forced_eos_token_id", "no_repeat_ngram_size",
    "renormalize_logits", "do_sample", "temperature", "top_k", "top_p",
    "num_return_sequences", "repetition_penalty", "diversity_penalty", "num_beam_groups",
    "encoder_no_repeat_ngram_size", "max_new_tokens", "min_new_tokens", "typical_p",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "forced_decoder_ids", "remove_invalid_values", "output_past", "pad_token_id", "min_p",
}
"""Generation keys that older configs keep in config.json (read as generation settings)."""

AT_DEFAULT = {"tie_word_embeddings": True}
"""Keys of transformers' config base, as older releases wrote it into every config (each
tower's of a CLIP too), that change nothing at their default value where a family does
not read them: a format whose model has an output to tie reads ``tie_word_embeddings``
itself (each of zoo's does); one that does not read it (CLIP, ViT) has nothing to tie.
Another value, unread, is refused by name."""


class Options:
    """A config read key by key; ``done()`` refuses the keys nobody read."""

    def __init__(self, config: dict[str, Any], family: str) -> None:
        self.config, self.family, self.read = config, family, set()

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (``default`` when it is absent or null), marked read."""
        self.read.add(key)
        value = self.config.get(key, default)
        return default if value is None else value

    def need(self, key: str, allowed: Any, default: Any = None, why: str = "") -> Any:
        """The value of ``key`` (``default`` where the config leaves it out), refused
        unless it is ``allowed`` (a value or a tuple)."""
        value = self.get(key, default)
        ok = value in allowed if isinstance(allowed, tuple) else value == allowed
        if not ok:
            raise self.refuse(key, value, f"zoo maps {allowed!r}" + (f" ({why})" if why else ""))
        return value

    def count(self, key: str, what: str) -> int | None:
        """The value of ``key``: a whole number of at least 1, or None where it is absent
        or null; anything else (0, a bool, a float, text) refused by name, saying
        ``what`` zoo expresses."""
        value = self.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise self.refuse(key, value, what)
        return value

    def refuse(self, key: str, value: Any, what: str) -> FormatError:
        """The error that refuses ``key=value`` by name, saying what zoo expresses."""
        return FormatError(f"{self.family} config option {key}={value!r} is not one zoo can "
                           f"express: {what}. Nothing was loaded.")

    def done(self, known: set[str] = frozenset()) -> None:
        """Refuse, by name, the keys that were neither read nor known to change nothing
        (a cross-encoder's score activation is :func:`zoo.reranking.read_activation`'s)."""
        left = sorted(set(self.config) - self.read - BOOKKEEPING - GENERATION_KEYS - SCORE_KEYS
                      - set(known))
        for key in [k for k in left if k in AT_DEFAULT]:
            if self.config[key] not in (None, AT_DEFAULT[key]):
                raise self.refuse(key, self.config[key], f"{AT_DEFAULT[key]!r}, transformers' "
                                  "default (this family does not read the key)")
            left.remove(key)
        if left:
            raise FormatError(
                f"{self.family} config options zoo does not know: {left}. zoo maps only "
                "options whose effect it reproduces; nothing was loaded.")


# -- generation settings ---------------------------------------------------------------------------
KEPT = {"_from_model_config", "transformers_version", "use_cache", "output_attentions",
        "output_hidden_states", "return_dict_in_generate", "output_scores", "output_logits",
        "is_assistant", "cache_implementation"}
DEFAULTS = {"num_return_sequences": 1, "num_beam_groups": 1, "diversity_penalty": 0.0,
            "encoder_no_repeat_ngram_size": 0, "exponential_decay_length_penalty": None,
            "suppress_tokens": None, "begin_suppress_tokens": None, "forced_decoder_ids": None,
            "remove_invalid_values": False}
"""Settings zoo's decoding does not have, at the values that make them change nothing;
any other value is refused by name, whether or not the folder samples (a user who
samples later would get draws without it)."""
READ = {"decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id",
        "max_length", "min_length", "max_new_tokens", "min_new_tokens", "num_beams",
        "length_penalty", "early_stopping", "bad_words_ids", "forced_bos_token_id",
        "forced_eos_token_id", "no_repeat_ngram_size", "renormalize_logits", "do_sample",
        "temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff",
        "eta_cutoff", "repetition_penalty"}
TOP_K = 50
"""transformers' top_k when a config names none (0 there: no top-k filter)."""


def generation_settings(config: dict[str, Any], generation: dict[str, Any],
                        family: str, *, decoder_only: bool = False) -> dict[str, Any]:
    """``generation`` (generation_config.json; empty: the keys of ``config``) as zoo's
    generation settings; a setting zoo's decoding cannot follow is refused by name.

    ``decoder_only=True`` reads a language model's folder as transformers does: a model
    with no start token of its own (no ``bos_token_id``) starts and pads with its end
    token, and where the files name no length (neither ``max_length`` nor
    ``max_new_tokens``) it makes 20 new tokens after the prompt (a seq2seq folder's
    default is ``max_length=21``: 20 tokens after the start token)."""
    if decoder_only:
        return _decoder_only_settings(config, generation, family)
    plugins = plugin_rule_settings()
    source = generation or {k: v for k, v in config.items()
                            if k in READ or k in DEFAULTS or k in plugins}
    for key, value in source.items():
        if key in DEFAULTS and key not in plugins and value != DEFAULTS[key] and not (
                key == "num_return_sequences" and value is None):
            raise FormatError(f"{family} generation setting {key}={value!r} is not one zoo's "
                              f"decoding follows (it follows {sorted(READ)}).")
        if generation and key not in READ | set(DEFAULTS) | KEPT | set(plugins):
            raise FormatError(f"{family} generation setting {key!r} is not one zoo knows "
                              f"(zoo follows {sorted(READ)}; installed plugins' decoding "
                              f"rules read {sorted(plugins) or 'none'}).")

    def get(key: str, default: Any = None) -> Any:
        value = source.get(key)
        return default if value is None else value

    eos = get("eos_token_id")
    if eos is None:
        raise FormatError(f"{family}: the generation settings name no eos_token_id; zoo "
                          "needs the token that ends a sequence.")
    eos = [eos] if isinstance(eos, int) else list(eos)
    start = get("decoder_start_token_id", get("bos_token_id"))
    if start is None:
        raise FormatError(f"{family}: the generation settings name no decoder_start_token_id.")
    forbidden = []
    for words in get("bad_words_ids", []):
        if len(words) != 1:
            raise FormatError(f"{family} generation setting bad_words_ids holds {words!r}; zoo "
                              "forbids single tokens only.")
        forbidden.append(words[0])
    early = get("early_stopping", False)
    top_k = get("top_k", TOP_K)
    return {
        "start_id": start, "eos_ids": eos, "pad_id": get("pad_token_id", eos[0]),
        # transformers' default: 20 new tokens after the start token
        "max_length": get("max_length", 21), "min_length": get("min_length", 0),
        "num_beams": get("num_beams", 1), "length_penalty": get("length_penalty", 1.0),
        "early_stopping": early, "forbidden_ids": forbidden,
        "forced_bos_id": get("forced_bos_token_id"), "forced_eos_id": get("forced_eos_token_id"),
        "no_repeat_ngram_size": get("no_repeat_ngram_size", 0),
        "renormalize": get("renormalize_logits", False),
        "max_new_tokens": get("max_new_tokens"), "min_new_tokens": get("min_new_tokens"),
        "do_sample": get("do_sample", False), "temperature": get("temperature", 1.0),
        "top_k": top_k or None, "top_p": get("top_p", 1.0), "min_p": get("min_p"),
        "typical_p": get("typical_p", 1.0), "epsilon_cutoff": get("epsilon_cutoff", 0.0),
        "eta_cutoff": get("eta_cutoff", 0.0),
        "repetition_penalty": get("repetition_penalty", 1.0),
        "rule_settings": {k: v for k, v in source.items() if k in plugins},
    }


DEFAULT_NEW_TOKENS = 20
"""What transformers makes when a language model's files name no length: 20 new tokens
after the prompt."""


def _decoder_only_settings(config: dict[str, Any], generation: dict[str, Any],
                           family: str) -> dict[str, Any]:
    source = generation or config
    if source.get("decoder_start_token_id") is None and source.get("bos_token_id") is None:
        eos = source.get("eos_token_id")
        source = {**source, "bos_token_id": eos[0] if isinstance(eos, list) and eos else eos}
        generation, config = (source, config) if generation else (generation, source)
    data = generation_settings(config, generation, family)
    if source.get("max_length") is None and source.get("max_new_tokens") is None:
        data["max_new_tokens"] = DEFAULT_NEW_TOKENS
    return data


def generation_json(settings: dict[str, Any], *, decoder_only: bool = False) -> dict[str, Any]:
    """zoo's ``GenerationSettings`` data (at least ``start_id``, ``eos_ids``, ``pad_id``)
    as ``generation_config.json``: :func:`generation_settings` backwards. The start token
    is ``decoder_start_token_id`` of a seq2seq model, ``bos_token_id`` of a language
    model (``decoder_only=True``), as transformers' own folders name them."""
    get = settings.get
    start = "bos_token_id" if decoder_only else "decoder_start_token_id"
    out = {start: settings["start_id"],
           "eos_token_id": list(settings["eos_ids"]), "pad_token_id": settings["pad_id"]}
    # GNMT's length penalty is not transformers': such a model's beams stay zoo's, and
    # the folder decodes greedily by default, as transformers' own default
    beams = get("num_beams", 1) if get("length_penalty_form", "transformers") != "gnmt" else 1
    if "max_length" in settings:
        out["num_beams"] = beams
        if get("max_new_tokens") is None:  # (transformers warns where both are set)
            out["max_length"] = settings["max_length"]
    if beams > 1:
        out.update(length_penalty=get("length_penalty", 1.0),
                   early_stopping=get("early_stopping", False))
    if get("do_sample"):
        out.update(do_sample=True, temperature=get("temperature", 1.0),
                   top_k=get("top_k") or 0, top_p=get("top_p", 1.0))
        cutoffs = {"typical_p": get("typical_p", 1.0),
                   "epsilon_cutoff": get("epsilon_cutoff", 0.0),
                   "eta_cutoff": get("eta_cutoff", 0.0)}
        out.update({k: v for k, v in cutoffs.items() if v not in (1.0, 0.0)})
    if get("repetition_penalty", 1.0) != 1.0:
        out["repetition_penalty"] = get("repetition_penalty")
    optional = {"min_length": get("min_length"), "no_repeat_ngram_size": get("no_repeat_ngram_size"),
                "max_new_tokens": get("max_new_tokens"), "min_new_tokens": get("min_new_tokens"),
                "min_p": get("min_p"),
                "forced_bos_token_id": get("forced_bos_id"),
                "forced_eos_token_id": get("forced_eos_id"),
                "bad_words_ids": [[i] for i in get("forbidden_ids") or ()],
                "renormalize_logits": get("renormalize")}
    out.update({k: v for k, v in optional.items() if v or (v == 0 and "forced" in k)})
    out.update(get("rule_settings") or {})  # a plugin rule's own, read back by its name
    return out

# -- the base class --------------------------------------------------------------------------------
class Format:
    """A reader of one kind of foreign folder and, with the ``writes`` capability, a
    writer of an export target (a transformers family writes its own folders; an
    engine's target, such as CTranslate2, only writes). Register a subclass in the ``format`` family with the ``model_types`` it
    reads among its capabilities; zoo makes it with ``cls(None)``."""

    family: str = ""
    """The name errors call this kind of folder by (``marian``); also the recipe's name."""
    files: tuple[str, ...] = ()
    """File patterns building needs besides ``config.json``, ``generation_config.json``
    and the safetensors (the tokenizer's files: ``source.spm``, ``vocab.json``, ...)."""
    generates: bool = True
    """False for a model that generates no text (ViT): :meth:`generation` gives None."""
    example: dict[str, Any] | None = None
    """A small ``config.json`` of the family, as data (a few layers, a vocabulary of 32,
    its ``model_type`` included, as a folder's has it): the conformance kit maps it with
    :meth:`recipe`, writes the model and reads it back
    (``zoo.testing.check_component("format", NAME)``)."""
    legacy: frozenset[str] = frozenset()
    """Keys of older configs that the family's transformers class does not read: inert,
    beside the shared :data:`BOOKKEEPING`."""

    def __init__(self, settings: None = None) -> None:
        """Formats take no settings (the folder is the input)."""

    def options(self, config: dict[str, Any]) -> Options:
        """``config`` to read key by key, errors naming :attr:`family`; end with
        ``options.done(self.legacy)``."""
        return Options(config, self.family)

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        """The zoo recipe of ``config`` (``config.json`` as read), as data:
        ``{"name": ..., "description": ..., "architecture": {"name": "seq2seq",
        "settings": {...}}, "components": {slot: name or {"name", "settings"}}}``
        (``requires`` may be left out: a saved model records the distribution of each of
        its components, so that building it where your plugin is missing names the
        package to install). Every key of ``config`` is mapped, checked, or inert; any
        other key, and any value zoo cannot reproduce, raises
        :class:`~zoo.errors.FormatError` naming it, before a weight is read."""
        raise NotImplementedError(f"format {self.family!r} maps no config (recipe())")

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """``state`` (every tensor of the folder's safetensors, in the family's names) in
        zoo's names for the recipe's architecture (``docs/contract/format.md`` lists
        them). zoo then loads strictly: a tensor left over or missing is an error, and a
        tied matrix is given once (``tgt_embed.weight``; ``lm_head.weight`` only when the
        recipe unties it). ``state`` is the format's own to change or empty. The default
        keeps the names as they are."""
        return dict(state)

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """The matrices ``config`` ties, in the family's names: pairs of a name a file may
        store beside the one it stands for, and that one (``("lm_head.weight",
        "model.embed_tokens.weight")`` under ``tie_word_embeddings``). zoo refuses a
        folder that stores both with different values before :meth:`weights` is called,
        which then drops the first of each pair (zoo loads a tied matrix once). The
        default: none."""
        return []

    def generation(self, config: dict[str, Any],
                   generation: dict[str, Any]) -> dict[str, Any] | None:
        """How the model decodes, as :class:`~zoo.decoding.GenerationSettings` data, or
        None when it generates nothing. ``generation`` is ``generation_config.json``
        as read, ``{}`` when the folder has none: then the generation keys of an older
        ``config.json`` count. The default is :func:`generation_settings`: transformers'
        names mapped to zoo's, a setting zoo's decoding does not follow refused by
        name."""
        if not self.generates:
            return None
        return generation_settings(config, generation, self.family)

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None) -> tuple[dict, dict | None,
                                                        dict[str, torch.Tensor]]:
        """With ``writes="transformers"``: a zoo recipe, its state dict (each tied matrix
        once: a tied output matrix is not in it, only ``embed.weight``) and generation
        settings (as data; None for an encoder) as the family's ``config.json``,
        ``generation_config.json`` (None: none) and state dict; what the family cannot
        express raises FormatError naming it. Give a tied matrix once too, under the
        family's input name, with the config's ``tie_word_embeddings`` (transformers ties
        the output back); a tensor given under two names is written twice. The default
        :meth:`write` calls it."""
        raise FormatError(f"format {self.family!r} reads folders; it does not write them")

    def write(self, model: nn.Module, folder: Path, *, export: Callable[..., Path],
              vocabulary: Sequence[str] | None = None, tokenizer: Any = None,
              bos_id: int | None = None, eos_id: int | None = None,
              **options: Any) -> dict[str, Any]:
        """Write ``model`` into ``folder`` (new and empty: zoo moves it into place once
        this returns, and removes it when this raises), for the export target the
        ``writes`` capability names; returns what ``zoo-export.json`` says of loading
        it (``{"load": "...", ...}``). ``export(model, folder, format, **options)`` writes
        another target (a converter's input, say). ``vocabulary`` (the token of each id)
        and ``tokenizer`` (a folder of tokenizer files) come from a run that has them,
        ``bos_id`` and ``eos_id`` replace the model's own start and end tokens; a writer
        refuses an option it does not take (:func:`refuse_options`), by name.

        The default writes the transformers folder of this format's family:
        :meth:`export`'s three files, and the tokenizer's files (an imported model's own,
        else ``tokenizer``'s)."""
        refuse_options(options, "--format transformers")
        if is_quantized(model):
            raise ExportError("export the fp32 model: a transformers folder holds full "
                              "weights")
        record = record_of(model)
        kind = record.kind
        generation = None
        if kind is not None and kind.generates:
            start, end = start_and_end(model, bos_id, eos_id)
            generation = record.generation.model_dump(mode="json")
            generation.update(start_id=start, eos_ids=[end] + [
                i for i in generation.get("eos_ids", ()) if i != end])
        elif kind not in (Kind.ENCODER, Kind.IMAGE_TEXT):
            raise ExportError(f"--format transformers writes models that generate text, "
                              f"encoders and CLIPs; this {type(model).__name__} ({said(kind)}) "
                              "has no generation settings and is neither. Export it "
                              "with --format onnx.")
        from safetensors.torch import save_file

        state = {k: v.float() for k, v in weights_to_save(model).items()}
        config, settings, weights = self.export(record.recipe.to_dict(), state, generation)
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if settings is not None:
            (folder / "generation_config.json").write_text(json.dumps(settings, indent=2)
                                                           + "\n")
        save_file(apart(weights), str(folder / "model.safetensors"), metadata={"format": "pt"})
        imported = record.imported
        copy_tokenizer_files(imported.folder if imported is not None else tokenizer, folder)
        auto = {"language-model": "AutoModelForCausalLM", "encoder": "AutoModel",
                "image-text": "AutoModel"}.get(kind, "AutoModelForSeq2SeqLM")
        return {"family": self.family, "load": f"{auto}.from_pretrained"}


_MISSING = object()


class FormatAdapter:
    """A format written as a plain class (the contract before :class:`Format`, which
    needed ``recipe``, ``weights``, ``generation`` and ``files`` only), seen as a
    :class:`Format`: each hook or attribute the contract gained since and the class lacks
    is the base's default, which gives the earlier behaviour (``tied``: none; ``write``:
    through its ``export``)."""

    def __init__(self, reader: Any) -> None:
        object.__setattr__(self, "_reader", reader)

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._reader, name)
        except AttributeError:
            default = getattr(Format, name, _MISSING)
            if default is _MISSING or name.startswith("_"):
                raise
            return default.__get__(self) if callable(default) else default

    def __repr__(self) -> str:
        return f"FormatAdapter({self._reader!r})"


def as_format(reader: Any) -> Any:
    """``reader`` (what a format component's class made) as a :class:`Format`: itself
    where it is one, else through a :class:`FormatAdapter`, so that zoo reaches every
    format through the one contract, whatever release it was written against."""
    return reader if isinstance(reader, Format) else FormatAdapter(reader)


# -- what every writer shares ---------------------------------------------------------------------
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
"""The names of ids 0-3 (zoo's tasks: padding, start, end, unknown) in a default
vocabulary."""


def default_vocabulary(size: int) -> list[str]:
    """Token names for a model without a tokenizer: ``<pad> <s> </s> <unk>`` for ids 0-3,
    then the id itself (``"4"``, ``"5"``, ...)."""
    return [SPECIALS[i] if i < len(SPECIALS) else str(i) for i in range(size)]


def start_and_end(model: nn.Module, bos_id: int | None, eos_id: int | None) -> tuple[int, int]:
    """The decoder's start and end tokens: as given, else the model's own
    (``model.generation``), else zoo's tasks' (1 and 2)."""
    g = record_of(model).generation
    if bos_id is None:
        bos_id = g.start_id if g is not None else 1
    if eos_id is None:
        eos_id = g.eos_ids[0] if g is not None else 2
    return bos_id, eos_id


def refuse_options(options: dict[str, Any], writer: str) -> None:
    """One ExportError naming the options (set, not None) that ``writer`` does not take."""
    given = sorted(k for k, v in options.items() if v is not None)
    if given:
        hint = (" (--quantization is CTranslate2's: --format ctranslate2)"
                if "quantization" in given else "")
        raise ExportError(f"{writer} takes no option {', '.join(given)}{hint}")


def is_tokenizer_file(name: str) -> bool:
    """A transformers tokenizer's file: SentencePiece models (``source.spm``,
    ``spiece.model``), BPE merges, and the JSON files of the tokenizer and its vocabulary
    (``tokenizer.json``, ``tokenizer_config.json``, ``vocab.json``, ...)."""
    suffix = Path(name).suffix
    return suffix in (".spm", ".model", ".txt") or (
        suffix == ".json" and ("token" in name or "vocab" in name))


def copy_tokenizer_files(source: Any, folder: Path) -> None:
    """The tokenizer's files of the folder ``source`` (None: none), and its image
    processor's (``preprocessor_config.json``: CLIP's, ViT's), copied into ``folder``."""
    if source is None:
        return
    for path in Path(source).iterdir():
        if path.is_file() and (is_tokenizer_file(path.name)
                               or path.name == "preprocessor_config.json"):
            (folder / path.name).write_bytes(path.read_bytes())


__all__ = ["Format", "Options", "BOOKKEEPING", "DECODER_FLAGS", "GENERATION_KEYS",
           "generation_settings", "generation_json", "default_vocabulary", "start_and_end",
           "refuse_options", "is_tokenizer_file", "copy_tokenizer_files"]
