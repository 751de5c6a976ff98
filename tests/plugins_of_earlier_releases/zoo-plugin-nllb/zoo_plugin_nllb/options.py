"""Reading a transformers config key by key: each key is mapped, checked against what
zoo can express, or known to change nothing in the model; any other key, and any
value zoo cannot reproduce, is refused by name (``zoo.plugin.FormatError``) before a
weight is read (docs/from-the-hub.md, "How a folder is read")."""

from __future__ import annotations

from typing import Any

from zoo.plugin import FormatError

BOOKKEEPING = frozenset({
    # names, versions, the class to build
    "architectures", "model_type", "transformers_version", "_name_or_path", "_commit_hash",
    "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "problem_type",
    "id2label", "label2id", "num_labels",
    # how transformers runs or returns, not what it computes
    "torch_dtype", "dtype", "use_cache", "return_dict", "output_attentions",
    "output_hidden_states", "torchscript", "use_return_dict", "use_bfloat16",
    "gradient_checkpointing", "chunk_size_feed_forward", "pruned_heads", "tf_legacy_loss",
    "_attn_implementation_autoset", "output_scores", "return_dict_in_generate",
    "_from_model_config",
    # what the class is (M2M100 is always an encoder-decoder)
    "is_encoder_decoder", "is_decoder", "add_cross_attention", "tie_encoder_decoder",
    "cross_attention_hidden_size",
    # initialisation only
    "init_std", "initializer_range", "initializer_factor",
    # token ids (the generation settings read the ones decoding needs)
    "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id", "cls_token_id",
    "unk_token_id", "mask_token_id",
})
"""Keys that change nothing the model computes."""

GENERATION_IN_CONFIG = frozenset({
    "max_length", "min_length", "num_beams", "length_penalty", "early_stopping",
    "bad_words_ids", "forced_bos_token_id", "forced_eos_token_id", "no_repeat_ngram_size",
    "renormalize_logits", "do_sample", "temperature", "top_k", "top_p", "typical_p",
    "num_return_sequences", "repetition_penalty", "diversity_penalty", "num_beam_groups",
    "encoder_no_repeat_ngram_size", "max_new_tokens", "min_new_tokens",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "forced_decoder_ids", "remove_invalid_values", "output_past",
})
"""Generation keys that older configs keep in config.json: read (and refused there when
zoo's decoding cannot follow them) by the generation settings, not by the recipe."""


class ConfigOptions:
    """A config read key by key; :meth:`done` refuses the keys nobody read."""

    def __init__(self, config: dict[str, Any], family: str) -> None:
        self.config, self.family, self.read = config, family, set()

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (``default`` when the config lacks it)."""
        self.read.add(key)
        return self.config.get(key, default)

    def integer(self, key: str, default: int, *, low: int = 1) -> int:
        """An integer of at least ``low``."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.refuse(key, value, f"an integer of at least {low}")
        return value

    def rate(self, key: str, default: float) -> float:
        """A probability in [0, 1) (dropout, LayerDrop)."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise self.refuse(key, value, "a rate in [0, 1)")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.refuse(key, value, "true or false")
        return value

    def need(self, key: str, allowed: Any, default: Any, why: str) -> Any:
        """The value of ``key``, refused unless it equals ``allowed``."""
        value = self.get(key, default)
        if isinstance(value, bool) is not isinstance(allowed, bool) or value != allowed:
            raise self.refuse(key, value, f"zoo maps {allowed!r} ({why})")
        return value

    def refuse(self, key: str, value: Any, what: str) -> FormatError:
        return FormatError(f"{self.family} config option {key}={value!r} is not one zoo can "
                           f"express: {what}. Nothing was loaded.")

    def done(self) -> None:
        """Refuse, by name, the keys that were neither read nor known to change nothing."""
        left = sorted(set(self.config) - self.read - BOOKKEEPING - GENERATION_IN_CONFIG)
        if left:
            raise FormatError(
                f"{self.family} config options zoo does not know: {left}. zoo maps only "
                "options whose effect it reproduces; nothing was loaded.")
