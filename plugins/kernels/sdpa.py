"""PyTorch's fused scaled dot-product attention (FlashAttention on GPUs that have it).

Two CPU cases go another way, each measured faster with ``zoo bench``:

- a decoding step (a few queries, no gradients): two batched matrix products (the
  eager kernel), since flash attention's blocking costs more than it saves there,
  about twice as much with a padding mask over 64 rows;
- bf16/fp16: the attention runs in fp32 and its output is cast back, because the
  CPU flash kernel is slower in bf16 than in fp32 (forward 1.4x, backward about 3x,
  at ViT-S and transformer-base shapes, on AMD EPYCs), and fp32 is the more accurate.
  Inference in bf16 on a CPU with AMX tiles is the exception: there the bf16 kernel runs
  on the tiles. Measured on a 2-core Xeon, the attention alone was 2.8 to 7 times as fast
  as the cast to fp32 and back, at ViT-S's, transformer-base's and all-MiniLM-L6-v2's
  shapes; a whole bf16 ViT-S over 16 images 1.27 times, transformer-base's encoder over
  16 sentences 1.13 times, all-MiniLM-L6-v2 over 32 sentences level. With gradients it is
  no faster (1.0 to 0.4 times), so training keeps fp32 attention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.plugin_api import detect_hardware

from .eager import eager_attention

SMALL_QUERY = 4
"""At most this many queries (and no gradients) count as a decoding step."""


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` with zoo's kernel contract."""
    if q.device.type == "cpu":
        if q.shape[-2] <= SMALL_QUERY and dropout_p == 0.0 and not torch.is_grad_enabled():
            return eager_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
        on_tiles = (q.dtype == torch.bfloat16 and not torch.is_grad_enabled()
                    and detect_hardware().cpu.amx)
        if on_tiles and attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(q.dtype)  # an additive mask (a bias) in the queries'
        elif q.dtype in (torch.bfloat16, torch.float16) and not on_tiles:
            mask = attn_mask.float() if attn_mask is not None and attn_mask.is_floating_point() \
                else attn_mask
            with torch.autocast("cpu", enabled=False):  # autocast would cast back to bf16
                out = F.scaled_dot_product_attention(
                    q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale)
            return out.to(q.dtype)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
