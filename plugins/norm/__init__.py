"""Normalisation layers."""

from zoo import hookimpl


@hookimpl
def register_norms(register):
    register(
        "layernorm",
        "zoo.plugins.norm.layernorm:LayerNorm",
        description="Layer normalisation (Ba et al. 2016): (x - mean) / sqrt(var + eps)",
        capabilities={"centered": True, "bias": True},
    )
    register(
        "rmsnorm",
        "zoo.plugins.norm.rmsnorm:RMSNorm",
        description="Root-mean-square normalisation (Zhang & Sennrich 2019)",
        capabilities={"centered": False, "bias": False},
    )
