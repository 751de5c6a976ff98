"""What zoo's native decoding step (``torch.classes.zoo_decoder.Plan``, :mod:`.native_step`)
is given for a model's layers, and the checks that decide whether it may run them: the
seq2seq decoder's layers (:mod:`.static_decoder`) and the decoder-only model's
(:mod:`.static_lm`) share them.

A layer runs natively when each of its parts says it computes exactly what the step
computes: its block's wiring (``data_flow()``, :mod:`zoo.layer_flow`; a seq2seq decoder's
block says ``static_layout``), softmax attention over every key
(``softmax_attention``) with no positions inside it, a bias of the self-attention scores
(T5's, ALiBi) or a rotation of queries and keys (RoPE, each layer its own base); LayerNorms
(``plain_layer_norm``) or RMSNorms (``plain_rms_norm``); feed-forward networks that say
``plain_mlp`` or ``plain_glu`` (GEGLU, SwiGLU: fc1_g and fc1_x joined into one product)
with a ReLU, GELU (exact or tanh) or SiLU; and products that each give their rows to zoo's
native product: zoo's ``Linear`` (fp32 CPU weights), ``QuantizedLinear`` (int8) or
``Int4Linear`` (4-bit groups). A subclass that rewrites the method a flag speaks for,
without saying the flag again, is not trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from zoo.plugin_api import (Int4Linear, Linear, QuantizedLinear, Refusal, derived_copy, held_copy,
                            private_copy)

from .native_step import STEP
from .step_positions import layer_rotations, position_biases, rotations_at

ACTIVATIONS = {(nn.ReLU, "none"): 0, (nn.GELU, "none"): 1, (nn.GELU, "tanh"): 2,
               (nn.SiLU, "none"): 3}
"""The feed-forward activations zoo's native step computes, and its codes for them."""

PRODUCTS = ("qkv", "self_out", "cross_q", "cross_out", "fc1", "fc2")
"""A layer's products, in the order ``Layer.product`` numbers them."""


def declares(module: nn.Module, flag: str, method: str) -> bool:
    """True when the class that writes ``method`` of ``module`` also sets ``flag`` True:
    a subclass that rewrites the method without saying the flag again is not trusted."""
    for cls in type(module).__mro__:
        if method in cls.__dict__:
            return bool(cls.__dict__.get(flag, False))
    return False


QUANTIZED_WEIGHTS = {QuantizedLinear: "weight_int8", Int4Linear: "weight_q4"}
"""zoo's quantized linear layers and the name of each one's weight; each also holds
``weight_scale`` and ``bias``, rows of which belong to its output rows alone."""


def joined(holder: nn.Module, name: str, first: nn.Module, second: nn.Module) -> nn.Module | None:
    """One linear layer giving [first(x) | second(x)] where both are plain linear layers
    of one kind: zoo's ``Linear``, or a quantized one (:data:`QUANTIZED_WEIGHTS`: int8
    ``QuantizedLinear`` or ``Int4Linear``, whose rows, each with its own scales, join
    exactly); None otherwise. It is kept on ``holder`` as ``name``, made once and made
    again when either weight changes; it holds copies, so it is never trained or saved."""
    if type(first) is not type(second) or (first.bias is None) != (second.bias is None):
        return None
    if type(first) is Linear:
        return derived_copy(holder, name, (first.weight, second.weight, first.bias,
                                           second.bias),
                            lambda: _joined_linear(first, second))
    weight = QUANTIZED_WEIGHTS.get(type(first))
    if weight is None:
        return None
    return derived_copy(holder, name, (getattr(first, weight), getattr(second, weight),
                                       first.weight_scale, second.weight_scale,
                                       first.bias, second.bias),
                        lambda: _joined_quantized(first, second, weight))


def _joined_linear(q: Linear, kv: Linear) -> Linear:
    weight = torch.cat([q.weight.detach(), kv.weight.detach()])
    fused = Linear(weight.shape[1], weight.shape[0], bias=q.bias is not None, device="meta")
    fused.weight = nn.Parameter(weight, requires_grad=False)
    if q.bias is not None:
        fused.bias = nn.Parameter(torch.cat([q.bias.detach(), kv.bias.detach()]),
                                  requires_grad=False)
    fused.eval()
    return private_copy(fused)  # its weight is this copy: nothing else writes it


def _joined_quantized(q: nn.Module, kv: nn.Module, weight: str) -> nn.Module:
    fused = type(q)(q.in_features, q.out_features + kv.out_features, bias=q.bias is not None)
    setattr(fused, weight, torch.cat([getattr(q, weight), getattr(kv, weight)]))
    fused.weight_scale = torch.cat([q.weight_scale, kv.weight_scale])
    if q.bias is not None:
        fused.bias = torch.cat([q.bias, kv.bias])
    if "native_rows" in vars(q):  # a limit set on the layer (int8's), kept
        fused.native_rows = q.native_rows
    return private_copy(fused.eval())


def fused_qkv(attn: nn.Module) -> nn.Module | None:
    """One linear layer giving [q | k | v] of a self-attention (see :func:`joined`)."""
    return joined(attn, "_fused_qkv", attn.q_proj, attn.kv_proj)


def _plain_linear(layer: nn.Module, rows: int | None) -> bool:
    return (type(layer) is Linear or type(layer) in QUANTIZED_WEIGHTS) and (
        rows is None or layer.takes_native(rows))


def _product_weight(layer: nn.Module) -> torch.Tensor:
    """The weight the native step checks a product's sizes by (fp32, int8, or uint8 of two
    4-bit values a byte)."""
    weight = QUANTIZED_WEIGHTS.get(type(layer))
    return layer.weight if weight is None else getattr(layer, weight)


def _plain_vector(t: torch.Tensor | None, width: int) -> bool:
    return t is None or (t.dtype == torch.float32 and t.device.type == "cpu"
                         and t.is_contiguous() and tuple(t.shape) == (width,))


def _norm_kind(norm: nn.Module, width: int) -> int | None:
    """0 for a LayerNorm the native step may run (it says ``plain_layer_norm``), 1 for an
    RMSNorm (``plain_rms_norm``, no bias; Gemma's offset taken by :func:`_norm_scale`),
    None otherwise; their weight (and bias) are
    contiguous fp32 CPU vectors of the model's width (a strided or short one stays in
    Python, which reads it as torch does, or refuses it)."""
    if not all(_plain_vector(t, width) for t in (norm.weight, getattr(norm, "bias", None))):
        return None
    if declares(norm, "plain_layer_norm", "forward"):
        return 0
    if declares(norm, "plain_rms_norm", "forward") and getattr(norm, "bias", None) is None:
        return 1
    return None


def _network(ffn: nn.Module) -> tuple[nn.Module | None, nn.Module | None, int | None, int]:
    """A feed-forward network's first and second products, its activation's code and
    whether it is gated (fc1_g and fc1_x joined into one product): what the native step
    reads of a network that says ``plain_mlp`` or ``plain_glu``; Nones otherwise."""
    act = getattr(ffn, "act", None)
    code = ACTIVATIONS.get((type(act), getattr(act, "approximate", "none")))
    if declares(ffn, "plain_mlp", "forward"):
        return ffn.fc1, ffn.fc2, code, 0
    if declares(ffn, "plain_glu", "forward"):
        return joined(ffn, "_fused_gate", ffn.fc1_g, ffn.fc1_x), ffn.fc2, code, 1
    return None, None, None, 0


LOG = logging.getLogger("zoo.native")
"""Where the gate says why it refused a plan (``logging.DEBUG``: ``zoo -v``, or
``logging.getLogger("zoo.native").setLevel("DEBUG")``)."""


def refused(why: str) -> None:
    """Say, at debug level, why a decoding call keeps its steps in Python."""
    LOG.debug("the native step does not run this model: %s", why)


class Plan(dict):
    """A plan of a model's layers (its keys: what :func:`seal` and the steps read), shown
    by its size, not by every weight it holds."""

    def __repr__(self) -> str:
        layers, shape = len(self.get("layers", ())), self.get("shape")
        heads = f", heads {shape[0]} of width {shape[1]} ({shape[2]} for keys and values)" \
            if shape else ""
        return f"<zoo's native plan: {layers} layers{heads}>"


def new_plan(attentions: list[nn.Module]) -> dict:
    """An empty plan for layers of these self-attentions (each layer's rotation found:
    :func:`.step_positions.layer_rotations`), or the :class:`Refusal` saying the native
    step is not built here (said once the layers are checked, which needs no library:
    :func:`seal_kept`). Its ``layers`` are ``torch.classes.zoo_decoder.Layer`` objects,
    each given its parts by name (:func:`add_layer`); ``k``, ``v``, ``cross_k`` and
    ``cross_v`` the buffers a call gives them."""
    plan = Plan({key: [] for key in ("layers", "bias_of", "sources", "k", "v", "cross_k",
                                     "cross_v")})
    plan["rotary"], plan["shape"], plan["bias_tables"] = layer_rotations(attentions), None, {}
    plan["missing"] = None if STEP.available() else _missing_library()
    return plan


def _missing_library() -> Refusal:
    states = [library.status()["state"] for library in (*STEP.needs, STEP)]
    state = next((s for s in states if s not in ("loaded", "built")), None)
    where = f"is {state} here" if state else "does not load here"
    return Refusal(f"its library {where} (zoo native status); its layers qualify, and "
                   "`zoo native build` makes the native step run them")


def add_layer(plan: dict, *, attn: nn.Module, cross: nn.Module | None, norms: tuple,
              ffn: nn.Module, norm_first: bool, rows: int | None,
              after: tuple = (None, None), parallel: bool = False) -> Refusal | None:
    """Append one layer's products, norms and settings to ``plan``: self-attention
    ``attn``, cross-attention ``cross`` (None: a decoder-only layer), ``norms`` before or
    after each sublayer (the middle one None without cross-attention), the feed-forward
    network ``ffn``, for ``rows`` rows a step (None: a kept plan's, whose calls check their
    rows: :func:`for_call`); ``after``: a sandwich layer's norms of the
    attention's and the network's outputs (Gemma 2 and 3), or Nones; ``parallel``: the
    network beside the attention, on the layer's input (GPT-NeoX), pre-norm only. None
    when added; the :class:`Refusal` (the plan is then unusable) when the native step
    cannot run it."""
    fused, network = fused_qkv(attn), _network(ffn)
    kinds = {_norm_kind(n, attn.out_proj.out_features) for n in (*norms, *after)
             if n is not None}
    why = _refusal(plan, attn=attn, cross=cross, fused=fused, network=network, kinds=kinds,
                   ffn=ffn, rows=rows)
    if why:
        return Refusal(why)
    plan["shape"] = (attn.n_heads, attn.head_dim, attn.n_kv_heads)
    layer = None  # (the layers are checked without the library; built with it)
    if plan["missing"] is None:
        layer = _layer(attn=attn, cross=cross, norms=norms, fused=fused, network=network)
        layer.layout(norm_first, bool(kinds.pop()))
        layer.parallel_residual(parallel)
        _after_norms(layer, after)
    plan["layers"].append(layer)
    plan["bias_of"].append(attn.positional if attn.position_kind == "bias" else None)
    plan["sources"] += [t for part in (attn, cross, *norms, *after, ffn) if part is not None
                        for t in part.state_dict(keep_vars=True).values()]
    return None


def _refusal(plan: dict, *, attn: nn.Module, cross: nn.Module | None, fused, network: tuple,
             kinds: set, ffn: nn.Module, rows: int | None) -> str | None:
    """Why the native step cannot run this layer (None: it can), from its joined q|k|v
    (``fused``), its network's parts (:func:`_network`) and its norms' ``kinds``."""
    fc1, fc2, act, _ = network
    products = (fused, attn.out_proj, *(() if cross is None else (cross.q_proj, cross.out_proj)),
                fc1, fc2)
    shape = (attn.n_heads, attn.head_dim, attn.n_kv_heads)
    checks = (
        (fused is None, "its self-attention's q and k|v are not two plain products of one kind"),
        (attn.position_kind not in (None, "bias", "rotary"),
         f"positions of kind {attn.position_kind!r} inside attention"),
        (fc1 is None or act is None, f"its network ({type(ffn).__name__}) is not a plain MLP "
                                     "or GLU of ReLU, GELU or SiLU"),
        (not all(_plain_linear(x, rows) for x in products if x is not None),
         "a product that is not zoo's Linear, QuantizedLinear or Int4Linear" if rows is None else
         f"a product that does not give {rows} rows to zoo's native product"),
        (len(kinds) != 1 or None in kinds, "its norms are not all plain LayerNorms or all "
                                           "plain RMSNorms of the model's width"),
        (isinstance(attn.scale, torch.Tensor) or (
            cross is not None and isinstance(cross.scale, torch.Tensor)),
         "a learned attention scale"),
        (cross is not None and ((cross.n_heads, cross.head_dim) != shape[:2]
                                or cross.n_kv_heads != cross.n_heads),
         "its cross-attention's heads differ from its self-attention's"),
        (plan["shape"] not in (None, shape), "its layers' heads differ"),
        (getattr(attn, "window", None) is not None and attn.position_kind == "bias",
         "a sliding window beside a bias of the scores"),
        (attn.q_norm is not None and not all(
            _plain_vector(n.weight, attn.head_dim) for n in (attn.q_norm, attn.k_norm)),
         "its queries' and keys' norms are not plain fp32 vectors of a head's width"),
    )
    return next((why for failed, why in checks if failed), None)


def _layer(*, attn: nn.Module, cross: nn.Module | None, norms: tuple, fused,
           network: tuple):
    """The native step's ``Layer`` of one layer (that :func:`_refusal` passed): each
    product, norm and setting given by name."""
    fc1, fc2, act, gated = network
    layer = torch.classes.zoo_decoder.Layer()
    cross_products = (None, None) if cross is None else (cross.q_proj, cross.out_proj)
    for which, part in enumerate((fused, attn.out_proj, *cross_products, fc1, fc2)):
        if part is not None:
            layer.product(which, _product_weight(part), part.bias, part.native_weight())
    for which, part in enumerate(norms):
        if part is not None:
            layer.norm(which, _norm_scale(part), getattr(part, "bias", None), float(part.eps))
    if attn.q_norm is not None:
        layer.head_norms(_norm_scale(attn.q_norm), _norm_scale(attn.k_norm),
                         float(attn.q_norm.eps))
    if getattr(attn, "window", None):
        layer.sliding_window(int(attn.window))
    if getattr(attn, "softcap", None):
        layer.softcap(float(attn.softcap))
    layer.scales(attn.head_dim ** -0.5 if attn.scale is None else attn.scale,
                 1.0 if cross is None else cross.head_dim ** -0.5 if cross.scale is None
                 else cross.scale)
    layer.network(act, bool(gated))
    return layer


def _after_norms(layer, after: tuple) -> None:
    """A sandwich layer's norms of its attention's and its network's outputs (Gemma 2 and
    3), given to ``layer``; nothing for a layer without them."""
    attention, network = after
    if attention is not None:
        layer.after_norms(_norm_scale(attention), getattr(attention, "bias", None),
                          _norm_scale(network), getattr(network, "bias", None),
                          float(attention.eps))


def _norm_scale(norm: nn.Module) -> torch.Tensor:
    """What a norm multiplies by: its weight, or weight + offset for an RMSNorm (or a
    head norm) that stores its scale less one (Gemma's), kept as a copy made again when
    the weight changes."""
    offset = float(getattr(norm, "offset", 0.0))
    if not offset:
        return norm.weight
    return derived_copy(norm, "_native_scale", (norm.weight,),
                        lambda: (norm.weight.detach() + offset).contiguous(), tag=offset)


def may_run(x: torch.Tensor) -> bool:
    """True when the step may run now on ``x``: no autograd, fp32, no autocast, and
    zoo's linear layers free to use their packed copies."""
    return (not torch.is_grad_enabled() and x.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu") and Linear.fast_inference)


def seal(plan: dict, keep: torch.Tensor | None = None) -> dict:
    """``plan`` with its C++ object (``torch.classes.zoo_decoder.Plan``) made once for the
    decoding call: its ``Layer`` objects added, the buffers given (each layer's keys and
    values; the sources' for cross-attention, or none), then ``keep``, the sources' padding
    (False at it) for cross-attention. Buffers that do not fit the layers are one
    ValueError naming them."""
    heads, width, kv_heads = plan["shape"] or (0, 0, 0)
    op = torch.classes.zoo_decoder.Plan(heads, width, kv_heads)
    for layer in plan["layers"]:
        op.add(layer)
    op.buffers(plan["k"], plan["v"], plan["cross_k"], plan["cross_v"])
    op.sources_padding(keep)
    op.watch(plan.get("sources", []))
    plan["op"] = op
    LOG.debug("the native step runs this model: %d layers in one call a step",
              len(plan["layers"]))
    return plan


NO_BUFFER = torch.empty(0)
"""What a kept plan's layers (:func:`kept_plan`) hold for their key and value buffers until
a call gives its own (:func:`for_call`), and what an encoder's layers hold: none is read."""


def seal_kept(plan: dict, blocks: list[nn.Module], *, cross: bool = False) -> dict | Refusal:
    """``plan`` of ``blocks`` (each layer added: :func:`add_layer` with ``rows=None``)
    sealed to be kept: each layer's buffers (and with ``cross`` the sources' keys and
    values) are :data:`NO_BUFFER` until a call gives its own, and its ``products`` are
    the blocks' linear layers, whose row limits each call checks (:func:`for_call`). The
    :class:`Refusal` of a library that is not here, once every layer has passed."""
    if plan["missing"] is not None:
        return plan["missing"]
    for key in ("k", "v", "cross_k", "cross_v") if cross else ("k", "v"):
        plan[key] += [NO_BUFFER] * len(blocks)
    plan["products"] = [layer for block in blocks for layer in block.modules()
                        if hasattr(layer, "takes_native")]
    return seal(plan)


def kept_plan(stack: nn.Module, name: str,
              build: Callable[[], dict | Refusal]) -> dict | Refusal:
    """The sealed plan ``build()`` makes of ``stack``'s layers, made once and kept beside
    the stack as ``name`` (:func:`zoo.plugin_api.derived_copy`) while its layers' modules
    and tensors are the ones it was made from, their bytes read again once in each
    fixed-weights block; inside a block that has checked it, a call reads only the
    tensors' versions (:func:`zoo.plugin_api.held_copy`). The :class:`Refusal` where
    ``build`` refused the layers (kept too, and made again with them). Its ``products``
    are the linear layers whose row limits a call must keep (:func:`for_call`)."""
    plan = held_copy(stack, name)
    if plan is None or (isinstance(plan, dict) and outdated(plan)):
        sources = tuple(stack.layers.state_dict(keep_vars=True).values())
        plan = derived_copy(stack, name, sources, build, tag=_settings(stack))
    return plan


def _settings(stack: nn.Module) -> tuple:
    """Each module of ``stack``'s layers, its class and its settings (the numbers, strings
    and flags of its own): a kept plan is made again when one changes (a norm's eps, a
    network's class), as when a tensor does."""
    return tuple((id(m), type(m), tuple((k, v) for k, v in vars(m).items()
                                        if not k.startswith("_")
                                        and isinstance(v, (bool, int, float, str))))
                 for m in stack.layers.modules())


def takes_rows(kept: dict, rows: int) -> bool:
    """Whether every product of a kept plan (:func:`kept_plan`) gives ``rows`` rows to
    zoo's native product now (the reason logged where one does not)."""
    if rows and all(layer.takes_native(rows) for layer in kept["products"]):
        return True
    refused(f"a product does not give {rows} rows to zoo's native product")
    return False


def for_call(kept: dict | Refusal | None, rows: int, keep: torch.Tensor | None, *, k: list,
             v: list, cross_k: list = (), cross_v: list = ()) -> dict | None:
    """A kept plan (:func:`kept_plan`) for one decoding call of ``rows`` rows: its C++
    object copied (the same weights) and given the call's buffers (each layer's keys and
    values ``k``, ``v``; the sources' ``cross_k``, ``cross_v`` or none) and the sources'
    padding ``keep``; None where there is no plan (a :class:`Refusal`) or a product takes
    fewer rows natively.
    Building and sealing a plan took 2 ms of a 42 ms sentence (transformer-base in
    int8, beam 4, on a 2-core Xeon)."""
    if not kept or not takes_rows(kept, rows):
        return None
    plan = {**kept, "k": list(k), "v": list(v), "cross_k": list(cross_k),
            "cross_v": list(cross_v), "bias_tables": {}, "rotation_tables": {}}
    op = plan["op"] = kept["op"].copy()
    op.buffers(plan["k"], plan["v"], plan["cross_k"], plan["cross_v"])
    op.sources_padding(keep)
    return plan


def outdated(plan: dict) -> bool:
    """True when a weight the sealed ``plan`` was made from has changed since, as torch
    counts changes (``w.mul_(3)`` between two steps of one decoding): the plan's packed
    and joined copies are then made again (the owner seals a new plan over the same
    buffers) before the next step. A write torch does not count (through ``.data``)
    inside one decoding is not seen: decoding fixes its model's weights
    (:func:`zoo.derived.fixed_weights`)."""
    return plan["op"].changed()


def run(plan: dict, x: torch.Tensor, pos: int, *,
        self_keep: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` (rows, 1, d) through every layer of ``plan`` (sealed: :func:`seal`) at step
    ``pos``: the keys and values of that position go into the plan's buffers;
    ``self_keep`` (rows, buffer length) is the keys' own padding (False at it)."""
    op = plan["op"]
    rotary = plan["rotary"]
    if rotary is not None:
        op.rotate_layers(rotations_at(plan, rotary, pos))
    if any(module is not None for module in plan["bias_of"]):
        op.position_biases(position_biases(plan, pos))
    op.keys_padding(self_keep)
    return op.step(x.contiguous(), pos)
