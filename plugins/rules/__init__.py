"""Decoding rules: transformers' logits processors (every decoding) and warpers (the
filters of sampling), in transformers' order (``order`` in steps of 100)."""

from zoo import hookimpl

RULES = [  # name, module:class, sampling, order, what
    ("repetition-penalty", "repetition_penalty:RepetitionPenalty", False, 100,
     "A seen token's score divided (positive) or multiplied (negative) by "
     "repetition_penalty (Keskar et al. 2019, CTRL)"),
    ("no-repeat-ngram", "no_repeat_ngram:NoRepeatNGram", False, 200,
     "No n-gram of no_repeat_ngram_size twice in a sequence (Paulus et al. 2018)"),
    ("forbidden-tokens", "forbidden_tokens:ForbiddenTokens", False, 300,
     "forbidden_ids never generated (bad_words_ids of one token)"),
    ("min-length", "min_length:MinLength", False, 400,
     "No end token before min_length / min_new_tokens"),
    ("forced-bos", "forced_bos:ForcedBOS", False, 500,
     "forced_bos_id right after the start token (BART, mBART-50)"),
    ("forced-eos", "forced_eos:ForcedEOS", False, 600,
     "forced_eos_id at the last step"),
    ("renormalize", "renormalize:Renormalize", False, 1000,
     "log_softmax after the other rules (renormalize_logits)"),
    ("temperature", "temperature:Temperature", True, 100,
     "The logits over temperature (Ackley et al. 1985)"),
    ("top-k", "top_k:TopK", True, 200,
     "The top_k most likely tokens (Fan et al. 2018)"),
    ("top-p", "top_p:TopP", True, 300,
     "The nucleus of probability top_p (Holtzman et al. 2020)"),
    ("min-p", "min_p:MinP", True, 400,
     "Tokens at least min_p times the most likely's probability (Nguyen et al. 2024)"),
    ("typical", "typical:Typical", True, 500,
     "Locally typical sampling, typical_p (Meister et al. 2023)"),
    ("epsilon", "epsilon:Epsilon", True, 600,
     "Tokens at least epsilon_cutoff probable (Hewitt et al. 2022)"),
    ("eta", "eta:Eta", True, 700,
     "Tokens above an entropy-dependent eta_cutoff (Hewitt et al. 2022)"),
]


@hookimpl
def register_rules(register):
    for name, target, sampling, order, what in RULES:
        register(name, f"zoo.plugins.rules.{target}", description=what,
                 capabilities={"sampling": sampling, "order": order})
