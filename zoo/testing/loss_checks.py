"""The conformance kit's checks of the loss family: a mean over rows, bf16 logits,
gradients, and ``ignore_index``."""

from __future__ import annotations


import torch

from .contract import Failed, Seed, check, close, shape


@check("loss")
def _loss(component, settings):
    """criterion(logits (N, C), target (N,)) is a finite 0-d mean (a batch repeated twice
    gives the same value), accepts bf16 logits, and its gradient reaches the logits."""
    with Seed(0):
        loss = component.build(settings)
        logits, target = torch.randn(12, 7, requires_grad=True), torch.randint(0, 7, (12,))
        value = loss(logits, target)
        shape(value, (), "criterion(logits, target)")
        close(loss(logits.detach().repeat(2, 1), target.repeat(2)), value.detach(),
               "the loss of the batch repeated twice (a mean, not a sum)")
        value.backward()
        if logits.grad is None or not bool(logits.grad.abs().sum() > 0):
            raise Failed("no gradient reaches the logits")
        shape(loss(logits.detach().bfloat16(), target).float(), (), "the loss of bf16 logits")


@check("loss", "ignore_index")
def _loss_ignore_index(component, settings):
    """Targets equal to ``ignore_index`` add nothing: the loss equals the loss over the
    other rows alone, whatever the ignored rows' logits."""
    with Seed(0):
        loss = component.build(settings)
        logits, target = torch.randn(12, 7), torch.randint(1, 7, (12,))
        target[[2, 5, 6, 11]] = 0
        keep = target != 0
        other = logits.clone()
        other[~keep] = torch.randn(int((~keep).sum()), 7) * 10
        alone = loss(logits[keep], target[keep])
        close(loss(logits, target, ignore_index=0), alone, "the loss with ignored rows")
        close(loss(other, target, ignore_index=0), alone,
               "the loss when the ignored rows' logits change")
