"""Training losses: cross-entropy with label smoothing, and focal loss."""

from zoo import hookimpl


@hookimpl
def register_losses(register):
    register(
        "cross-entropy",
        "zoo.plugins.losses.cross_entropy:CrossEntropy",
        description="Cross-entropy with optional label smoothing (Szegedy et al. 2016; "
                    "the paper's sec. 5.4 uses 0.1)",
        capabilities={"ignore_index": True},
    )
    register(
        "focal",
        "zoo.plugins.losses.focal:FocalLoss",
        description="Focal loss alpha * (1 - p_t)^gamma * CE (Lin et al. 2017; “PyTorch实现Transformer：从Self-Attention到实战调优” "
                    "sec. 4.2): down-weights the targets already predicted well",
        capabilities={"ignore_index": True},
    )
