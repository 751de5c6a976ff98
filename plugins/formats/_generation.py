"""transformers' generation settings (``generation_config.json``, or the generation keys
of an older ``config.json``) as zoo's ``GenerationSettings`` data, and back."""

from __future__ import annotations

from typing import Any

from zoo.plugin import FormatError

KEPT = {"_from_model_config", "transformers_version", "use_cache", "output_attentions",
        "output_hidden_states", "return_dict_in_generate", "output_scores", "output_logits",
        "is_assistant", "cache_implementation"}
DEFAULTS = {"num_return_sequences": 1, "num_beam_groups": 1, "diversity_penalty": 0.0,
            "encoder_no_repeat_ngram_size": 0, "exponential_decay_length_penalty": None,
            "suppress_tokens": None, "begin_suppress_tokens": None, "forced_decoder_ids": None,
            "typical_p": 1.0, "remove_invalid_values": False}
"""Settings zoo's decoding does not have, at the values that make them change nothing
(``typical_p`` is inert while do_sample is false)."""
SAMPLING = {"typical_p"}
READ = {"decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id",
        "max_length", "min_length", "max_new_tokens", "min_new_tokens", "num_beams",
        "length_penalty", "early_stopping", "bad_words_ids", "forced_bos_token_id",
        "forced_eos_token_id", "no_repeat_ngram_size", "renormalize_logits", "do_sample",
        "temperature", "top_k", "top_p", "min_p", "repetition_penalty"}
TOP_K = 50
"""transformers' top_k when a config names none (0 there: no top-k filter)."""


def generation_settings(config: dict[str, Any], generation: dict[str, Any],
                        family: str) -> dict[str, Any]:
    """``generation`` (generation_config.json; empty: the keys of ``config``) as zoo's
    generation settings; a setting zoo's decoding cannot follow is refused by name."""
    source = generation or {k: v for k, v in config.items() if k in READ or k in DEFAULTS}
    for key, value in source.items():
        inert = key in SAMPLING and not source.get("do_sample")
        if key in DEFAULTS and not inert and value != DEFAULTS[key] and not (
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
        "repetition_penalty": get("repetition_penalty", 1.0),
    }


def generation_json(settings: dict[str, Any]) -> dict[str, Any]:
    """zoo's ``GenerationSettings`` data (at least ``start_id``, ``eos_ids``, ``pad_id``)
    as ``generation_config.json``: :func:`generation_settings` backwards."""
    get = settings.get
    out = {"decoder_start_token_id": settings["start_id"],
           "eos_token_id": list(settings["eos_ids"]), "pad_token_id": settings["pad_id"]}
    # GNMT's length penalty is not transformers': such a model's beams stay zoo's, and
    # the folder decodes greedily by default, as transformers' own default
    beams = get("num_beams", 1) if get("length_penalty_form", "transformers") != "gnmt" else 1
    if "max_length" in settings:
        out.update(max_length=settings["max_length"], num_beams=beams)
    if beams > 1:
        out.update(length_penalty=get("length_penalty", 1.0),
                   early_stopping=get("early_stopping", False))
    if get("do_sample"):
        out.update(do_sample=True, temperature=get("temperature", 1.0),
                   top_k=get("top_k") or 0, top_p=get("top_p", 1.0))
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
    return out
