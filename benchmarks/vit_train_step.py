"""The training step of fashion-mnist-vit's model (vit-tiny-patch4-28, mean pooling,
no class token) with each attention kernel and each kind of AdamW: PyTorch's SDPA or
the eager kernel, the per-parameter AdamW or the fused one. All four models live in this
one process and take turns, a block of steps each, round after round, so a machine
that slows down for a while slows them all alike; the table gives each one's median.

    python benchmarks/vit_train_step.py [--batch 128] [--rounds 8] [--steps 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import zoo

VARIANTS = [  # (name, kernel, fused AdamW)
    ("sdpa, per-parameter AdamW (before)", "sdpa", False),
    ("eager, per-parameter AdamW", "eager", False),
    ("sdpa, fused AdamW (now)", "sdpa", True),
    ("eager, fused AdamW", "eager", True),
]


def make(kernel: str, fused: bool):
    torch.manual_seed(0)
    model = zoo.build("vit-tiny-patch4-28", class_token=False, pool="mean", kernel=kernel)
    model.train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused or None)


def step(model, optimizer, images, labels) -> None:
    loss = F.cross_entropy(model(images), labels, label_smoothing=0.05)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=15, help="steps a block")
    args = parser.parse_args()
    images = torch.randn(args.batch, 1, 28, 28)
    labels = torch.randint(0, 10, (args.batch,))
    runs = {name: make(kernel, fused) for name, kernel, fused in VARIANTS}
    for model, optimizer in runs.values():
        for _ in range(5):  # warm up
            step(model, optimizer, images, labels)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (model, optimizer) in runs.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                step(model, optimizer, images, labels)
            seconds[name].append((time.perf_counter() - start) / args.steps)
    before = statistics.median(seconds[VARIANTS[0][0]])
    print(f"batch {args.batch}, {torch.get_num_threads()} threads, {args.rounds} rounds of "
          f"{args.steps} steps\n")
    print("| step | ms a step (median) | images/s | speed against before |")
    print("|---|---|---|---|")
    for name, times in seconds.items():
        median = statistics.median(times)
        print(f"| {name} | {median * 1e3:.1f} | {args.batch / median:.0f} | "
              f"{before / median:.2f}x |")


if __name__ == "__main__":
    main()
