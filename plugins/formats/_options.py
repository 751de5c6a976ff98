"""Reading a transformers config option by option: each key is mapped, checked against
what zoo can express, or known to change nothing in the model; any other key is
refused by name, before a weight is read."""

from __future__ import annotations

from typing import Any

from zoo.plugin import FormatError

BOOKKEEPING = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
    "_name_or_path", "_commit_hash", "use_cache", "return_dict", "output_attentions",
    "output_hidden_states", "torchscript", "use_return_dict", "pruned_heads",
    "chunk_size_feed_forward", "tie_encoder_decoder", "is_decoder", "add_cross_attention",
    "finetuning_task", "problem_type", "tokenizer_class", "prefix", "task_specific_params",
    "id2label", "label2id", "num_labels", "gradient_checkpointing", "init_std",
    "initializer_range", "initializer_factor", "cross_attention_hidden_size",
    "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "unk_token_id",
    "mask_token_id", "decoder_start_token_id", "_attn_implementation_autoset",
    "layer_types", "output_scores", "return_dict_in_generate", "classifier_dropout",
    "classif_dropout", "num_hidden_layers", "is_encoder_decoder", "tf_legacy_loss",
    "use_bfloat16", "_from_model_config", "_num_labels",
}
"""Keys that change nothing zoo computes: names, bookkeeping, initialisation, the token
ids (read with the generation settings), heads zoo's model has no use for."""

GENERATION_KEYS = {
    "max_length", "min_length", "num_beams", "length_penalty", "early_stopping",
    "bad_words_ids", "forced_bos_token_id", "forced_eos_token_id", "no_repeat_ngram_size",
    "renormalize_logits", "do_sample", "temperature", "top_k", "top_p",
    "num_return_sequences", "repetition_penalty", "diversity_penalty", "num_beam_groups",
    "encoder_no_repeat_ngram_size", "max_new_tokens", "min_new_tokens", "typical_p",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "forced_decoder_ids", "remove_invalid_values", "output_past", "pad_token_id",
}
"""Generation keys that older configs keep in config.json (read as generation settings)."""


class Options:
    """A config read key by key; ``done()`` refuses the keys nobody read."""

    def __init__(self, config: dict[str, Any], family: str) -> None:
        self.config, self.family, self.read = config, family, set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        value = self.config.get(key, default)
        return default if value is None else value

    def need(self, key: str, allowed: Any, default: Any = None, why: str = "") -> Any:
        """The value of ``key``, refused unless it is ``allowed`` (a value or a tuple)."""
        value = self.get(key, default)
        ok = value in allowed if isinstance(allowed, tuple) else value == allowed
        if not ok:
            raise self.refuse(key, value, f"zoo maps {allowed!r}" + (f" ({why})" if why else ""))
        return value

    def refuse(self, key: str, value: Any, what: str) -> FormatError:
        return FormatError(f"{self.family} config option {key}={value!r} is not one zoo can "
                           f"express: {what}. Nothing was loaded.")

    def done(self, known: set[str] = frozenset()) -> None:
        """Refuse, by name, the keys that were neither read nor known to change nothing."""
        left = sorted(set(self.config) - self.read - BOOKKEEPING - GENERATION_KEYS - set(known))
        if left:
            raise FormatError(
                f"{self.family} config options zoo does not know: {left}. zoo maps only "
                "options whose effect it reproduces; nothing was loaded.")
