"""int8 inference: dynamic quantization of a model's linear layers.

Each ``nn.Linear`` (zoo's own :class:`zoo.ops.Linear` included) becomes a
:class:`QuantizedLinear`: its weight stored as int8 with one scale per output row
(symmetric, ``scale = max|w_row| / 127``), multiplied on the CPU by integer products that
quantize each call's activations on the fly (8 bits on CPUs with VNNI, 7 elsewhere) and
accumulate in int32: for a few rows (a decoding step) zoo's native product
(``zoo/csrc/int8_linear.cpp``: one activation scale per row, the weight read as int8 at
the memory's rate, inside the native decoding step too), for more PyTorch's quantized
kernels (FBGEMM through the ``x86`` engine: one scale per call, from its range).
Embeddings, norms and convolutions stay fp32.

Measured on this project's 2-core CPU (``zoo bench decode --dtypes fp32,int8``,
``docs/bench.md``): against zoo's packed fp32 layers these kernels are 2.5-4x faster
on decoding's small row counts. torchao's eager int8 configurations
(``Int8WeightOnlyConfig``, ``Int8DynamicActivationInt8WeightConfig``) were 3-10x
slower than fp32 on the same shapes without ``torch.compile``, so zoo does not use
them.

A quantized model is for inference: it has no gradients to give and is not saved
(save the fp32 model and quantize after loading).

PyTorch 2.14 marks its quantized tensors (``torch.qint8``), which these kernels take
their packed weight from, as deprecated in favour of torchao. zoo keeps them, as they
are the fast path on the CPU today, behind :class:`QuantizedLinear`, whose own buffers
are plain int8 and float tensors: another kernel can replace them without changing
what a quantized model holds.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from . import derived, native
from .errors import RecipeError

MODES = ("int8", "int4")
"""The quantization modes ``zoo.build(..., quantize=)`` accepts."""

GROUP = 32
"""Input columns that share one scale in an int4 weight (llama.cpp's q4_0 blocks), and in
the rounded input it multiplies (its q8_0 blocks)."""


def rounded_by_groups(x: torch.Tensor) -> torch.Tensor:
    """``x`` as an int4 layer multiplies it: each :data:`GROUP` values of its last
    dimension rounded to int8 by a scale of their own, e = max|x| / 127, q = round(x 127 /
    max|x|) (half to even), given back as q e in fp32 (llama.cpp's q8_0, which its CPU
    product of q4_0 weights takes)."""
    g = x.float().reshape(*x.shape[:-1], -1, GROUP)
    largest = g.abs().amax(-1, keepdim=True)
    inv = torch.where(largest > 0, 127.0 / largest, torch.zeros_like(largest))
    return (torch.round(g * inv) * (largest / 127.0)).reshape(x.shape)


def _kernels_available() -> bool:
    return hasattr(torch.ops.quantized, "linear_dynamic") and any(
        e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm", "onednn"))


_REDUCE: bool | None = None


def _reduce_range() -> bool:
    """Whether activations are rounded to 7 bits instead of 8. FBGEMM's int8 products
    sum pairs of u8 x s8 into int16 on CPUs without VNNI, which 8-bit activations can
    saturate; with VNNI (int32 sums), or on oneDNN, the full 8 bits are safe, and keep
    more of the model: on a trained translate-de-en model, 90.4% of greedy tokens equal
    fp32's with 8 bits against 82.8% with 7 (benchmarks/int8_quality.py)."""
    global _REDUCE
    if _REDUCE is None:
        from .hardware import detect_cpu

        _REDUCE = torch.backends.quantized.engine != "onednn" and not detect_cpu().vnni
    return _REDUCE


class QuantizedLinear(nn.Module):
    """A linear layer with an int8 weight (per-output-row scales) and an fp32 bias.

    The weight, its scales and the bias are buffers (plain tensors: ``state_dict``,
    ``.to()`` and copies work as for any module). On the CPU the product goes through
    ``torch.ops.quantized.linear_dynamic`` with the weight packed once; elsewhere the
    weight is dequantized and multiplied with ``F.linear`` (int8 storage only)."""

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features,
                                                        dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "QuantizedLinear":
        """The int8 copy of ``linear`` (its weight rounded to the nearest step of its row's
        scale; an all-zero row gets scale 1)."""
        w = linear.weight.detach().float()
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        scale = w.abs().amax(dim=1) / 127.0
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        q.weight_int8 = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
        q.weight_scale = scale
        if linear.bias is not None:
            q.bias = linear.bias.detach().float().clone()
        return q.to(linear.weight.device)

    def dequantized_weight(self) -> torch.Tensor:
        """The fp32 weight the int8 one stands for (int8 x its row's scale)."""
        return self.weight_int8.float() * self.weight_scale[:, None]

    native_rows: int | None = None
    """Inputs of at most this many rows are multiplied by zoo's native int8 product where it
    is available; 0 turns it off, None (the default) takes
    ``zoo.native.default_rows(int8=True)``: 128 on AVX2; on AVX-512 4 (AMD, where
    FBGEMM's product is faster from 16 rows, measured with VNNI) or 128 (Intel, with the
    512-bit kernel), 8192 where the products run on AMX's tiles."""

    def takes_native(self, rows: int) -> bool:
        """True when zoo's native int8 product may multiply ``rows`` rows by this layer: at
        most ``native_rows`` (resolved) of them, CPU weights, a contiguous fp32 bias (or
        none), and zoo's native libraries available here (asked first: the default limit
        depends on the kernels they load)."""
        if not native.available():
            return False
        limit = (native.default_rows(int8=True) if self.native_rows is None
                 else self.native_rows)
        bias = self.bias
        return (0 < rows <= limit and self.weight_int8.device.type == "cpu"
                and (bias is None or (bias.dtype == torch.float32 and bias.is_contiguous())))

    def native_weight(self) -> torch.Tensor:
        """The int8 weight and its scales packed for zoo's native product
        (``torch.ops.zoo.pack_int8_weight``), kept while they match (checked as
        :func:`zoo.derived.derived` says)."""
        return derived.derived(self, "_native_cache", (self.weight_int8, self.weight_scale),
                               lambda: torch.ops.zoo.pack_int8_weight(
                                   self.weight_int8, self.weight_scale.float()))

    def _packed(self):
        """The int8 weight packed for the kernel: kept while it matches the weight, its
        scales and the bias (checked as :func:`zoo.derived.derived` says: once in a
        decoding call, at every call outside one)."""
        def pack():
            with warnings.catch_warnings():  # torch's notice that these kernels will move
                warnings.filterwarnings("ignore", message=r".*quantized tensor creation")
                qweight = torch._make_per_channel_quantized_tensor(
                    self.weight_int8, self.weight_scale.double(),
                    torch.zeros(self.out_features, dtype=torch.long), 0)
                return torch.ops.quantized.linear_prepack(qweight, self.bias)

        return derived.derived(self, "_packed_cache",
                               (self.weight_int8, self.weight_scale, self.bias), pack,
                               torch.backends.quantized.engine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out), through an int8 kernel on the CPU: zoo's native one
        for a few rows (:meth:`takes_native`), FBGEMM's for more."""
        if x.device.type == "cpu" and x.numel():
            xf = x.float().contiguous()
            if (not torch.compiler.is_compiling()
                    and self.takes_native(x.numel() // x.shape[-1])):
                out = torch.ops.zoo.packed_linear(xf, self.native_weight(), self.bias,
                                                  self.out_features)
            elif _kernels_available():
                out = torch.ops.quantized.linear_dynamic(xf, self._packed(), _reduce_range())
            else:
                out = None
            if out is not None:
                return out if x.dtype == torch.float32 else out.to(x.dtype)
        return F.linear(x, self.dequantized_weight().to(x.dtype),
                        None if self.bias is None else self.bias.to(x.dtype))

    def extra_repr(self) -> str:
        """Sizes and the weight's dtype in the module's repr."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, weight=int8 per-row")


class Int4Linear(nn.Module):
    """A linear layer with its weight in 4 bits: each group of :data:`GROUP` input columns
    of each output row is 32 integers q from -8 to 7 and one float16 scale d, W = q d
    (llama.cpp's q4_0: the value of largest magnitude in a group is -8 d), and an fp32
    bias. The input is rounded to int8 in groups of 32 as it is multiplied
    (:func:`rounded_by_groups`, llama.cpp's q8_0, as llama.cpp multiplies q4_0 on a CPU),
    and zoo's native product (``torch.ops.zoo.pack_int4_weight``) takes the 4-bit values as
    they are, into integer dot products, so that one prompt's decoding, bound by reading
    the weights, reads 4.5 bits a weight. Without zoo's native product (another device, a
    build that failed), the rounded input and the dequantized weight go through
    ``F.linear``.

    ``weight_q4`` (out, in / 2, uint8) holds two q a byte, the even column in the low half,
    as 4-bit two's complement; ``weight_scale`` (out, in / 32) is float16."""

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True) -> None:
        super().__init__()
        if in_features % GROUP:
            raise RecipeError(f"an int4 layer takes a multiple of {GROUP} inputs, not "
                              f"{in_features} (zoo.quantize keeps such layers in fp32)")
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_q4", torch.zeros(out_features, in_features // 2,
                                                      dtype=torch.uint8))
        self.register_buffer("weight_scale", torch.ones(out_features, in_features // GROUP,
                                                        dtype=torch.float16))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int4Linear":
        """The 4-bit copy of ``linear``: each group's scale is its value of largest
        magnitude over -8 (so that value is exactly -8 d, as llama.cpp's q4_0 makes it),
        each weight rounded to the nearest step and kept within -8 to 7."""
        w = linear.weight.detach().float().cpu()
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        groups = w.reshape(w.shape[0], -1, GROUP)
        largest = groups.gather(-1, groups.abs().argmax(-1, keepdim=True))
        scale = (largest / -8.0).to(torch.float16).float()
        safe = torch.where(scale == 0, torch.ones_like(scale), scale)
        ints = torch.round(groups / safe).clamp_(-8, 7).to(torch.int8).reshape(w.shape)
        nibbles = (ints & 0xF).to(torch.uint8)
        q.weight_q4 = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
        q.weight_scale = scale.squeeze(-1).to(torch.float16)
        if linear.bias is not None:
            q.bias = linear.bias.detach().float().clone()
        return q.to(linear.weight.device)

    def dequantized_weight(self) -> torch.Tensor:
        """The fp32 weight the 4-bit one stands for (q times its group's scale)."""
        low = (self.weight_q4 & 0xF).to(torch.int8)
        high = (self.weight_q4 >> 4).to(torch.int8)
        q = torch.stack([low, high], -1).reshape(self.out_features, self.in_features)
        q = torch.where(q > 7, q - 16, q).float()
        scale = self.weight_scale.float().repeat_interleave(GROUP, dim=1)
        return q * scale

    def takes_native(self, rows: int) -> bool:
        """True when zoo's native product may multiply ``rows`` rows by this layer: any
        number, CPU weights, a contiguous fp32 bias (or none), and zoo's native libraries
        available here (it has no other CPU kernel)."""
        bias = self.bias
        return (rows > 0 and self.weight_q4.device.type == "cpu" and native.available()
                and (bias is None or (bias.dtype == torch.float32 and bias.is_contiguous())))

    def native_weight(self) -> torch.Tensor:
        """The 4-bit weight and its scales packed for zoo's native product
        (``torch.ops.zoo.pack_int4_weight``), kept while they match (checked as
        :func:`zoo.derived.derived` says)."""
        return derived.derived(self, "_native_cache", (self.weight_q4, self.weight_scale),
                               lambda: torch.ops.zoo.pack_int4_weight(self.weight_q4,
                                                                      self.weight_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out): zoo's native product on the CPU, else the rounded
        input times the dequantized weight by ``F.linear``."""
        if (x.device.type == "cpu" and x.numel() and not torch.compiler.is_compiling()
                and self.takes_native(x.numel() // x.shape[-1])):
            out = torch.ops.zoo.packed_linear(x.float().contiguous(), self.native_weight(),
                                              self.bias, self.out_features)
            return out if x.dtype == torch.float32 else out.to(x.dtype)
        return F.linear(rounded_by_groups(x).to(x.dtype), self.dequantized_weight().to(x.dtype),
                        None if self.bias is None else self.bias.to(x.dtype))

    def extra_repr(self) -> str:
        """Sizes and the weight's form in the module's repr."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, weight=int4 groups of {GROUP}")


def quantize(model: nn.Module, mode: str = "int8", *, skip: tuple[str, ...] = ()) -> nn.Module:
    """Quantize ``model``'s linear layers in place for inference and return it (in eval
    mode). ``mode`` is ``"int8"``: int8 weights with per-row scales and activations
    quantized per call (dynamic quantization, :class:`QuantizedLinear`); or ``"int4"``:
    weights in 4-bit groups of 32, activations rounded to int8 in groups of 32 as they are
    multiplied (:class:`Int4Linear`, llama.cpp's q4_0 times its q8_0), for decoding one
    prompt at a time, where reading the weights bounds the time; a
    layer whose inputs are no multiple of 32 stays fp32. Layers whose qualified name is in
    ``skip`` stay fp32. A layer whose weight another module shares (a tied output
    projection) gets a quantized copy; the sharer (the embedding) keeps the fp32 one."""
    if mode not in MODES:
        raise RecipeError(f"unknown quantization {mode!r}; zoo quantizes to one of "
                          f"{list(MODES)}")
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and name not in skip
               and (mode == "int8" or module.in_features % GROUP == 0)]
    kind = QuantizedLinear if mode == "int8" else Int4Linear
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, kind.from_linear(module))
    model.quantization = mode
    return model.eval()


def is_quantized(model: nn.Module) -> bool:
    """True when any layer of ``model`` is a :class:`QuantizedLinear` or an
    :class:`Int4Linear`."""
    return any(isinstance(m, (QuantizedLinear, Int4Linear)) for m in model.modules())
