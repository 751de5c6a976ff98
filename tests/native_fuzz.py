"""Calls of zoo's native decoding step with parts that do not fit together, each of which
once crashed the process or read past a tensor (issue 36's fuzz run). Run as
``python -m tests.native_fuzz`` by test_static_decoder.py, in a process of its own: every
call must end in a ValueError that names the part, and the process must live to print
``survived N``.

A call is one step of a plan (``torch.classes.zoo_decoder.Plan``) whose layers are given
part by part, by name (``Layer.product``, ``Layer.norm``, ...), as ``seal`` gives them: a
call is written here as those parts, by name (:func:`valid_call`), and each change makes
one part wrong."""

from __future__ import annotations

import torch

from zoo.ops import Linear
from zoo.plugins.architectures.native_plan import fused_qkv
from zoo.plugins.architectures.static_decoder import StaticDecoder

from .test_static_decoder import source, tiny


def _product(linear):
    return [linear.weight, linear.bias, linear.native_weight()]


def _layer(block):
    """One decoder layer's parts, by name, as the plan is given them."""
    attn, cross = block.self_attn, block.cross_attn
    return {"products": [_product(m) for m in (fused_qkv(attn), attn.out_proj, cross.q_proj,
                                                cross.out_proj, block.ffn.fc1, block.ffn.fc2)],
            "norms": [[n.weight, n.bias, float(n.eps)] for n in (block.norm1, block.norm2,
                                                                block.norm3)],
            "head_norms": None, "after": None, "scales": [attn.head_dim ** -0.5] * 2,
            "activation": 0, "gated": False, "pre": bool(block.norm_first), "rms": False}


def valid_call():
    """The parts of one real step of a tiny model's native plan (3 sources, 2 beams)."""
    torch.manual_seed(0)
    Linear.native_rows = 16  # 6 rows a step: past AVX-512's default of 4
    model = tiny()
    src = source()
    memory, mask = model.encode(src), model.padding_mask(src)
    decoder = StaticDecoder(model, memory, mask, groups=2, length=6)
    plan = decoder.native
    assert plan is not None, "the native step does not run this model"
    heads, width, kv_heads = plan["shape"]
    layers = [_layer(block) for block in model.decoder.layers]
    return {"x": torch.randn(decoder.rows, 1, memory.shape[-1]), "pos": 0, "layers": layers,
            "k": list(plan["k"]), "v": list(plan["v"]), "cross_k": list(plan["cross_k"]),
            "cross_v": list(plan["cross_v"]), "keep": decoder.keep, "heads": heads,
            "width": width, "kv_heads": kv_heads, "self_bias": [None] * len(layers),
            "rotation": None, "self_keep": None}


def step(call):
    """One step of the plan ``call`` describes: its layers given part by part, by name."""
    op = torch.classes.zoo_decoder.Plan(call["heads"], call["width"], call["kv_heads"])
    for parts in call["layers"]:
        layer = torch.classes.zoo_decoder.Layer()
        for which, product in enumerate(parts["products"]):
            if product is not None:
                layer.product(which, *product)
        for which, norm in enumerate(parts["norms"]):
            if norm is not None:
                layer.norm(which, *norm)
        if parts["head_norms"] is not None:
            layer.head_norms(*parts["head_norms"], 1e-6)
        if parts["after"] is not None:
            layer.after_norms(*parts["after"], 1e-6)
        layer.scales(*parts["scales"])
        layer.network(parts["activation"], parts["gated"])
        layer.layout(parts["pre"], parts["rms"])
        layer.parallel_residual(parts.get("parallel", False))
        op.add(layer)
    op.buffers(call["k"], call["v"], call["cross_k"], call["cross_v"])
    op.sources_padding(call["keep"])
    op.position_biases(call["self_bias"])
    op.rotate(call["rotation"])
    op.keys_padding(call["self_keep"])
    return op.step(call["x"], call["pos"])


def _set(name, value):
    def change(call):
        call[name] = value(call[name]) if callable(value) else value
    return change


def _item(name, item, value):
    def change(call):
        call[name][item] = value(call[name][item])
    return change


def _part(key, which, item, value):
    """Layer 0's ``key`` (products, norms) ``which``, its ``item`` (weight 0, bias 1, packed
    or eps 2) changed."""
    def change(call):
        part = call["layers"][0][key][which]
        part[item] = value(part[item])
    return change


def _setting(name, value):
    def change(call):
        call["layers"][0][name] = value
    return change


def _int8_qkv(call, cut=0, inputs=0):
    """Layer 0's q|k|v made int8 (weight and pack), its pack then cut or of other inputs."""
    product = call["layers"][0]["products"][0]
    weight = product[0]
    q = torch.ones(weight.shape[0], weight.shape[1] + inputs, dtype=torch.int8)
    packed = torch.ops.zoo.pack_int8_weight(q, torch.ones(q.shape[0]))
    product[0] = torch.ones(weight.shape, dtype=torch.int8)
    product[2] = packed[:packed.numel() - cut]


def _width(call):
    return call["width"]


CHANGES = {
    # the SIGSEGV, SIGFPE and malloc assertions, and its silent reads
    "heads doubled": _set("heads", lambda h: h * 2),
    "width doubled": _set("width", lambda w: w * 2),
    "heads zero": _set("heads", 0),
    "width negative": _set("width", -4),
    "more rows than the buffers": _set("x", lambda x: torch.randn(x.shape[0] * 2, 1,
                                                                  x.shape[2])),
    "rows not a multiple of the sources": _set("x", lambda x: x[:-1].contiguous()),
    "no sources": _set("cross_k", lambda ks: [k[:0] for k in ks]),
    "a wider x": _set("x", lambda x: torch.randn(x.shape[0], 1, x.shape[2] + 4)),
    "x of two rows of tokens": _set("x", lambda x: torch.randn(x.shape[0], 2, x.shape[2])),
    "x in float64": _set("x", lambda x: x.double()),
    "a step past the buffers": _set("pos", 6),
    "a negative step": _set("pos", -1),
    "a short key buffer": _item("k", 0, lambda k: k[:, :, :2].contiguous()),
    "a strided value buffer": _item("v", 0, lambda v: v.transpose(2, 3).contiguous()
                                    .transpose(2, 3)),
    "short cross keys": _item("cross_k", 0, lambda k: k[:, :, :2].contiguous()),
    "cross values of another source length": _item("cross_v", 0, lambda v: torch.cat([v, v], 2)),
    "a norm weight four short": _part("norms", 0, 0, lambda w: w[:-4].contiguous()),
    "a strided norm weight": _part("norms", 0, 0, lambda w: torch.randn(2 * w.numel())[::2]),
    "a strided fc2 bias": _part("products", 5, 1, lambda b: torch.randn(2 * b.numel())[::2]),
    "a qkv weight of another width": _part("products", 0, 0, lambda w: w[:-8].contiguous()),
    "a pack of another weight": _part("products", 4, 2, lambda p: torch.ops.zoo
                                      .pack_linear_weight(torch.randn(7, 32))),
    "an int8 pack for an fp32 weight": _part("products", 0, 2, lambda p: torch.ops.zoo
                                             .pack_int8_weight(torch.ones(96, 32,
                                                                          dtype=torch.int8),
                                                               torch.ones(96))),
    "an int8 pack cut short": lambda call: _int8_qkv(call, cut=64),
    "an int8 pack of another width": lambda call: _int8_qkv(call, inputs=-4),
    "a tensor that is not a pack": _part("products", 0, 2, lambda p: torch.randn(p.numel())),
    "a layer without its fc2": lambda call: call["layers"][0]["products"].__setitem__(5, None),
    "a layer without its norm3": lambda call: call["layers"][0]["norms"].__setitem__(2, None),
    "no layers": lambda call: [call.__setitem__(k, []) for k in ("layers", "k", "v", "cross_k",
                                                                 "cross_v", "self_bias")]
    and None,
    "buffers for one layer fewer": _set("k", lambda ks: ks[:-1]),
    "an unknown activation": _setting("activation", 7),
    "a negative eps": _part("norms", 0, 2, lambda e: -1.0),
    "a keep mask of another size": _set("keep", lambda k: k[:, :, :, :-1]),
    "a position bias of the buffers' length": _item("self_bias", 0, lambda b: torch.zeros(4, 6)),
    "a position bias in float64": _item("self_bias", 0, lambda b: torch.zeros(
        4, 1, dtype=torch.float64)),
    "one position bias short": _set("self_bias", lambda bs: bs[:-1]),
    "a gated network whose first product is not two halves": _setting("gated", True),
    "an RMSNorm given a bias": _setting("rms", True),
    "kv_heads that do not divide the heads": _set("kv_heads", 3),
    "kv_heads fewer than the buffers hold": _set("kv_heads", 2),
    "a rotation of another width": _set("rotation", torch.eye(8)),
    "a self_keep of another length": _set("self_keep", torch.ones(6, 5, dtype=torch.bool)),
    "head norms of another width": lambda call: call["layers"][0].__setitem__(
        "head_norms", [torch.ones(_width(call) + 4)] * 2),
    "a key norm in float64": lambda call: call["layers"][0].__setitem__(
        "head_norms", [torch.ones(_width(call)), torch.ones(_width(call), dtype=torch.float64)]),
    "after-norms of another width": lambda call: call["layers"][0].__setitem__(
        "after", [torch.ones(_width(call) * call["heads"] + 4), None,
                  torch.ones(_width(call) * call["heads"] + 4), None]),
    "no cross-attention but a keep mask": lambda call: [call.__setitem__(k, []) for k in (
        "cross_k", "cross_v")] and None,
    "a parallel layer with cross-attention": lambda call: call["layers"][0].update(
        pre=True, parallel=True),
}


def main() -> None:
    reference = valid_call()
    step(reference)  # the valid call runs
    survived = 0
    for name, change in CHANGES.items():
        call = valid_call()
        change(call)
        try:
            step(call)
        except ValueError as e:
            assert "decoder_layers" in str(e), (name, str(e))
            survived += 1
            print(f"{name}: {str(e).splitlines()[0]}")
        else:
            raise SystemExit(f"{name}: no error")
    print(f"survived {survived}")
    # the step lives in the plugin's own namespace, not in the core's, and no op of
    # positional arguments is left
    assert not hasattr(torch.ops.zoo, "decoder_layers")
    assert not hasattr(torch.ops.zoo_decoder, "decoder_layers")
    assert torch.classes.zoo_decoder.Plan is not None
    print("decoder_layers: namespace zoo_decoder")


if __name__ == "__main__":
    main()
