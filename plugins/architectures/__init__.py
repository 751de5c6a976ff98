"""Whole-model architectures."""

from zoo import hookimpl

from . import native_step  # noqa: F401  (declares its C++ library for zoo native build)


@hookimpl
def register_architectures(register):
    register(
        "seq2seq",
        "zoo.plugins.architectures.seq2seq:Seq2Seq",
        description="The encoder-decoder Transformer of Vaswani et al. 2017",
        capabilities={"inputs": "tokens", "outputs": "tokens", "kind": "seq2seq"},
    )
    register(
        "decoder",
        "zoo.plugins.architectures.decoder:CausalLM",
        description="The decoder-only Transformer, a causal language model (GPT-2, Llama)",
        capabilities={"inputs": "tokens", "outputs": "tokens", "kind": "language-model"},
    )
    register(
        "encoder",
        "zoo.plugins.architectures.encoder:Encoder",
        description="The encoder-only Transformer (BERT, Devlin et al. 2019): hidden states, "
                    "masked-LM or class logits",
        capabilities={"inputs": "tokens", "outputs": "vectors", "kind": "encoder"},
    )
    register(
        "vit",
        "zoo.plugins.architectures.vit:VisionTransformer",
        description="Vision Transformer (Dosovitskiy et al. 2021): patches in, classes out",
        capabilities={"inputs": "images", "outputs": "classes", "kind": "image-classifier"},
    )
    register(
        "clip",
        "zoo.plugins.architectures.clip:CLIP",
        description="CLIP (Radford et al. 2021): an image tower (ViT) and a causal text "
                    "tower whose projected vectors are compared (zero-shot classification)",
        capabilities={"inputs": "images-and-tokens", "outputs": "vectors",
                      "kind": "image-text"},
    )
