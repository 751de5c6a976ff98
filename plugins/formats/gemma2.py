"""transformers' Gemma 2 (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a
Practical Size", ``Gemma2ForCausalLM``) and Gemma 3's text model (Gemma Team 2025,
"Gemma 3 Technical Report", ``Gemma3ForCausalLM``, model type ``gemma3_text``).

Gemma's layer (the ``gemma`` format: scaled embeddings, norms of offset 1, tanh GeGLU)
with:

- sandwich norms: each sublayer normed before and after (zoo's ``sandwich`` block);
- local and global layers by ``layer_types`` (else Gemma 2's alternation, or Gemma 3's
  ``sliding_window_pattern``): a ``sliding_attention`` layer attends to the last
  ``sliding_window`` keys, as the decoder's ``layer_variants`` say;
- scores scaled by ``query_pre_attn_scalar ** -0.5``;
- Gemma 2: scores soft-capped (``attn_logit_softcapping``: vanilla attention's
  ``softcap``) and logits too (``final_logit_softcapping``: the decoder's
  ``logit_softcap``);
- Gemma 3: each head's queries and keys RMS-normed (offset 1, as its other norms), and
  its local layers rotated by their own base (``rope_local_base_freq``), the global ones
  by ``rope_theta`` and ``rope_scaling``.

| transformers | zoo |
|---|---|
| model.layers.i.input_layernorm, post_attention_layernorm | layers.i.norm1, norm1_out |
| model.layers.i.pre_feedforward_layernorm, post_feedforward_layernorm | layers.i.norm2, norm2_out |
| model.layers.i.self_attn.q_norm, k_norm (Gemma 3) | layers.i.attn.q_norm, k_norm |
| the rest | as the ``llama`` format |

``zoo export --format transformers`` writes zoo decoders of this layout back as either
family: Gemma 3's when the queries and keys are normed, else Gemma 2's.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import torch

from zoo.plugin_api import FormatError, Options

from ._decoder import part, refuse
from .gemma import GemmaFormat
from .llama import HEAD_NORMS, LlamaFormat

SANDWICH = {"input_layernorm": "norm1", "post_attention_layernorm": "norm1_out",
            "pre_feedforward_layernorm": "norm2", "post_feedforward_layernorm": "norm2_out"}
NORMS = re.compile(r"^model\.layers\.(\d+)\.(" + "|".join(SANDWICH) + r")\.weight$")
DEFAULTS = {"tie_word_embeddings": True, "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "bos_token_id": 2,
            "eos_token_id": 1, "pad_token_id": 0, "max_position_embeddings": 8192}
"""transformers' Gemma2Config and Gemma3TextConfig defaults that differ from Llama's."""
LOCAL, GLOBAL = "sliding_attention", "full_attention"
"""transformers' names of the two kinds of layer."""
OWN = frozenset({"cache_implementation", "use_bidirectional_attention",
                 "final_logit_softcapping", "attn_logit_softcapping", "query_pre_attn_scalar",
                 "layer_types", "sliding_window"})
"""The keys Gemma 2's reader reads itself, before the ``llama`` format reads the rest
(``cache_implementation`` names the cache transformers' generate keeps: inert)."""


class Gemma2Format(GemmaFormat):
    """Reads transformers' Gemma 2 folders (gemma-2-2b, gemma-2-9b, their -it)."""

    family = "gemma2"
    own = OWN
    caps = {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
    """The soft caps where a config leaves them out (Gemma 3 has none)."""
    example = {"model_type": "gemma2", "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
               "intermediate_size": 32, "vocab_size": 32, "max_position_embeddings": 64,
               "sliding_window": 4}

    def _as_llama(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with this family's defaults, its activation under Llama's key
        (Gemma 2's and 3's modules read ``hidden_activation``, not ``hidden_act``), and
        the keys :meth:`recipe` reads itself left out."""
        config = {**DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
        config["hidden_act"] = config.pop("hidden_activation")
        return {k: v for k, v in config.items() if k not in self.own}

    def period(self, options: Options) -> int:
        """Every how many layers one is global, where a config gives no ``layer_types``."""
        return 2

    def layer_types(self, config: dict[str, Any], options: Options) -> list[str]:
        """Each layer's kind: ``layer_types``, else one global layer every :meth:`period`
        (the last of each period), as transformers makes them."""
        layers = config.get("num_hidden_layers") or 26
        period = self.period(options)
        types = options.get("layer_types") or [
            LOCAL if (i + 1) % period else GLOBAL for i in range(layers)]
        if not isinstance(types, list) or len(types) != layers or set(types) - {LOCAL, GLOBAL}:
            raise options.refuse("layer_types", types, f"{layers} kinds, each {LOCAL!r} or "
                                 f"{GLOBAL!r}")
        return types

    def local_changes(self, config: dict[str, Any], options: Options) -> dict[str, Any]:
        """What a local layer changes of the recipe's components: its window."""
        window = options.count("sliding_window", "a window of at least 1 key")
        return {"attention.window": window or 4096}

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = Options(config, self.family)
        if options.get("use_bidirectional_attention"):
            raise options.refuse("use_bidirectional_attention", True, "causal attention "
                                 "(a decoder-only model)")
        options.get("cache_implementation")  # inert
        types = self.layer_types(config, options)
        local = self.local_changes(config, options)
        scalar = options.count("query_pre_attn_scalar", "a whole number above 0") or 256
        caps = {key: config[key] if key in config else default
                for key, default in self.caps.items()}
        for key, value in caps.items():
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, (int, float)) or value <= 0):
                raise options.refuse(key, value, "a cap above 0, or null for none")
        recipe = LlamaFormat.recipe(self, self._as_llama(config))
        settings = recipe["architecture"]["settings"]
        head_dim = settings.get("head_dim") or settings["d_model"] // settings["n_heads"]
        settings.update(scale_embeddings=True, logit_softcap=caps["final_logit_softcapping"],
                        layer_types=types, layer_variants={GLOBAL: {}, LOCAL: local})
        components = recipe["components"]
        components["norm"]["settings"]["offset"] = 1.0
        components["block"] = "sandwich"
        attention = components["attention"]["settings"]
        if scalar != head_dim:
            attention["scale"] = float(scalar) ** -0.5
        if caps["attn_logit_softcapping"] is not None:
            attention["softcap"] = float(caps["attn_logit_softcapping"])
        return recipe

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        rest = {}
        for key, value in state.items():
            norm, head_norm = NORMS.match(key), HEAD_NORMS.match(key)
            if norm:
                out[f"layers.{norm.group(1)}.{SANDWICH[norm.group(2)]}.weight"] = value
            elif head_norm and self.family != "gemma2":
                out[f"layers.{head_norm.group(1)}.attn.{head_norm.group(2)}_norm.weight"] = value
            else:
                rest[key] = value
        return {**LlamaFormat.weights(self, rest, self._as_llama(config)), **out}


    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any]):
        """A zoo decoder of Gemma 2's or 3's layout as its transformers folder: Llama's
        export of the same layers without what Gemma adds, then Gemma's keys and names;
        what neither expresses is refused by name."""
        settings = recipe["architecture"].get("settings", {})
        _, attention = part(recipe, "attention")
        kind = "gemma3_text" if attention.get("qk_norm") else "gemma2"
        local, types, found = _local_kind(settings, attention, kind)
        norm_name, norm = part(recipe, "norm")
        if part(recipe, "block")[0] != "sandwich":
            found.append(f"block {part(recipe, 'block')[0]!r}: {kind}'s layers are 'sandwich'")
        if not settings.get("scale_embeddings") or norm.get("offset") != 1.0:
            found.append(f"{kind} scales its embeddings and its RMSNorms store their scale "
                         "less one (scale_embeddings, norm offset 1)")
        scale = attention.get("scale")
        if scale is not None and abs(round(scale ** -2) ** -0.5 - scale) > 1e-9 * scale:
            found.append(f"attention scale {scale}: {kind}'s is query_pre_attn_scalar ** -0.5, "
                         "of a whole number")
        if kind == "gemma3_text" and (attention.get("qk_norm_offset") != 1.0 or attention.get(
                "qk_norm_eps") != norm.get("eps", 1e-6) or attention.get("softcap")
                or settings.get("logit_softcap") is not None):
            found.append("Gemma 3 norms queries and keys as its layers (offset 1, their eps), "
                         "and caps neither scores nor logits")
        refuse(found, kind)
        plain = copy.deepcopy(recipe)
        s = plain["architecture"]["settings"]
        for key in ("layer_types", "layer_variants", "logit_softcap"):
            s.pop(key, None)
        s["scale_embeddings"] = False
        plain["components"]["block"] = "causal"
        plain["components"]["norm"] = {"name": norm_name, "settings": {
            k: v for k, v in norm.items() if k != "offset"}}
        plain["components"]["attention"] = {"name": "vanilla", "settings": {
            k: v for k, v in attention.items() if k in ("bias", "out_bias")}}
        own = ("norm1_out", "norm2_out", "attn.q_norm", "attn.k_norm")
        config, generation_file, weights = LlamaFormat.export(
            self, plain, {k: v for k, v in state.items() if not k.endswith(
                tuple(f".{name}.weight" for name in own))}, generation)
        if config["model_type"] != "llama":
            refuse([f"its attention makes it {config['model_type']}'s (biases on q, k and v "
                    "alone)"], kind)
        config = self._as_gemma(config, settings, attention, local, kind)
        return {**config, "layer_types": types}, generation_file, _gemma_names(weights, state)

    @staticmethod
    def _as_gemma(config: dict[str, Any], settings: dict[str, Any], attention: dict[str, Any],
                  local: dict[str, Any], kind: str) -> dict[str, Any]:
        """Llama's ``config`` as Gemma 2's or 3's."""
        head_dim = config["head_dim"]
        scale = attention.get("scale")
        config = {k: v for k, v in config.items() if k not in ("mlp_bias", "hidden_act")}
        config.update(
            model_type=kind, hidden_activation="gelu_pytorch_tanh",
            architectures=["Gemma2ForCausalLM" if kind == "gemma2" else "Gemma3ForCausalLM"],
            query_pre_attn_scalar=head_dim if scale is None else round(scale ** -2),
            sliding_window=local.get("attention.window"), pad_token_id=settings.get("pad_id"),
            attn_logit_softcapping=attention.get("softcap"),
            final_logit_softcapping=settings.get("logit_softcap"))
        if kind == "gemma3_text":
            config["rope_local_base_freq"] = local.get("positional.base",
                                                       config["rope_theta"])
        return config


def _local_kind(settings: dict[str, Any], attention: dict[str, Any],
                kind: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """The changes of the recipe's local kind of layer (the one with a window), each
    layer's kind in transformers' names, and what keeps its kinds of layer from being
    Gemma's: one kind as the recipe's own layers (transformers' ``full_attention``), one
    with a window (Gemma 3's: and a RoPE base of its own, unscaled)."""
    variants = settings.get("layer_variants") or {}
    types = settings.get("layer_types") or []
    full = [name for name, changes in variants.items() if not changes]
    local = [name for name, changes in variants.items() if changes]
    allowed = {"attention.window"} | ({"positional.base", "positional.scaling",
                                       "positional.factor"} if kind == "gemma3_text" else set())
    found = []
    if len(full) != 1 or len(local) != 1 or set(variants[local[0]]) - allowed or \
            "attention.window" not in variants[local[0]] or attention.get("window"):
        found.append(f"layer_variants {variants}: {kind} has global layers (the recipe's own "
                     f"attention, no window) and local ones changing only {sorted(allowed)}, "
                     "a window among them")
        return {}, [], found
    changes = variants[local[0]]
    if changes.get("positional.scaling", "none") != "none":
        found.append(f"local layers' RoPE scaling {changes['positional.scaling']!r}: "
                     f"{kind}'s local layers are unscaled")
    return changes, [GLOBAL if t == full[0] else LOCAL for t in types], found


def _gemma_names(weights: dict[str, torch.Tensor],
                 state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Llama's names of a Gemma's weights made Gemma's: Llama's post-attention norm is
    Gemma's pre-feed-forward one; the norms after each sublayer and of the queries and
    keys added."""
    out = {}
    for key, value in weights.items():
        out[key.replace(".post_attention_layernorm.", ".pre_feedforward_layernorm.")] = value
    back = {zoo: gemma for gemma, zoo in SANDWICH.items()}
    for key, value in state.items():
        match = re.match(r"^layers\.(\d+)\.(norm1_out|norm2_out|attn\.q_norm|attn\.k_norm)"
                         r"\.weight$", key)
        if match:
            i, name = match.groups()
            where = (f"self_attn.{name[5:]}" if name.startswith("attn.") else back[name])
            out[f"model.layers.{i}.{where}.weight"] = value.detach().contiguous().clone()
    return out


class Gemma3TextFormat(Gemma2Format):
    """Reads transformers' Gemma 3 text folders (gemma-3-1b, its -it): Gemma 2's layer with
    normed queries and keys, local layers of their own RoPE base, no soft caps."""

    family = "gemma3_text"
    own = OWN | {"sliding_window_pattern", "_sliding_window_pattern", "rope_local_base_freq"}
    caps = {"attn_logit_softcapping": None, "final_logit_softcapping": None}
    example = {**Gemma2Format.example, "model_type": "gemma3_text"}

    def period(self, options: Options) -> int:
        """``sliding_window_pattern`` (the Hub's configs; transformers 5 saves it as
        ``_sliding_window_pattern`` beside the ``layer_types`` it made), else 6."""
        return (options.count("sliding_window_pattern", "every how many layers one is global")
                or options.count("_sliding_window_pattern", "every how many layers one is "
                                 "global") or 6)

    def local_changes(self, config: dict[str, Any], options: Options) -> dict[str, Any]:
        """A local layer's window, and its RoPE: ``rope_local_base_freq`` (or transformers
        5's ``rope_parameters.sliding_attention``), unscaled."""
        changes = super().local_changes(config, options)
        params = config.get("rope_parameters") or {}
        local = params.get(LOCAL) if isinstance(params, dict) else None
        base = options.get("rope_local_base_freq", 10000.0)
        if isinstance(local, dict):
            if set(local) - {"rope_type", "rope_theta"} or local.get(
                    "rope_type", "default") != "default":
                raise options.refuse(f"rope_parameters.{LOCAL}", local,
                                     "the local layers' RoPE unscaled")
            base = local.get("rope_theta", base)
        changes.update({"positional.base": float(base), "positional.scaling": "none",
                        "positional.factor": 1.0})
        return changes

    def _as_llama(self, config: dict[str, Any]) -> dict[str, Any]:
        """Gemma 2's, with transformers 5's ``rope_parameters`` by kind of layer read as
        the global layers' ``rope_theta`` and ``rope_scaling``; 1,000,000 the base where
        none is given."""
        params = config.get("rope_parameters")
        if isinstance(params, dict) and (GLOBAL in params or LOCAL in params):
            merged = dict(params.get(GLOBAL) or {})
            config = {k: v for k, v in config.items() if k != "rope_parameters"}
            config["rope_theta"] = merged.pop("rope_theta", 1_000_000.0)
            config["rope_scaling"] = merged if merged.get("rope_type", "default") != \
                "default" else None
        config = super()._as_llama(config)
        config.setdefault("rope_theta", 1_000_000.0)
        return config

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        recipe = super().recipe(config)
        eps = recipe["components"]["norm"]["settings"]["eps"]
        recipe["components"]["attention"]["settings"].update(
            qk_norm=True, qk_norm_eps=eps, qk_norm_offset=1.0)
        return recipe
