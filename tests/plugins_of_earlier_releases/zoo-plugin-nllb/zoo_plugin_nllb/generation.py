"""transformers' generation settings of an M2M100 / NLLB-200 folder
(``generation_config.json``, or the generation keys of an older ``config.json``) as the
data of zoo's ``GenerationSettings`` (docs/from-the-hub.md, "Generation settings"):

| transformers | zoo |
|---|---|
| decoder_start_token_id | start_id |
| eos_token_id | eos_ids |
| pad_token_id | pad_id |
| max_length, min_length | the same (they count the start token; default 21: 20 new tokens) |
| num_beams, length_penalty, early_stopping | the same |
| bad_words_ids (one token each) | forbidden_ids |
| forced_bos_token_id, forced_eos_token_id | forced_bos_id, forced_eos_id |
| no_repeat_ngram_size | the same |
| renormalize_logits | renormalize |

A setting zoo's decoding does not follow, at a value that changes what is decoded, is
refused by name.
"""

from __future__ import annotations

from typing import Any

from zoo.plugin import FormatError

READ = frozenset({
    "decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id", "max_length",
    "min_length", "num_beams", "length_penalty", "early_stopping", "bad_words_ids",
    "forced_bos_token_id", "forced_eos_token_id", "no_repeat_ngram_size", "renormalize_logits",
})
"""The keys mapped to zoo's settings."""

INERT_AT = {
    "do_sample": False, "num_return_sequences": 1, "repetition_penalty": 1.0,
    "num_beam_groups": 1, "diversity_penalty": 0.0, "encoder_no_repeat_ngram_size": 0,
    "exponential_decay_length_penalty": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "forced_decoder_ids": None, "max_new_tokens": None,
    "min_new_tokens": None, "remove_invalid_values": False, "encoder_repetition_penalty": 1.0,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "sequence_bias": None, "constraints": None,
    "force_words_ids": None, "penalty_alpha": None, "guidance_scale": None,
    "stop_strings": None, "max_time": None,
}
"""Settings zoo's decoding does not have, each at the value that changes nothing."""

SAMPLING = frozenset({"temperature", "top_k", "top_p", "typical_p", "min_p"})
"""Sampling settings: they change nothing while do_sample is false (which is required)."""

KEPT = frozenset({
    "_from_model_config", "transformers_version", "use_cache", "output_attentions",
    "output_hidden_states", "return_dict_in_generate", "output_scores", "output_logits",
    "is_assistant", "cache_implementation", "return_legacy_cache", "output_past",
})
"""Keys of generation_config.json about what transformers returns or keeps, not what it
decodes."""


def _integer(family: str, key: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise FormatError(f"{family} generation setting {key}={value!r} is not one zoo's "
                          f"decoding can take: an integer of at least {low}.")
    return value


def generation_settings(config: dict[str, Any], generation: dict[str, Any],
                        family: str) -> dict[str, Any]:
    """``generation`` (generation_config.json; empty when the folder has none, then the
    generation keys of ``config``) as zoo's generation settings data."""
    known = READ | set(INERT_AT) | SAMPLING
    source = generation or {k: v for k, v in config.items() if k in known}
    for key, value in source.items():
        if key in INERT_AT:
            inert = INERT_AT[key]
            if value is not None and value != inert:
                raise FormatError(f"{family} generation setting {key}={value!r} is not one zoo's "
                                  f"decoding follows (it follows {sorted(READ)}).")
        elif key not in READ and key not in SAMPLING and key not in KEPT:
            raise FormatError(f"{family} generation setting {key!r} is not one zoo knows.")

    def get(key: str, default: Any = None) -> Any:
        value = source.get(key)
        return default if value is None else value

    eos = get("eos_token_id")
    if eos is None:
        raise FormatError(f"{family}: the generation settings name no eos_token_id; zoo needs "
                          "the token that ends a sequence.")
    eos_ids = [eos] if isinstance(eos, int) else list(eos)
    for token in eos_ids:
        _integer(family, "eos_token_id", token, 0)
    start = get("decoder_start_token_id", get("bos_token_id"))
    if start is None:
        raise FormatError(f"{family}: the generation settings name no decoder_start_token_id.")
    forbidden = []
    for words in get("bad_words_ids", []):
        if not isinstance(words, list) or len(words) != 1:
            raise FormatError(f"{family} generation setting bad_words_ids holds {words!r}; zoo "
                              "forbids single tokens only.")
        forbidden.append(_integer(family, "bad_words_ids", words[0], 0))
    early = get("early_stopping", False)
    if early not in (True, False, "never"):
        raise FormatError(f"{family} generation setting early_stopping={early!r}: zoo follows "
                          "true, false or 'never'.")
    penalty = get("length_penalty", 1.0)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)):
        raise FormatError(f"{family} generation setting length_penalty={penalty!r} is not a "
                          "number.")
    forced = {}
    for key, name in (("forced_bos_token_id", "forced_bos_id"),
                      ("forced_eos_token_id", "forced_eos_id")):
        value = get(key)
        forced[name] = None if value is None else _integer(family, key, value, 0)
    settings = {
        "start_id": _integer(family, "decoder_start_token_id", start, 0),
        "eos_ids": eos_ids,
        "pad_id": _integer(family, "pad_token_id", get("pad_token_id", eos_ids[0]), 0),
        # with no max_length in the folder: transformers' 20 new tokens after the start
        "max_length": _integer(family, "max_length", get("max_length", 21), 2),
        "min_length": _integer(family, "min_length", get("min_length", 0), 0),
        "num_beams": _integer(family, "num_beams", get("num_beams", 1), 1),
        "length_penalty": float(penalty),
        "early_stopping": early,
        "forbidden_ids": forbidden,
        **forced,
        "no_repeat_ngram_size": _integer(family, "no_repeat_ngram_size",
                                         get("no_repeat_ngram_size", 0), 0),
    }
    renormalize = get("renormalize_logits", False)
    if not isinstance(renormalize, bool):
        raise FormatError(f"{family} generation setting renormalize_logits={renormalize!r} "
                          "is not true or false.")
    if renormalize:
        settings["renormalize"] = True
    return settings
