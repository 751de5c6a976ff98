"""Positional encodings added to the embeddings."""

from zoo import hookimpl


@hookimpl
def register_positionals(register):
    register(
        "sinusoidal",
        "zoo.plugins.positional.sinusoidal:SinusoidalPositions",
        description="Fixed sine/cosine positions (Vaswani et al. 2017, sec. 3.5)",
        capabilities={"kind": "absolute"},
    )
    register(
        "learned",
        "zoo.plugins.positional.learned:LearnedPositions",
        description="A learned vector per position (BERT, GPT-2, ViT)",
        capabilities={"kind": "absolute", "learned": True, "max_length": True},
    )
    register(
        "none",
        "zoo.plugins.positional.none:NoPositions",
        description="No positional information (the model sees a bag of tokens)",
        capabilities={"kind": "none"},
    )
