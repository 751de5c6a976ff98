"""Attention kernels: eager (the formula, in PyTorch ops), sdpa, xformers, auto."""

from zoo import hookimpl

FULL = {"causal": True, "arbitrary_mask": True, "dropout": True, "bias": True}


@hookimpl
def register_kernels(register):
    register(
        "eager",
        "zoo.plugins.kernels.eager:eager_attention",
        description="softmax(QK^T / sqrt(d)) V written out in PyTorch operations",
        capabilities=FULL,
    )
    register(
        "sdpa",
        "zoo.plugins.kernels.sdpa:sdpa_attention",
        description="torch.nn.functional.scaled_dot_product_attention (Flash/memory-efficient on GPU)",
        capabilities=FULL,
    )
    register(
        "xformers",
        "zoo.plugins.kernels.xformers:xformers_attention",
        description="xFormers memory_efficient_attention (CUDA; extra 'xformers')",
        capabilities={**FULL, "needs_cuda": True, "requires_package": "xformers"},
    )
    register(
        "auto",
        "zoo.plugins.kernels.auto:auto_attention",
        description="Picks at each call: xformers for fp16/bf16 CUDA tensors when installed, else sdpa",
        capabilities=FULL,
    )
