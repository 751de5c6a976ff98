"""Fast paths the built-in components share: dropout with a cheaper mask on the
CPU, and linear layers that keep a oneDNN-packed copy of their weight for inference.

Both are drop-in: ``Dropout`` is an ``nn.Dropout`` and ``Linear`` an ``nn.Linear``,
with the same parameters and state dict. Measured on the 2-core CPU this project
runs on (``zoo bench``): the dropout mask costs about a quarter of
``torch.bernoulli_``'s, and a packed fp32 linear layer runs 1.3 to 3 times faster
than ``F.linear`` without gradients (the small row counts of decoding gain most).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from . import derived, native
from .deprecations import warn_deprecated

_BITS = 15
_LEVELS = 1 << _BITS


def _keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A boolean mask keeping each element with probability ``1 - p`` (p rounded to a
    multiple of 2^-15), and the scale 1 / P(keep).

    torch's CPU generator draws one number per call, so Bernoulli masks cost one draw
    per element; here one 63-bit draw (``random_`` on int64) gives four 15-bit
    uniforms. The draws come from torch's global generator: ``torch.manual_seed`` and
    checkpointed RNG state reproduce them."""
    n = shape.numel()
    threshold = round(p * _LEVELS)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    keep = (words.view(torch.int16)[:n] & (_LEVELS - 1)) >= threshold
    return keep.view(shape), _LEVELS / (_LEVELS - threshold)


class _MaskedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x * keep * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None, None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout`` with a cheaper mask on the CPU (see :func:`_keep_mask`); elsewhere,
    and for p outside (0, 1), ``F.dropout`` itself."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0 or round(p * _LEVELS) == 0:
        return F.dropout(x, p, True)
    keep, scale = _keep_mask(x.shape, p, x.device)
    return _MaskedScale.apply(x, keep, scale)


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Dropout with the cheaper CPU mask (in place: ``F.dropout``)."""
        if self.inplace:
            return F.dropout(x, self.p, self.training, inplace=True)
        return dropout(x, self.p, self.training)


def drop_path(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Stochastic depth (Huang et al. 2016) on a residual branch: each example's whole
    branch is zeroed with probability ``p`` and kept ones are scaled by 1 / (1 - p), so
    the expectation is unchanged. One Bernoulli draw per example, from torch's global
    generator, in the order timm's ``DropPath`` draws them (a seed reproduces its masks)."""
    if not training or p == 0.0:
        return x
    keep = 1.0 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
    if keep > 0.0:
        mask = mask / keep
    return x * mask


class DropPath(nn.Module):
    """:func:`drop_path` as a layer (drop probability ``p``; nothing in eval mode)."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"drop path probability {p} is not in [0, 1]")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x with each example's branch dropped with probability p (training only)."""
        return drop_path(x, self.p, self.training)

    def extra_repr(self) -> str:
        """``p=...`` in the module's repr."""
        return f"p={self.p}"


def layer_dropped(p: float, training: bool) -> bool:
    """LayerDrop (Fan et al. 2019): True when a layer is skipped for this batch, with
    probability ``p`` in training, never in eval. One uniform draw from torch's global
    generator per layer per batch (fairseq's rule)."""
    return training and p > 0.0 and float(torch.rand(())) < p


# -- linear layers ---------------------------------------------------------------------------------
def _renamed(old: str, new: str) -> None:
    warn_deprecated("linear-kernel-methods", f"zoo.ops.Linear.{old}() is now {new}() (in "
                    "zoo, 'kernel' names the attention kernel family only; compiled C++ is "
                    "native code)", stacklevel=3)


def _onednn_linear_available() -> bool:
    return (torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


_ONEDNN = None
_ONEDNN_BF16 = None


def onednn_bf16() -> bool:
    """True when oneDNN multiplies bf16 on this CPU (its packed bf16 path raises on an
    AVX2 CPU without AVX-NE-CONVERT)."""
    global _ONEDNN_BF16
    if _ONEDNN_BF16 is None:
        check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        _ONEDNN_BF16 = bool(check()) if check is not None else False
    return _ONEDNN_BF16


class Linear(nn.Linear):
    """``nn.Linear`` that, in CPU inference of a model whose weights are fixed (inside
    :func:`zoo.derived.fixed_weights`, which every decoding call enters), multiplies
    through oneDNN with its weight packed once: in fp32, or in bf16 under CPU autocast
    (the weight cast once instead of at every call) or with bf16 weights (a model
    converted to bf16 once), where oneDNN packs bf16. In fp32, inputs of at most
    ``native_row_limit()`` rows (decoding steps, a sentence's encoder) go to zoo's
    native product instead, with the weight packed once for it, where zoo's native
    libraries could be built (:mod:`zoo.native`). A packed copy is checked against the
    weight's bytes at its first use in each block (:mod:`zoo.derived`), so a write that
    torch does not count (through ``.data``, a NumPy view) is seen.

    Outside such a block, up to ``zoo.native.UNPACKED_ROWS`` rows go to zoo's native
    product on the weight as it is, and more to ``F.linear``; with gradients on
    (training) and on other devices and dtypes it is ``nn.Linear`` exactly; inside
    ``torch.compile`` too (the packing would break the graph at each layer, and the
    compiler packs weights itself), except for the unpacked native product, an operator
    the compiler calls as it is. The packed copies are not part of the state dict;
    ``train()`` drops them. Results equal ``F.linear``'s up to fp32 rounding (another
    summation order)."""

    fast_inference = True
    """Set False (on the class or one layer) to always use ``F.linear``."""

    native_rows: int | None = None
    """In fp32 CPU inference, inputs of at most this many rows are multiplied by zoo's
    native product (:mod:`zoo.native`) where it is available; 0 turns it off, None (the
    default) takes ``zoo.native.default_rows()``: 128. Measured on 2-core AMD EPYCs
    against oneDNN's packed product (transformer-base's decoding step's products): with
    AVX2, 3.1x faster at one row, 2.0x at four, 1.6x at sixteen, 1.2x at 64, 1.15 to
    1.3x at 128, level from about 320 rows; with AVX-512, 3.2 to 3.5x at four, 2.3x at
    sixteen, 1.7x at 64, 1.5x at 128, 1.2x at 512."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``F.linear``, or for CPU inference zoo's native product or the packed oneDNN
        product."""
        if self._native(x):
            if not self.keeps_copies():
                return torch.ops.zoo.skinny_linear(x, self.weight, self.bias)
            return torch.ops.zoo.packed_linear(x, self.native_weight(), self.bias,
                                               self.out_features)
        dtype = self._packed_dtype(x)
        if dtype is not None:
            weight, bias = self._packed(x, dtype)
            return torch.ops.mkldnn._linear_pointwise(x.to(dtype), weight, bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def native_row_limit(self) -> int:
        """The most rows this layer gives zoo's native product (``native_rows``, resolved)."""
        return native.default_rows() if self.native_rows is None else self.native_rows

    def native_weight(self) -> torch.Tensor:
        """The weight packed for zoo's native product (``torch.ops.zoo.pack_linear_weight``):
        packed on first use and kept while it matches the weight (checked as
        :func:`zoo.derived.derived` says) and until ``train()`` is called."""
        return derived.derived(self, "_native_cache", (self.weight,),
                               lambda: torch.ops.zoo.pack_linear_weight(self.weight.detach()))

    def keeps_copies(self) -> bool:
        """True where this layer multiplies by packed copies of its weight: in a block
        that fixes its model's weights (:func:`zoo.derived.fixed_weights`), outside
        ``torch.compile``."""
        return not torch.compiler.is_compiling() and derived.trusted(self)

    def kernel_rows(self) -> int:
        """Deprecated: :meth:`native_row_limit` ("kernel" names attention kernels only)."""
        _renamed("kernel_rows", "native_row_limit")
        return self.native_row_limit()

    def kernel_weight(self) -> torch.Tensor:
        """Deprecated: :meth:`native_weight` ("kernel" names attention kernels only)."""
        _renamed("kernel_weight", "native_weight")
        return self.native_weight()

    def takes_native(self, rows: int) -> bool:
        """True when zoo's native product may multiply ``rows`` rows by this layer: at most
        ``native_row_limit()`` of them (where it keeps no packed copy, at most
        ``zoo.native.UNPACKED_ROWS``), an fp32 CPU weight, weight and bias contiguous,
        and zoo's native libraries available here."""
        limit = self.native_row_limit()
        if not self.keeps_copies():
            limit = min(limit, native.UNPACKED_ROWS)
        weight, bias = self.weight, self.bias
        return (rows <= limit and weight.dtype == torch.float32 and weight.device.type == "cpu"
                and weight.is_contiguous() and (bias is None or bias.is_contiguous())
                and native.available())

    def _cpu_inference(self, x: torch.Tensor) -> bool:
        """True for inference on the CPU with an fp32 or bf16 weight and a non-empty input:
        where the native product (fp32) and the packed oneDNN one may stand in for
        ``F.linear``."""
        return (self.fast_inference and not torch.is_grad_enabled() and x.device.type == "cpu"
                and self.weight.dtype in (torch.float32, torch.bfloat16) and x.numel() > 0)

    def _native(self, x: torch.Tensor) -> bool:
        """True for fp32 CPU inference on rows that zoo's native product takes
        (:meth:`takes_native`)."""
        return (self._cpu_inference(x) and x.dtype == torch.float32
                and not torch.is_autocast_enabled("cpu")
                and self.takes_native(x.numel() // x.shape[-1]))

    def _packed_dtype(self, x: torch.Tensor) -> torch.dtype | None:
        """The dtype to multiply in with a packed weight, or None for F.linear: fp32, or
        under CPU autocast its dtype (bf16), as autocast itself would; bf16 for a bf16
        weight (a model converted to bf16 once) and input, where oneDNN packs bf16."""
        global _ONEDNN
        if not self._cpu_inference(x):
            return None
        if not self.keeps_copies():  # in torch.compile, F.linear keeps the graph whole
            return None
        if self.weight.dtype == torch.bfloat16:
            if x.dtype != torch.bfloat16 or not onednn_bf16():
                return None
            dtype = torch.bfloat16
        elif torch.is_autocast_enabled("cpu"):
            dtype = torch.get_autocast_dtype("cpu")
            if dtype != torch.bfloat16 or x.dtype not in (torch.float32, torch.bfloat16):
                return None
            if not onednn_bf16():  # oneDNN packs bf16 only on AVX-512 (bw, vl, dq) or AVX-NE
                return None
        elif x.dtype == torch.float32:
            dtype = torch.float32
        else:
            return None
        if _ONEDNN is None:
            _ONEDNN = _onednn_linear_available()
        return dtype if _ONEDNN else None

    def _packed(self, x: torch.Tensor, dtype: torch.dtype):
        def pack():
            rows = max(1, x.numel() // x.shape[-1])
            weight = self.weight.detach().to(dtype)
            bias = None if self.bias is None else self.bias.detach().to(dtype).contiguous()
            return torch.ops.mkldnn._reorder_linear_weight(weight, rows), bias

        return derived.derived(self, "_packed_cache", (self.weight, self.bias), pack, dtype)

    _CACHES = ("_packed_cache", "_native_cache")
    """The packed weights it keeps (:func:`zoo.derived.derived`, beside the layer: copies
    and pickles leave them behind): oneDNN's and zoo's native product's."""

    def train(self, mode: bool = True) -> "Linear":
        """Switch mode; into training, the packed weights are dropped (they are made again
        when needed; ``eval()`` keeps them, so a model put in eval mode at each call is
        not packed again each time)."""
        if mode:
            derived.forget(self, *self._CACHES)
        return super().train(mode)


@contextlib.contextmanager
def plain_linears():
    """Every :class:`Linear` multiplies through ``F.linear`` inside the block: the plain
    aten products that FLOP counters and exporters see (not oneDNN's packed ones)."""
    previous = Linear.fast_inference
    Linear.fast_inference = False
    try:
        yield
    finally:
        Linear.fast_inference = previous


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             offset: float = 0.0) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) over the last dimension, x / sqrt(mean(x^2) + eps)
    * (weight + offset), its statistics in float32 and the result in x's dtype: what the
    norm plugin's ``rmsnorm`` and attention's per-head query and key norms compute.
    Gemma's norms store weight - 1 (``offset`` 1: a weight of zeros is the identity), and
    scale in float32 before the cast. In float32, torch's own ``F.rms_norm`` (the same
    values; forward and backward together 12-15% faster on an AVX2 CPU at widths 128-768)."""
    if x.dtype == weight.dtype == torch.float32 and not torch.onnx.is_in_onnx_export():
        return F.rms_norm(x, (x.shape[-1],), weight + offset if offset else weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if offset:
        return (h * (weight.float() + offset)).to(x.dtype)
    return (h * weight).to(x.dtype)
