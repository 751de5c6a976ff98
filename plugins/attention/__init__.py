"""Attention mechanisms."""

from zoo import hookimpl


@hookimpl
def register_attention(register):
    register(
        "vanilla",
        "zoo.plugins.attention.vanilla:VanillaAttention",
        description="Multi-head scaled dot-product attention (Vaswani et al. 2017)",
        capabilities={
            "causal": True,
            "cross_attention": True,
            "padding_mask": True,
            "arbitrary_mask": True,
            "kv_cache": True,
        },
    )
