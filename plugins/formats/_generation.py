"""transformers' generation settings (``generation_config.json``, or the generation keys
of an older ``config.json``) as zoo's ``GenerationSettings`` data, and back."""

from __future__ import annotations

from typing import Any

from zoo.plugin import FormatError

KEPT = {"_from_model_config", "transformers_version", "use_cache", "output_attentions",
        "output_hidden_states", "return_dict_in_generate", "output_scores", "output_logits",
        "is_assistant", "cache_implementation"}
DEFAULTS = {"do_sample": False, "num_return_sequences": 1, "repetition_penalty": 1.0,
            "num_beam_groups": 1, "diversity_penalty": 0.0, "encoder_no_repeat_ngram_size": 0,
            "exponential_decay_length_penalty": None, "suppress_tokens": None,
            "begin_suppress_tokens": None, "forced_decoder_ids": None, "temperature": 1.0,
            "top_k": 50, "top_p": 1.0, "typical_p": 1.0, "max_new_tokens": None,
            "min_new_tokens": None, "remove_invalid_values": False}
"""Settings zoo's decoding does not have, at the values that make them change nothing
(sampling settings are inert while do_sample is false)."""
SAMPLING = {"temperature", "top_k", "top_p", "typical_p"}
READ = {"decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id",
        "max_length", "min_length", "num_beams", "length_penalty", "early_stopping",
        "bad_words_ids", "forced_bos_token_id", "forced_eos_token_id",
        "no_repeat_ngram_size", "renormalize_logits"}


def generation_settings(config: dict[str, Any], generation: dict[str, Any],
                        family: str) -> dict[str, Any]:
    """``generation`` (generation_config.json; empty: the keys of ``config``) as zoo's
    generation settings; a setting zoo's decoding cannot follow is refused by name."""
    source = generation or {k: v for k, v in config.items() if k in READ or k in DEFAULTS}
    for key, value in source.items():
        if key in DEFAULTS and key not in SAMPLING and value != DEFAULTS[key] and not (
                key == "num_return_sequences" and value is None):
            raise FormatError(f"{family} generation setting {key}={value!r} is not one zoo's "
                              f"decoding follows (it follows {sorted(READ)}).")
        if generation and key not in READ and key not in DEFAULTS and key not in KEPT:
            raise FormatError(f"{family} generation setting {key!r} is not one zoo knows.")

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
    return {
        "start_id": start, "eos_ids": eos, "pad_id": get("pad_token_id", eos[0]),
        # transformers' default: 20 new tokens after the start token
        "max_length": get("max_length", 21), "min_length": get("min_length", 0),
        "num_beams": get("num_beams", 1), "length_penalty": get("length_penalty", 1.0),
        "early_stopping": early, "forbidden_ids": forbidden,
        "forced_bos_id": get("forced_bos_token_id"), "forced_eos_id": get("forced_eos_token_id"),
        "no_repeat_ngram_size": get("no_repeat_ngram_size", 0),
        "renormalize": get("renormalize_logits", False),
    }


def generation_json(settings: dict[str, Any]) -> dict[str, Any]:
    """zoo's ``GenerationSettings`` data (at least ``start_id``, ``eos_ids``, ``pad_id``)
    as ``generation_config.json``: :func:`generation_settings` backwards."""
    get = settings.get
    out = {"decoder_start_token_id": settings["start_id"],
           "eos_token_id": list(settings["eos_ids"]), "pad_token_id": settings["pad_id"]}
    if "max_length" in settings:
        out.update(max_length=settings["max_length"], num_beams=get("num_beams", 1))
    if get("num_beams", 1) > 1:
        out.update(length_penalty=get("length_penalty", 1.0),
                   early_stopping=get("early_stopping", False))
    optional = {"min_length": get("min_length"), "no_repeat_ngram_size": get("no_repeat_ngram_size"),
                "forced_bos_token_id": get("forced_bos_id"),
                "forced_eos_token_id": get("forced_eos_id"),
                "bad_words_ids": [[i] for i in get("forbidden_ids") or ()],
                "renormalize_logits": get("renormalize")}
    out.update({k: v for k, v in optional.items() if v or (v == 0 and "forced" in k)})
    return out
