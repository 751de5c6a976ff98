"""Calls of zoo's native decoding step with arguments that do not fit together, each of
which once crashed the process or read past a tensor (issue 36's fuzz run). Run as
``python -m tests.native_fuzz`` by test_static_decoder.py, in a process of its own: every
call must end in a ValueError that names the argument, and the process must live to print
``survived N``.

A call is written as the step's arguments were when the step was one op
(``decoder_layers(x, pos, params, packed, ...)``); :func:`step` gives them to the plan
object it is now (``torch.classes.zoo_decoder.Plan``, built by ``seal``), so that each
inconsistency still reaches it."""

from __future__ import annotations

import torch

from zoo.ops import Linear
from zoo.plugins.architectures.native_plan import seal
from zoo.plugins.architectures.static_decoder import StaticDecoder

from .test_static_decoder import source, tiny


def valid_call():
    """The arguments of one real step of a tiny model's native plan (3 sources, 2 beams)."""
    torch.manual_seed(0)
    Linear.native_rows = 16  # 6 rows a step: past AVX-512's default of 4
    model = tiny()
    src = source()
    memory, mask = model.encode(src), model.padding_mask(src)
    decoder = StaticDecoder(model, memory, mask, groups=2, length=6)
    plan = decoder.native
    assert plan is not None, "the native step does not run this model"
    x = torch.randn(decoder.rows, 1, memory.shape[-1])
    return [x, 0, list(plan["params"]), list(plan["packed"]), list(plan["k"]), list(plan["v"]),
            list(plan["cross_k"]), list(plan["cross_v"]), decoder.keep, plan["shape"][0],
            plan["shape"][1], list(plan["self_scale"]), list(plan["cross_scale"]),
            list(plan["eps"]), list(plan["norm_first"]), list(plan["activation"]),
            [None] * len(plan["k"]), list(plan["gated"]), list(plan["rms_norm"]),
            plan["shape"][2], None, None]


NAMES = ("x", "pos", "params", "packed", "k", "v", "cross_k", "cross_v", "keep", "heads",
         "width", "self_scale", "cross_scale", "eps", "norm_first", "activation", "self_bias",
         "gated", "rms_norm", "kv_heads", "rotation", "self_keep")
"""The arguments of a call, in the order the CHANGES index them."""


def step(args):
    """One step of the plan ``args`` describe."""
    a = dict(zip(NAMES, args))
    plan = {key: a[key] for key in ("params", "packed", "k", "v", "cross_k", "cross_v",
                                    "self_scale", "cross_scale", "eps", "norm_first",
                                    "activation", "gated", "rms_norm")}
    plan.update(shape=(a["heads"], a["width"], a["kv_heads"]), rotary=None,
                bias_of=[None] * len(a["k"]), bias_tables={}, head_eps=[1e-6] * len(a["k"]),
                windows=[0] * len(a["k"]), after_eps=[1e-6] * len(a["k"]),
                score_cap=[0.0] * len(a["k"]), parallel=[0] * len(a["k"]))
    op = seal(plan, a["keep"])["op"]
    op.position_biases(a["self_bias"])
    op.rotate(a["rotation"])
    op.keys_padding(a["self_keep"])
    return op.step(a["x"], a["pos"])


def _set(index, value):
    def change(args):
        args[index] = value(args[index]) if callable(value) else value
    return change


def _item(index, item, value):
    def change(args):
        args[index][item] = value(args[index][item])
    return change


def _int8_qkv(args, cut=0, inputs=0):
    """Layer 0's q|k|v made int8 (weight and pack), its pack then cut or of other inputs."""
    weight = args[2][0]
    q = torch.ones(weight.shape[0], weight.shape[1] + inputs, dtype=torch.int8)
    packed = torch.ops.zoo.pack_int8_weight(q, torch.ones(q.shape[0]))
    args[2][0] = torch.ones(weight.shape, dtype=torch.int8)
    args[3][0] = packed[:packed.numel() - cut]


CHANGES = {
    # the SIGSEGV, SIGFPE and malloc assertions, and its silent reads
    "heads doubled": _set(9, lambda h: h * 2),
    "width doubled": _set(10, lambda w: w * 2),
    "heads zero": _set(9, 0),
    "width negative": _set(10, -4),
    "more rows than the buffers": _set(0, lambda x: torch.randn(x.shape[0] * 2, 1, x.shape[2])),
    "rows not a multiple of the sources": _set(0, lambda x: x[:-1].contiguous()),
    "no sources": _set(6, lambda ks: [k[:0] for k in ks]),
    "a wider x": _set(0, lambda x: torch.randn(x.shape[0], 1, x.shape[2] + 4)),
    "x of two rows of tokens": _set(0, lambda x: torch.randn(x.shape[0], 2, x.shape[2])),
    "x in float64": _set(0, lambda x: x.double()),
    "a step past the buffers": _set(1, 6),
    "a negative step": _set(1, -1),
    "a short key buffer": _item(4, 0, lambda k: k[:, :, :2].contiguous()),
    "a strided value buffer": _item(5, 0, lambda v: v.transpose(2, 3).contiguous().transpose(2, 3)),
    "short cross keys": _item(6, 0, lambda k: k[:, :, :2].contiguous()),
    "cross values of another source length": _item(7, 0, lambda v: torch.cat([v, v], 2)),
    "a norm weight four short": _item(2, 12, lambda w: w[:-4].contiguous()),
    "a strided norm weight": _item(2, 12, lambda w: torch.randn(2 * w.numel())[::2]),
    "a strided fc2 bias": _item(2, 11, lambda b: torch.randn(2 * b.numel())[::2]),
    "a qkv weight of another width": _item(2, 0, lambda w: w[:-8].contiguous()),
    "a pack of another weight": _item(3, 4, lambda p: torch.ops.zoo.pack_linear_weight(
        torch.randn(7, 32))),
    "an int8 pack for an fp32 weight": _item(3, 0, lambda p: torch.ops.zoo.pack_int8_weight(
        torch.ones(96, 32, dtype=torch.int8), torch.ones(96))),
    "an int8 pack cut short": lambda args: _int8_qkv(args, cut=64),
    "an int8 pack of another width": lambda args: _int8_qkv(args, inputs=-4),
    "a tensor that is not a pack": _item(3, 0, lambda p: torch.randn(p.numel())),
    "params one short": _set(2, lambda ps: ps[:-1]),
    "packed one short": _set(3, lambda ps: ps[:-1]),
    "no layers": lambda args: [args.__setitem__(i, []) for i in (2, 3, 4, 5, 6, 7)] and None,
    "an unknown activation": _item(15, 0, lambda a: 7),
    "a negative eps": _item(13, 0, lambda e: -1.0),
    "a keep mask of another size": _set(8, lambda k: k[:, :, :, :-1]),
    "one eps short": _set(13, lambda es: es[:-1]),
    "a position bias of the buffers' length": _item(16, 0, lambda b: torch.zeros(4, 6)),
    "a position bias in float64": _item(16, 0, lambda b: torch.zeros(4, 1, dtype=torch.float64)),
    "one position bias short": _set(16, lambda bs: bs[:-1]),
    "a gated network whose first product is not two halves": _item(17, 0, lambda g: 1),
    "an RMSNorm given a bias": _item(18, 0, lambda r: 1),
    "one gated flag short": _set(17, lambda gs: gs[:-1]),
    "kv_heads that do not divide the heads": _set(19, 3),
    "kv_heads fewer than the buffers hold": _set(19, 2),
    "a rotation of another width": _set(20, torch.eye(8)),
    "a self_keep of another length": _set(21, torch.ones(6, 5, dtype=torch.bool)),
    "head norms of another width": lambda args: [
        args[2].__setitem__(i, torch.ones(args[10] + 4)) for i in (18, 19)] and None,
    "a key norm in float64": lambda args: [
        args[2].__setitem__(18, torch.ones(args[10])),
        args[2].__setitem__(19, torch.ones(args[10], dtype=torch.float64))] and None,
    "after-norms of another width": lambda args: [
        args[2].__setitem__(i, torch.ones(args[10] * args[9] + 4)) for i in (20, 22)] and None,
    "no cross-attention but a keep mask": lambda args: [args.__setitem__(i, []) for i in (6, 7)]
    and None,
}


def main() -> None:
    reference = valid_call()
    step(reference)  # the valid call runs
    survived = 0
    for name, change in CHANGES.items():
        args = valid_call()
        change(args)
        try:
            step(args)
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
