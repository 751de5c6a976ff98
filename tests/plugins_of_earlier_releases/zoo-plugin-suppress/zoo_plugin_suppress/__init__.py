"""Whisper's two decoding rules, as transformers has them: ``suppress_tokens`` (tokens
never generated) and ``begin_suppress_tokens`` (tokens not generated first).

Written against zoo's rule contract (docs/contract/rule.md): each rule is a
``zoo.plugin_api.Rule`` whose ``Settings`` name new generation settings, so
``zoo.generate(model, ids, suppress_tokens=[...])``, ``zoo generate --set`` and a
transformers folder's ``generation_config.json`` take them by name. Both act on every
decoding (no ``sampling``), after zoo's forced-eos (600) and before renormalize (1000),
where transformers' ``generate`` puts its SuppressTokensLogitsProcessor and
SuppressTokensAtBeginLogitsProcessor."""

from zoo import hookimpl


@hookimpl
def register_rules(register):
    register("suppress-tokens", "zoo_plugin_suppress.rules:SuppressTokens",
             description="suppress_tokens never generated (transformers' "
                         "SuppressTokensLogitsProcessor, Whisper)",
             capabilities={"sampling": False, "order": 700})
    register("begin-suppress-tokens", "zoo_plugin_suppress.rules:BeginSuppressTokens",
             description="begin_suppress_tokens not generated at the first step (transformers' "
                         "SuppressTokensAtBeginLogitsProcessor, Whisper)",
             capabilities={"sampling": False, "order": 800})
