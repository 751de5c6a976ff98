"""Pictures of runs: training curves (``zoo plot RUN``) and attention maps
(``zoo attention-map RUN TEXT``), as PNG files, drawn with matplotlib."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import CapabilityError
from .registry import registry
from .training.runs import RunFolder


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out


def read_metrics(run_dir: str | Path) -> list[dict]:
    """Every row a run logged (``metrics.jsonl``)."""
    return RunFolder(run_dir).metrics()


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Loss (train and validation), learning rate and the validation metrics against
    the step, one panel each."""
    rows = read_metrics(run_dir)
    train = [r for r in rows if r.get("split") == "train"]
    valid = [r for r in rows if r.get("split") == "valid"]
    metric_names = [k for k in (valid[0] if valid else {}) if k not in
                    ("step", "epoch", "split", "loss")]
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train", lw=1)
    if valid and "loss" in valid[0]:
        ax.plot([r["step"] for r in valid], [r["loss"] for r in valid], "o-", label="valid")
    ax.set_yscale("log")
    ax.set_title("loss")
    ax.legend()
    axes[1].plot([r["step"] for r in train], [r["lr"] for r in train])
    axes[1].set_title("learning rate")
    for name in metric_names:
        axes[2].plot([r["step"] for r in valid], [r[name] for r in valid], "o-", label=name)
    axes[2].set_title("validation")
    if metric_names:
        axes[2].legend()
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    fig.suptitle(Path(run_dir).name)
    fig.tight_layout()
    return _save(fig, out if out is not None else Path(run_dir) / "curves.png")


@torch.no_grad()
def attention_weights(model, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, list]:
    """Weights (per layer, (H, Lq, Lk)) of the encoder's self-attention and the
    decoder's self- and cross-attention for one example, teacher-forced."""
    layers = {
        "encoder self-attention": [layer.attn for layer in model.encoder.layers],
        "decoder self-attention": [layer.self_attn for layer in model.decoder.layers],
        "decoder cross-attention": [layer.cross_attn for layer in model.decoder.layers],
    }
    modules = [m for group in layers.values() for m in group]
    if not all(hasattr(m, "record_weights") for m in modules):
        raise CapabilityError("attention maps need attention modules that record their weights "
                              "(the built-in softmax mechanisms do)")
    for m in modules:
        m.record_weights, m.last_weights = True, None
    try:
        model(src, tgt_in)
    finally:
        for m in modules:
            m.record_weights = False
    out = {}
    for name, group in layers.items():
        if any(m.last_weights is None for m in group):
            raise CapabilityError(f"{name}: this mechanism forms no attention weights "
                                  "(linear attention and the sparse block path do not)")
        out[name] = [m.last_weights[0].float().cpu() for m in group]
    return out


def plot_attention(weights: dict[str, list], src_tokens: list[str], tgt_tokens: list[str],
                   out: str | Path, layer: int = -1) -> Path:
    """One row per attention kind, one column per head, for ``layer``."""
    plt = _pyplot()
    kinds = list(weights)
    heads = weights[kinds[0]][layer].shape[0]
    fig, axes = plt.subplots(len(kinds), heads, figsize=(2.6 * heads + 1, 2.8 * len(kinds)),
                             squeeze=False)
    labels = {"encoder self-attention": (src_tokens, src_tokens),
              "decoder self-attention": (tgt_tokens, tgt_tokens),
              "decoder cross-attention": (tgt_tokens, src_tokens)}
    for row, kind in enumerate(kinds):
        w = weights[kind][layer]
        ys, xs = labels[kind]
        for h in range(heads):
            ax = axes[row][h]
            ax.imshow(w[h].numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
            ax.set_xticks(range(len(xs)), xs, rotation=90, fontsize=6)
            ax.set_yticks(range(len(ys)), ys, fontsize=6)
            ax.set_title(f"{kind}\nhead {h}" if h == 0 else f"head {h}", fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def plot_positions(out: str | Path, *, d_model: int = 128, length: int = 100,
                   base: float = 10000.0, dims: tuple[int, ...] = (0, 1, 10, 11, 40, 41)) -> Path:
    """The sinusoidal encoding of Vaswani et al. (sec. 3.5) as a heatmap (position x
    dimension), and a few dimensions as curves along the positions."""
    component = registry.get("positional", "sinusoidal")
    module = component.build({"base": base}, d_model=d_model, max_len=length)
    table = module(torch.zeros(1, length, d_model))[0]
    plt = _pyplot()
    fig, (ax_map, ax_lines) = plt.subplots(1, 2, figsize=(14, 5))
    image = ax_map.imshow(table.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    ax_map.set_xlabel("dimension")
    ax_map.set_ylabel("position")
    ax_map.set_title(f"sinusoidal positions, d_model {d_model}")
    fig.colorbar(image, ax=ax_map)
    for dim in dims:
        if dim < d_model:
            ax_lines.plot(table[:, dim].numpy(), label=f"dim {dim}")
    ax_lines.set_xlabel("position")
    ax_lines.set_title("a few dimensions")
    ax_lines.legend()
    ax_lines.grid(True, alpha=0.3)
    fig.tight_layout()
    return _save(fig, out)
