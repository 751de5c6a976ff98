"""Attention mechanisms: dense, sparse and linear."""

from zoo import hookimpl

SOFTMAX_POSITIONS = ("rotary", "bias")
EVERYTHING = {"causal": True, "cross_attention": True, "padding_mask": True,
              "arbitrary_mask": True, "kv_cache": True}
SPARSE = {"causal": True, "padding_mask": True, "kv_cache": True}
LINEAR = {"causal": True, "cross_attention": True, "padding_mask": True, "kv_cache": True,
          "uses_kernel": False, "positions": ("rotary",)}


@hookimpl
def register_attentions(register):
    register(
        "vanilla",
        "zoo.plugins.attention.vanilla:VanillaAttention",
        description="Multi-head scaled dot-product attention (Vaswani et al. 2017)",
        capabilities={**EVERYTHING, "positions": ("rotary", "bias", "relative")},
    )
    register(
        "disentangled",
        "zoo.plugins.attention.disentangled:DisentangledAttention",
        description="Content and relative position disentangled: content-to-position and "
                    "position-to-content scores (DeBERTa, He et al. 2021)",
        capabilities={"causal": True, "padding_mask": True, "arbitrary_mask": True,
                      "uses_kernel": False, "positions": ("disentangled",)},
    )
    register(
        "sliding-window",
        "zoo.plugins.attention.sliding_window:SlidingWindowAttention",
        description="Local attention within a window, with optional global tokens "
                    "(Longformer, Beltagy et al. 2020)",
        capabilities={**SPARSE, "positions": SOFTMAX_POSITIONS},
    )
    register(
        "bigbird",
        "zoo.plugins.attention.bigbird:BigBirdAttention",
        description="Block-sparse window + global + random attention (BigBird, Zaheer et al. 2020)",
        capabilities={**SPARSE, "positions": SOFTMAX_POSITIONS},
    )
    register(
        "performer",
        "zoo.plugins.attention.performer:PerformerAttention",
        description="FAVOR+ positive orthogonal random features (Performer, Choromanski et al. 2021)",
        capabilities=LINEAR,
    )
    register(
        "linear",
        "zoo.plugins.attention.linear:LinearAttention",
        description="elu(x)+1 feature-map linear attention with a recurrent state "
                    "(Katharopoulos et al. 2020)",
        capabilities=LINEAR,
    )
    register(
        "lsh",
        "zoo.plugins.attention.lsh:LSHAttention",
        description="Shared-QK attention within hashed, sorted chunks (Reformer, Kitaev et "
                    "al. 2020); memory O(L chunk)",
        capabilities={"causal": True, "padding_mask": True, "uses_kernel": False,
                      "positions": ("rotary",)},
    )
