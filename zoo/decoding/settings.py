"""How a model decodes: :class:`GenerationSettings`, the one description of a decoding
that every built model carries as ``model.generation``.

A model imported from the Hub takes them from its ``generation_config.json`` (its start
and end tokens, beams, length penalty, forbidden tokens, sampling), a trained run from
its task (the task's token ids and beam), and a model built from a zoo recipe has its
architecture's defaults. :func:`zoo.generate` decodes by them; a call changes any of
them by name (``zoo.generate(model, src, num_beams=1, max_new_tokens=64)``).

The names are transformers' ``GenerationConfig`` names where zoo follows the same rule,
so a user of ``generate`` there reads them without a table: lengths count the start
token (``max_length`` 512 allows 511 new tokens) unless ``max_new_tokens`` is given.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .._text import describe_validation_error, did_you_mean, validate_plain
from ..errors import PluginError, RecipeError
from ..registry import Component, registry

OLD_NAMES = {"strategy": "num_beams / do_sample", "beam_size": "num_beams",
             "bos_id": "start_id", "eos_id": "eos_ids", "alpha": "length_penalty"}
"""The keyword arguments of zoo's first decoding functions, and the settings that took
their place; ``generate`` still takes them, with a DeprecationWarning."""


MAX_LENGTH_PENALTY = 10.0
"""The largest length penalty either way (published configs use 0.6 to 2): a length of a
million tokens to the tenth power is still a float, to the 10^308th it overflows."""


class GenerationSettings(BaseModel):
    """How a model decodes by default (transformers' ``generation_config.json``, in zoo's
    names where they differ: ``start_id``, ``eos_ids``, ``forbidden_ids``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    start_id: int = Field(ge=0)
    """The decoder's first token (``decoder_start_token_id``)."""
    eos_ids: tuple[Annotated[int, Field(ge=0)], ...] = Field(min_length=1)
    """Tokens that end a sequence (``eos_token_id``, one or several; at least one: a
    model that should never stop names a token it never makes, and ``max_new_tokens``
    bounds it). Every id a model's settings name is a token of its vocabulary: a folder
    whose generation settings name one past it is refused when it is read."""
    pad_id: int = Field(ge=0)
    """What fills a sequence after its end (``pad_token_id``)."""
    max_length: int = Field(20, gt=1)
    """The longest output, the start token counted (``max_length``)."""
    max_new_tokens: int | None = Field(None, ge=1)
    """The most new tokens, the start token not counted; when set it takes the place of
    ``max_length`` (as in transformers)."""
    source_length_limit: tuple[Annotated[float, Field(ge=0)], Annotated[int, Field(ge=1)]] | None \
        = None
    """``(a, b)``: a sequence-to-sequence model makes at most ``a`` x its sources' length
    (in tokens, padding counted) + ``b`` new tokens, never past ``max_length`` (fairseq's
    ``--max-len-a`` and ``--max-len-b``; Marian's ``--max-length-factor``): a trained
    translation task's limit. ``max_new_tokens``, when given, takes its place."""
    min_length: int = Field(0, ge=0)
    """No end token before this length, the start token counted (``min_length``)."""
    min_new_tokens: int | None = Field(None, ge=0)
    """No end token before this many new tokens; takes the place of ``min_length``."""

    num_beams: int = Field(1, ge=1)
    """1: one sequence per source (greedy, or sampled with ``do_sample``); more: beam
    search."""
    length_penalty: float = Field(1.0, ge=-MAX_LENGTH_PENALTY, le=MAX_LENGTH_PENALTY)
    """Beam search ranks a finished hypothesis by its summed log-probability over a
    penalty of its length (the new tokens, the end token counted): ``length **
    length_penalty`` (transformers' form), or GNMT's ``((5 + length) / 6) **
    length_penalty`` (``length_penalty_form="gnmt"``, Wu et al. 2016, eq. 14)."""
    length_penalty_form: Literal["transformers", "gnmt"] = "transformers"
    """Which penalty, and which hypotheses may finish: with ``"transformers"`` an ending
    candidate joins the finished ones only when it is among the ``num_beams`` best of the
    step, as transformers' ``generate`` does; with ``"gnmt"`` (zoo's trained models)
    every ending candidate the search looked at does, so that with
    ``early_stopping="never"`` a beam as wide as the candidates finds the exact best."""
    early_stopping: bool | Literal["never"] = False
    """When beam search stops (transformers' flag): ``True`` once ``num_beams``
    hypotheses have finished; ``False`` once the best running one, at its present
    length, cannot beat the worst of them; ``"never"`` once it cannot at any length
    left (an exact bound: the search then returns what an unbounded one would)."""

    do_sample: bool = False
    """Draw each next token from the model's distribution (after the rules and the
    filters below) instead of taking the most likely."""
    temperature: float = Field(1.0, gt=0)
    """Divides the logits before sampling: below 1 sharper, above 1 flatter."""
    top_k: int | None = Field(None, ge=1)
    """Sample among the ``top_k`` most likely tokens only (None: all)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Sample among the smallest set of most likely tokens whose probability reaches
    ``top_p`` (nucleus sampling, Holtzman et al. 2020; 1: all)."""
    min_p: float | None = Field(None, ge=0, le=1)
    """Sample among the tokens at least ``min_p`` times as likely as the most likely."""
    typical_p: float = Field(1.0, gt=0, le=1)
    """Sample among the tokens whose surprise is closest to the distribution's entropy,
    the smallest such set whose probability reaches ``typical_p`` (locally typical
    sampling, Meister et al. 2023; 1: all)."""
    epsilon_cutoff: float = Field(0.0, ge=0, lt=1)
    """Sample among the tokens at least this probable (epsilon sampling, Hewitt et al.
    2022; 0: all)."""
    eta_cutoff: float = Field(0.0, ge=0, lt=1)
    """Sample among the tokens at least ``min(eta, sqrt(eta) * exp(-entropy))`` probable
    (eta sampling, Hewitt et al. 2022; 0: all)."""
    seed: int | None = Field(None, ge=0, lt=2**32)
    """Seeds the sampler's own generator, so that a sampled run repeats exactly (None:
    torch's global generator): 0 to 2**32 - 1, what its Mersenne Twister keeps (a larger
    seed would draw the tokens of its lower 32 bits)."""

    repetition_penalty: float = Field(1.0, gt=0)
    """A token already in the sequence has its logit divided by this when positive and
    multiplied when negative (Keskar et al. 2019, CTRL; 1: off)."""
    forbidden_ids: tuple[Annotated[int, Field(ge=0)], ...] = ()
    """Tokens never generated (``bad_words_ids`` of one token each: Marian's pad)."""
    forced_bos_id: int | None = Field(None, ge=0)
    """The token forced right after the start token (BART, mBART-50's language)."""
    forced_eos_id: int | None = Field(None, ge=0)
    """The token forced at the last step, when the maximum length is reached."""
    no_repeat_ngram_size: int = Field(0, ge=0)
    """No n-gram of this size occurs twice in a sequence (0: off)."""
    renormalize: bool = False
    """Normalise the log-probabilities again after the rules (``renormalize_logits``)."""
    rule_settings: dict[str, Any] = {}
    """The settings of decoding rules that plugins add (family ``rule``), by the names
    their ``Settings`` give; ``zoo.generate`` takes them by name like every other
    setting, and a name no installed rule reads is refused."""

    @model_validator(mode="after")
    def _one_way(self) -> "GenerationSettings":
        if self.do_sample and self.num_beams > 1:
            raise ValueError("do_sample with num_beams > 1 (beam sampling) is not one of "
                             "zoo's decodings: sample with num_beams=1, or search with "
                             "do_sample=False")
        if self.rule_settings:
            readers = plugin_rule_settings()
            unknown = sorted(set(self.rule_settings) - set(readers))
            if unknown:
                raise ValueError(f"rule_settings names {unknown}, which no installed "
                                 f"decoding rule reads (plugins' rules read "
                                 f"{sorted(readers) or 'none'})")
            for key, value in self.rule_settings.items():
                readers[key].validate_settings({key: value})
        return self

    def length_limit(self, start: int, source: int | None = None) -> int:
        """The longest sequence, counted with its ``start`` tokens (the start token, or a
        prompt), for sources of ``source`` tokens (a sequence-to-sequence model's)."""
        if self.max_new_tokens is not None:
            return start + self.max_new_tokens
        if self.source_length_limit is not None and source is not None:
            a, b = self.source_length_limit
            return min(start + int(a * source) + b, self.max_length)
        return self.max_length

    def min_length_for(self, start: int) -> int:
        """No end token in a sequence shorter than this, its ``start`` tokens counted."""
        return start + self.min_new_tokens if self.min_new_tokens is not None else self.min_length


def standing_rules() -> list[Component]:
    """The registered decoding rules, less those another rule stands in for
    (``RuleCapabilities.replaces``)."""
    rules = registry.list("rule")
    replacing: dict[str, list[str]] = {}
    for c in rules:
        for name in c.capabilities.replaces:
            replacing.setdefault(name, []).append(f"{c.name!r} (plugin {c.plugin!r})")
    twice = {name: by for name, by in replacing.items() if len(by) > 1}
    if twice:
        name, by = next(iter(twice.items()))
        raise PluginError(f"decoding rule {name!r} is replaced by {' and '.join(by)}: one "
                          "rule stands in for a rule, or its setting would act twice. "
                          "Uninstall one of their plugins.")
    return [c for c in rules if c.name not in replacing and c.qualified_name not in replacing]


def rule_readers() -> dict[str, Component]:
    """Every generation setting a registered decoding rule reads, with the rule that
    reads it (zoo's own rule where one does, else the first): a plugin's rule that also
    reads one of zoo's settings never stands for zoo's rule of it."""
    readers: dict[str, Component] = {}
    for component in sorted(standing_rules(), key=lambda c: not registry.builtin(c.plugin)):
        model = component.settings_model
        for key in (model.model_fields if model is not None else ()):
            readers.setdefault(key, component)
    return readers


def plugin_rule_settings() -> dict[str, Component]:
    """The settings that plugins' decoding rules read beyond zoo's own, each with the
    rule that reads it (the first, where several do)."""
    return {k: c for k, c in rule_readers().items() if k not in GenerationSettings.model_fields}


def settings_with(settings: GenerationSettings, changes: dict[str, Any],
                  where: str = "generation settings") -> GenerationSettings:
    """``settings`` with ``changes`` applied, validated: one RecipeError naming an unknown
    or wrong setting and the known ones. A setting that a plugin's decoding rule reads
    goes into ``rule_settings``."""
    if not changes:
        return settings
    changes = dict(changes)
    unknown = [k for k in changes if k not in GenerationSettings.model_fields]
    if unknown:
        readers = plugin_rule_settings()
        strange = [k for k in unknown if k not in readers]
        if strange:
            key = strange[0]
            known = [*GenerationSettings.model_fields, *readers]
            raise RecipeError(f"{key!r} is not a generation setting.{did_you_mean(key, known)} "
                              f"The settings are: {', '.join(known)}.")
        rules = dict(changes.get("rule_settings", settings.rule_settings))
        rules.update({k: changes.pop(k) for k in unknown})
        changes["rule_settings"] = rules
    try:
        return validate_plain(GenerationSettings, {**settings.model_dump(), **changes})
    except ValidationError as exc:
        raise RecipeError(describe_validation_error(exc, where, GenerationSettings)) from None


def parse_settings(data: Any, where: str) -> GenerationSettings:
    """Generation settings from plain data (a saved config's, a format's), or one
    RecipeError naming what is wrong."""
    if isinstance(data, GenerationSettings):
        return data
    try:
        return validate_plain(GenerationSettings, data)
    except ValidationError as exc:
        raise RecipeError(describe_validation_error(exc, where, GenerationSettings)) from None
