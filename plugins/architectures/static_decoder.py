"""Decoding steps of the seq2seq architecture in preallocated buffers, with
self-attention's queries, keys and values in one product.

A decoding step of the general path (:class:`zoo.plugin_api.DecoderCache`, each
attention's ``forward``) is thousands of small operators and module calls: at one
sentence a step, their overhead costs about as much as the products themselves.
When every part of the decoder says it is plain (below), the step is written out
here instead, over the same parameters and modules:

- each layer's self-attention keys and values go into buffers of fixed size,
  allocated once for the longest output (rows x heads x length x head width);
- the queries, keys and values of self-attention come from one product, of a
  weight that joins ``q_proj`` and ``kv_proj`` (made once and kept while those
  weights stay the same; int8 ones join too);
- the encoder's output is projected for cross-attention once, one row per source,
  and the beams of a source attend to it together;
- the scores go through each attention's own ``_dense`` (its scale, its kernel), as
  the general path's ``_attend`` sends them;
- the norms, the feed-forward networks, the embeddings and the output are the
  model's own modules, called as they are.

Where this plugin's C++ step is built (:mod:`.native_step`, by ``zoo native build``), a step
whose layers are all of the kinds it computes (below, :func:`native_plan`: the paper's,
Marian's, BART's and T5's layers) runs through them in one call,
``torch.ops.zoo.decoder_layers``: the same operators in C++, without the Python of
each layer, on the same buffers (``StaticDecoder.native_step = False`` keeps Python).

Plain means: the decoder block's ``forward`` is the paper's layout (``static_layout``,
see :class:`zoo.plugins.blocks.decoder.DecoderBlock`), each attention's ``_attend``
is softmax attention over every key (``softmax_attention``, see
:class:`zoo.plugin_api.MultiHeadAttention`), and positions act on the embeddings, rotate
queries and keys, or add a bias to self-attention's scores (T5's); cross-attention has
none. Anything else (ALiBi, Shaw's relative positions, a mechanism of its own, recorded
attention maps, training mode) decodes by the general path, which gives the same tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.plugin_api import Linear, QuantizedLinear, derived_copy, private_copy

from .native_step import STEP


def _declares(module: nn.Module, flag: str, method: str) -> bool:
    """True when the class that writes ``method`` of ``module`` also sets ``flag`` True:
    a subclass that rewrites the method without saying the flag again is not trusted."""
    for cls in type(module).__mro__:
        if method in cls.__dict__:
            return bool(cls.__dict__.get(flag, False))
    return False


def plain_decoder(model: nn.Module) -> bool:
    """True when :class:`StaticDecoder` may run ``model``'s decoder (see the module)."""
    if model.training:
        return False
    for block in model.decoder.layers:
        if not _declares(block, "static_layout", "forward"):
            return False
        for attn in (block.self_attn, block.cross_attn):
            if not _declares(attn, "softmax_attention", "_attend") or attn.record_weights:
                return False
            if getattr(attn, "window", None) is not None:
                return False  # windowed attention: the general path
        if (block.self_attn.position_kind not in (None, "rotary", "bias")
                or block.cross_attn.position_kind is not None):
            return False
    return True


def fused_qkv(attn: nn.Module) -> nn.Module | None:
    """One linear layer giving [q | k | v] of a self-attention (see :func:`joined`)."""
    return joined(attn, "_fused_qkv", attn.q_proj, attn.kv_proj)


def joined(holder: nn.Module, name: str, first: nn.Module, second: nn.Module) -> nn.Module | None:
    """One linear layer giving [first(x) | second(x)] where both are plain linear layers
    of one kind: zoo's ``Linear``, or int8 ``QuantizedLinear`` (whose rows, each with its
    own scale, join exactly); None otherwise. It is kept on ``holder`` as ``name``, made
    once and made again when either weight changes; it holds copies, so it is never
    trained or saved."""
    if type(first) is not type(second) or (first.bias is None) != (second.bias is None):
        return None
    if type(first) is Linear:
        return derived_copy(holder, name, (first.weight, second.weight, first.bias,
                                           second.bias),
                            lambda: _joined_linear(first, second))
    if type(first) is QuantizedLinear:
        return derived_copy(holder, name, (first.weight_int8, second.weight_int8,
                                           first.weight_scale, second.weight_scale,
                                           first.bias, second.bias),
                            lambda: _joined_int8(first, second))
    return None


def _joined_linear(q: Linear, kv: Linear) -> Linear:
    weight = torch.cat([q.weight.detach(), kv.weight.detach()])
    fused = Linear(weight.shape[1], weight.shape[0], bias=q.bias is not None, device="meta")
    fused.weight = nn.Parameter(weight, requires_grad=False)
    if q.bias is not None:
        fused.bias = nn.Parameter(torch.cat([q.bias.detach(), kv.bias.detach()]),
                                  requires_grad=False)
    fused.eval()
    return private_copy(fused)  # its weight is this copy: nothing else writes it


def _joined_int8(q: QuantizedLinear, kv: QuantizedLinear) -> QuantizedLinear:
    fused = QuantizedLinear(q.in_features, q.out_features + kv.out_features,
                            bias=q.bias is not None)
    fused.weight_int8 = torch.cat([q.weight_int8, kv.weight_int8])
    fused.weight_scale = torch.cat([q.weight_scale, kv.weight_scale])
    if q.bias is not None:
        fused.bias = torch.cat([q.bias, kv.bias])
    fused.native_rows = q.native_rows
    return private_copy(fused.eval())


class _Layer:
    """What one decoder layer keeps between steps."""

    def __init__(self, block: nn.Module, memory: torch.Tensor, rows: int, length: int) -> None:
        self.block = block
        self.fused = fused_qkv(block.self_attn)
        k, v = block.cross_attn._keys_values(memory)
        # (sources, heads, source length, head width), laid out once
        self.cross_k, self.cross_v = k.contiguous(), v.contiguous()
        attn = block.self_attn
        shape = (rows, attn.n_kv_heads, length, attn.head_dim)
        self.k = self.cross_k.new_empty(shape)
        self.v = self.cross_v.new_empty(shape)


_ACTIVATIONS = {(nn.ReLU, "none"): 0, (nn.GELU, "none"): 1, (nn.GELU, "tanh"): 2,
                (nn.SiLU, "none"): 3}
"""The feed-forward activations zoo's native step computes, and its codes for them."""


def _plain_linear(layer: nn.Module, rows: int) -> bool:
    return type(layer) in (Linear, QuantizedLinear) and layer.takes_native(rows)


def _product_weight(layer: nn.Module) -> torch.Tensor:
    """The weight the native step checks a product's sizes by (fp32, or int8)."""
    return layer.weight_int8 if type(layer) is QuantizedLinear else layer.weight


def _norm_kind(norm: nn.Module, width: int) -> int | None:
    """0 for a LayerNorm the native step may run (it says ``plain_layer_norm``), 1 for an
    RMSNorm (``plain_rms_norm``, no bias), None otherwise; their weight (and bias) are
    contiguous fp32 CPU vectors of the model's width (a strided or short one stays in
    Python, which reads it as torch does, or refuses it)."""
    if not all(_plain_vector(t, width) for t in (norm.weight, getattr(norm, "bias", None))):
        return None
    if _declares(norm, "plain_layer_norm", "forward"):
        return 0
    if _declares(norm, "plain_rms_norm", "forward") and getattr(norm, "bias", None) is None:
        return 1
    return None


def _network(ffn: nn.Module) -> tuple[nn.Module | None, nn.Module | None, int | None, int]:
    """A feed-forward network's first and second products, its activation's code and
    whether it is gated (fc1_g and fc1_x joined into one product): what the native step
    reads of a network that says ``plain_mlp`` or ``plain_glu``; Nones otherwise."""
    act = getattr(ffn, "act", None)
    code = _ACTIVATIONS.get((type(act), getattr(act, "approximate", "none")))
    if _declares(ffn, "plain_mlp", "forward"):
        return ffn.fc1, ffn.fc2, code, 0
    if _declares(ffn, "plain_glu", "forward"):
        return joined(ffn, "_fused_gate", ffn.fc1_g, ffn.fc1_x), ffn.fc2, code, 1
    return None, None, None, 0


def _plain_vector(t: torch.Tensor | None, width: int) -> bool:
    return t is None or (t.dtype == torch.float32 and t.device.type == "cpu"
                         and t.is_contiguous() and tuple(t.shape) == (width,))


def native_plan(layers: list["_Layer"], rows: int) -> dict | None:
    """The arguments of ``torch.ops.zoo.decoder_layers`` for these layers, or None when
    the native step may not run them: it runs the paper's layer (post- or pre-norm) with
    joined q|k|v, no positions inside attention but a bias of the self-attention scores
    (T5's, ALiBi) or one rotation of its queries and keys (RoPE), LayerNorms that say ``plain_layer_norm`` or RMSNorms that say
    ``plain_rms_norm``, feed-forward networks that say ``plain_mlp`` or ``plain_glu``
    (GEGLU, SwiGLU) with a ReLU, GELU or SiLU, and products that each give ``rows`` rows
    to zoo's native product: zoo's ``Linear`` (fp32 CPU weights) or ``QuantizedLinear``
    (int8). ``plan["bias_of"]`` holds each layer's position bias module (or None), whose
    bias the step computes for its position."""
    if not rows or not STEP.available():
        return None
    plan: dict = {key: [] for key in ("params", "packed", "k", "v", "cross_k", "cross_v",
                                      "self_scale", "cross_scale", "eps", "norm_first",
                                      "activation", "gated", "rms_norm", "bias_of")}
    shape = None
    plan["rotary"] = rotary = _one_rotation([layer.block.self_attn for layer in layers])
    if rotary is False:
        return None
    for layer in layers:
        block = layer.block
        attn, cross = block.self_attn, block.cross_attn
        norms = (block.norm1, block.norm2, block.norm3)
        fc1, fc2, act, gated = _network(block.ffn)
        linears = (layer.fused, attn.out_proj, cross.q_proj, cross.out_proj, fc1, fc2)
        kinds = {_norm_kind(n, attn.out_proj.out_features) for n in norms}
        if (layer.fused is None or attn.position_kind not in (None, "bias", "rotary")
                or act is None
                or not all(_plain_linear(x, rows) for x in linears)
                or len(kinds) != 1 or None in kinds
                or any(isinstance(a.scale, torch.Tensor) for a in (attn, cross))
                or (attn.n_heads, attn.head_dim) != (cross.n_heads, cross.head_dim)
                or cross.n_kv_heads != cross.n_heads
                or shape not in (None, (attn.n_heads, attn.head_dim, attn.n_kv_heads))):
            return None
        shape = (attn.n_heads, attn.head_dim, attn.n_kv_heads)
        for part in linears:
            plan["params"] += [_product_weight(part), part.bias]
        for part in norms:
            plan["params"] += [part.weight, getattr(part, "bias", None)]
        plan["packed"] += [part.native_weight() for part in linears]
        plan["k"].append(layer.k)
        plan["v"].append(layer.v)
        plan["cross_k"].append(layer.cross_k)
        plan["cross_v"].append(layer.cross_v)
        plan["self_scale"].append(attn.head_dim ** -0.5 if attn.scale is None else attn.scale)
        plan["cross_scale"].append(cross.head_dim ** -0.5 if cross.scale is None
                                   else cross.scale)
        plan["eps"] += [float(n.eps) for n in norms]
        plan["norm_first"].append(int(block.norm_first))
        plan["activation"].append(act)
        plan["gated"].append(gated)
        plan["rms_norm"].append(kinds.pop())
        plan["bias_of"].append(attn.positional if attn.position_kind == "bias" else None)
    plan["heads"], plan["width"], plan["kv_heads"] = shape
    return plan


def _one_rotation(attentions: list[nn.Module]) -> nn.Module | None | bool:
    """The rotary position module whose rotation the native step applies to every layer's
    queries and keys (None when no layer rotates; False when some do and some do not, or
    their modules rotate differently: the step takes one rotation)."""
    modules = [a.positional if a.position_kind == "rotary" else None for a in attentions]
    if all(m is None for m in modules):
        return None
    if any(m is None for m in modules):
        return False
    first = rotation_matrix(modules[0], 1, attentions[0].head_dim)
    if not all(m is modules[0] or torch.equal(rotation_matrix(m, 1, a.head_dim), first)
               for m, a in zip(modules, attentions)):
        return False
    return modules[0]


def rotation_matrix(module: nn.Module, pos: int, width: int) -> torch.Tensor:
    """(width, width) M with ``module.rotate(x, [pos]) == x @ M`` for every head vector x:
    each row is the rotation of one unit vector (RoPE is linear in x, whatever its layout,
    scaling or rotated share of the width)."""
    eye = torch.eye(width)[:, None, None, :]  # (width rows, 1 head, 1 position, width)
    return module.rotate(eye, torch.tensor([pos]))[:, 0, 0].float().contiguous()


def _position_biases(modules: list, pos: int) -> list[torch.Tensor | None]:
    """Each layer's bias of step ``pos``'s self-attention scores, (heads, pos + 1): its
    module's ``bias`` of the keys' positions less the query's, once for each module
    (T5's layers share one)."""
    made: dict[int, torch.Tensor] = {}
    out = []
    for module in modules:
        if module is None:
            out.append(None)
            continue
        if id(module) not in made:
            rel = torch.arange(-pos, 1)[None]  # (1 query, pos + 1 keys)
            made[id(module)] = module.bias(rel)[:, 0].float().contiguous()
        out.append(made[id(module)])
    return out


class StaticDecoder:
    """Next-token logits, one step at a time, for ``sources`` x ``groups`` rows (the
    beams of each source are consecutive rows), for at most ``length`` steps.

    ``memory`` (sources, Ls, d) is the encoder's output and ``memory_mask`` (sources,
    Ls) True at its padding. :meth:`__call__` takes the new tokens (rows, 1) and
    returns logits (rows, 1, vocab); :meth:`reorder` keeps rows as a beam search does,
    each moved only among the beams of its own source."""

    def __init__(self, model: nn.Module, memory: torch.Tensor,
                 memory_mask: torch.Tensor | None, *, groups: int, length: int) -> None:
        self.model, self.groups, self.length = model, groups, length
        self.sources = memory.shape[0]
        self.rows = self.sources * groups
        self.filled = 0
        self.keep = None if memory_mask is None else ~memory_mask[:, None, None, :]
        self.layers = [_Layer(block, memory, self.rows, length)
                       for block in model.decoder.layers]
        self.native = native_plan(self.layers, self.rows) \
            if self.native_step and memory.dtype == torch.float32 else None

    native_step = True
    """Set False (on the class or one decoder) to keep every step in Python."""

    # -- one step -------------------------------------------------------------------------------
    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        m, pos = self.model, self.filled
        if pos >= self.length:
            raise ValueError(f"the decoder's buffers hold {self.length} steps; "
                             "make a StaticDecoder with a larger length")
        x = m._embed(m.tgt_embed, m.decoder, m.positional, tokens, pos)
        plan = self.native
        if (plan is not None and not torch.is_grad_enabled() and x.dtype == torch.float32
                and not torch.is_autocast_enabled("cpu") and Linear.fast_inference):
            x = torch.ops.zoo.decoder_layers(
                x.contiguous(), pos, plan["params"], plan["packed"], plan["k"], plan["v"],
                plan["cross_k"], plan["cross_v"], self.keep, plan["heads"], plan["width"],
                plan["self_scale"], plan["cross_scale"], plan["eps"], plan["norm_first"],
                plan["activation"], _position_biases(plan["bias_of"], pos), plan["gated"],
                plan["rms_norm"], plan["kv_heads"],
                None if plan["rotary"] is None else rotation_matrix(
                    plan["rotary"], pos, plan["width"]),
                None)
        else:
            for layer in self.layers:
                x = self._layer(layer, x, pos)
        self.filled = pos + 1
        if m.decoder.norm is not None:
            x = m.decoder.norm(x)
        if m.output_scale is not None:
            x = x * m.output_scale
        return m.lm_head(x)

    def _layer(self, layer: _Layer, x: torch.Tensor, pos: int) -> torch.Tensor:
        block = layer.block
        if block.norm_first:
            x = x + self._self_attention(layer, block.norm1(x), pos)
            x = x + self._cross_attention(layer, block.norm2(x))
            return x + block.ffn(block.norm3(x))
        x = block.norm1(x + self._self_attention(layer, x, pos))
        x = block.norm2(x + self._cross_attention(layer, x))
        return block.norm3(x + block.ffn(x))

    def _self_attention(self, layer: _Layer, h: torch.Tensor, pos: int) -> torch.Tensor:
        attn = layer.block.self_attn
        rows, heads, kv_heads, width = h.shape[0], attn.n_heads, attn.n_kv_heads, attn.head_dim
        qkv = layer.fused(h) if layer.fused is not None else torch.cat(
            [attn.q_proj(h), attn.kv_proj(h)], -1)
        q = qkv[..., :attn.inner_dim].reshape(rows, heads, width)
        k, v = qkv[..., attn.inner_dim:].reshape(rows, 2, kv_heads, width).unbind(1)
        q, k = q[:, :, None], k[:, :, None]  # (rows, heads, 1, width)
        if attn.position_kind == "rotary":
            at = torch.tensor([pos], device=h.device)
            q, k = attn.positional.rotate(q, at), attn.positional.rotate(k, at)
        layer.k[:, :, pos: pos + 1] = k
        layer.v[:, :, pos: pos + 1] = v[:, :, None]
        out = attn._dense(q, *attn._shared_heads(layer.k[:, :, : pos + 1],
                                                 layer.v[:, :, : pos + 1]), None, offset=pos)
        return attn.out_proj(out.view(rows, 1, attn.inner_dim))

    def _cross_attention(self, layer: _Layer, h: torch.Tensor) -> torch.Tensor:
        attn = layer.block.cross_attn
        s, g, heads, width = self.sources, self.groups, attn.n_heads, attn.head_dim
        # the beams of a source are one longer query sequence over its keys
        q = attn.q_proj(h).view(s, g, heads, width).transpose(1, 2)
        out = attn._dense(q, layer.cross_k, layer.cross_v, self.keep)  # (s, heads, g, width)
        return attn.out_proj(out.transpose(1, 2).reshape(self.rows, 1, attn.inner_dim))

    # -- beams ----------------------------------------------------------------------------------
    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (each taken from a row of the same source). Only the rows
        that change are copied: in a beam search's usual step most beams go on from
        themselves."""
        n = self.filled
        moved = (index != torch.arange(index.numel(), device=index.device)).nonzero().flatten()
        if not moved.numel():
            return
        sources = index.index_select(0, moved)
        for layer in self.layers:
            for buf in (layer.k, layer.v):
                filled = buf[:, :, :n]
                # every source row is read before any is written (a row may be both)
                filled.index_copy_(0, moved, filled.index_select(0, sources))
