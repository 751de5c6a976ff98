"""Attention kernels: eager (the formula, in PyTorch ops) and sdpa."""

from zoo import hookimpl


@hookimpl
def register_kernels(register):
    register(
        "eager",
        "zoo.plugins.kernels.eager:eager_attention",
        description="softmax(QK^T / sqrt(d)) V written out in PyTorch operations",
    )
    register(
        "sdpa",
        "zoo.plugins.kernels.sdpa:sdpa_attention",
        description="torch.nn.functional.scaled_dot_product_attention (Flash/memory-efficient on GPU)",
    )
