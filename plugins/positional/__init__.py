"""Positional encodings: added to the embeddings, or applied inside attention."""

from zoo import hookimpl


@hookimpl
def register_positionals(register):
    register(
        "sinusoidal",
        "zoo.plugins.positional.sinusoidal:SinusoidalPositions",
        description="Fixed sine/cosine positions (Vaswani et al. 2017, sec. 3.5)",
        capabilities={"kind": "absolute", "padding_aware": True},
    )
    register(
        "learned",
        "zoo.plugins.positional.learned:LearnedPositions",
        description="A learned vector per position (BERT, GPT-2, ViT)",
        capabilities={"kind": "absolute", "learned": True, "max_length": True,
                      "padding_aware": True},
    )
    register(
        "none",
        "zoo.plugins.positional.none:NoPositions",
        description="No positional information (the model sees a bag of tokens)",
        capabilities={"kind": "none"},
    )
    register(
        "rope",
        "zoo.plugins.positional.rope:RotaryPositions",
        description="Rotary position embedding of queries and keys (RoFormer, Su et al. 2021)",
        capabilities={"kind": "rotary"},
    )
    register(
        "alibi",
        "zoo.plugins.positional.alibi:ALiBi",
        description="Linear distance biases with per-head slopes (ALiBi, Press et al. 2022)",
        capabilities={"kind": "bias"},
    )
    register(
        "t5-bias",
        "zoo.plugins.positional.t5:T5RelativeBias",
        description="Bucketed relative position bias shared across layers (T5, Raffel et al. 2020)",
        capabilities={"kind": "bias", "learned": True},
    )
    register(
        "shaw",
        "zoo.plugins.positional.shaw:ShawRelativePositions",
        description="Learned key/value vectors of clipped relative distance "
                    "(Shaw et al. 2018)",
        capabilities={"kind": "relative", "learned": True, "per_layer": True},
    )
    register(
        "deberta",
        "zoo.plugins.positional.deberta:DisentangledPositions",
        description="A normed table of bucketed relative distances, shared by a stack's "
                    "layers, for disentangled attention (DeBERTa, He et al. 2021)",
        capabilities={"kind": "disentangled", "learned": True},
    )
    register(
        "xl",
        "zoo.plugins.positional.xl:TransformerXLPositions",
        description="Sinusoidal relative encodings with learned u, v biases and the "
                    "relative shift (Transformer-XL, Dai et al. 2019)",
        capabilities={"kind": "relative", "learned": True, "per_layer": True},
    )
