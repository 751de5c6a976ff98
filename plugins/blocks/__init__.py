"""Transformer blocks (layers)."""

from zoo import hookimpl


@hookimpl
def register_blocks(register):
    register(
        "encoder",
        "zoo.plugins.blocks.encoder:EncoderBlock",
        description="Self-attention + feed-forward, each in a residual with a norm (pre or post)",
        capabilities={"role": "encoder"},
    )
    register(
        "decoder",
        "zoo.plugins.blocks.decoder:DecoderBlock",
        description="Causal self-attention + cross-attention + feed-forward, residual, normed",
        capabilities={"role": "decoder"},
    )
    register(
        "causal",
        "zoo.plugins.blocks.causal:CausalBlock",
        description="Causal self-attention + feed-forward, residual, normed: a language "
                    "model's layer (GPT-2, Llama)",
        capabilities={"role": "causal"},
    )
    register(
        "sandwich",
        "zoo.plugins.blocks.sandwich:SandwichBlock",
        description="Causal self-attention + feed-forward, each normed before and after, "
                    "residual: Gemma 2 and 3's layer (Ding et al. 2021's sandwich norms)",
        capabilities={"role": "causal"},
    )
    register(
        "vit",
        "zoo.plugins.blocks.vit:ViTBlock",
        description="The pre-norm encoder block of ViT, with optional LayerScale (CaiT, DeiT III)",
        capabilities={"role": "encoder"},
    )
