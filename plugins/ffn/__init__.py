"""Position-wise feed-forward networks."""

from zoo import hookimpl


@hookimpl
def register_ffns(register):
    register(
        "relu",
        "zoo.plugins.ffn.relu:ReLUFFN",
        description="max(0, x W1 + b1) W2 + b2 (Vaswani et al. 2017, eq. 2)",
    )
    register(
        "gelu",
        "zoo.plugins.ffn.gelu:GELUFFN",
        description="GELU(x W1 + b1) W2 + b2 (BERT, GPT-2, ViT)",
    )
    register(
        "silu",
        "zoo.plugins.ffn.silu:SiLUFFN",
        description="SiLU(x W1 + b1) W2 + b2, Marian's swish (opus-mt)",
    )
    register(
        "swiglu",
        "zoo.plugins.ffn.swiglu:SwiGLUFFN",
        description="(SiLU(x W_g) * x W_x) W2, the gated FFN of Shazeer 2020 (PaLM, LLaMA)",
        capabilities={"gated": True},
    )
    register(
        "geglu",
        "zoo.plugins.ffn.geglu:GEGLUFFN",
        description="(GELU(x W_g) * x W_x) W2, the gated FFN of Shazeer 2020 (T5 v1.1, Flan-T5)",
        capabilities={"gated": True},
    )
