"""The work ``zoo bench train``, ``decode`` and ``vit`` measure, for zoo and each peer
on the same shapes, weights' sizes, dropout, optimizer (AdamW) and inputs.

- train: one optimizer step of transformer-base (a vocabulary of 8000 by default)
  on batch x source x target tokens, cross-entropy on the target; tokens/s counts
  target tokens.
- decode: ``new_tokens`` generated for each of ``batch`` sources (no end token can
  stop it early), greedy and beam 4: zoo's ``generate`` and Marian's, both with their
  KV caches; torch.nn.Transformer has none and re-runs its decoder (greedy only).
- vit: a forward pass (inference) or an optimizer step (train) on a batch of images.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import peers
from .harness import Case, count_flops

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _autocast(dtype: str, device: str):
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=DTYPES[dtype])


def _peer_models(zoo_model: nn.Module, names: list[str], makers: dict[str, Callable],
                 say=None) -> dict[str, nn.Module]:
    models = {"zoo": zoo_model}
    for name in names:
        if name == "zoo":
            continue
        try:
            models[name] = makers[name](zoo_model)
        except peers.PeerMissing as exc:
            if say:
                say(f"peer {name} skipped: {exc}")
    return models


def _compiled(models: dict[str, nn.Module], compile: bool) -> dict[str, nn.Module]:
    """Every implementation through torch.compile, or none (the comparison stays fair)."""
    return {k: torch.compile(m) for k, m in models.items()} if compile else models


def train_cases(*, recipe: str = "transformer-base", vocab: int = 8000, batch: int = 16,
                src_len: int = 64, tgt_len: int = 64, dtypes=("fp32", "bf16"),
                impls=("zoo", "torch", "marian"), device: str = "cpu", kernel: str | None = None,
                compile: bool = False, say=None) -> list[Case]:
    """Training-step cases: zoo, torch.nn.Transformer and Marian on the same shapes."""
    import zoo

    torch.manual_seed(0)
    overrides = {"kernel": kernel} if kernel else {}
    model = zoo.build(recipe, vocab_size=vocab, device=device, **overrides)
    models = _peer_models(model, list(impls), {"torch": peers.torch_transformer,
                                               "marian": peers.marian}, say)
    models = _compiled({k: m.to(device) for k, m in models.items()}, compile)
    src = torch.randint(3, vocab, (batch, src_len), device=device)
    tgt = torch.randint(3, vocab, (batch, tgt_len + 1), device=device)
    cases = []
    flops = None
    for dtype in dtypes:
        for name, m in models.items():
            m.to(device).train()
            opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

            def step(m=m, opt=opt, dtype=dtype):
                opt.zero_grad(set_to_none=True)
                with _autocast(dtype, device):
                    logits = m(src, tgt[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, vocab), tgt[:, 1:].reshape(-1))
                loss.backward()
                opt.step()

            if flops is None:
                flops = count_flops(step)
            cases.append(Case("train", name, dtype, "train", step, batch * tgt_len,
                              "tokens/s", flops, device))
    return cases


def decode_cases(*, recipe: str = "transformer-base", vocab: int = 8000, batch: int = 16,
                 src_len: int = 64, new_tokens: int = 64, modes=("greedy", "beam4"),
                 impls=("zoo", "marian", "torch"), device: str = "cpu", kernel: str | None = None,
                 say=None) -> list[Case]:
    """Decoding cases (greedy, beam 4): zoo, Marian's generate and torch.nn.Transformer."""
    import zoo

    torch.manual_seed(0)
    overrides = {"kernel": kernel} if kernel else {}
    model = zoo.build(recipe, vocab_size=vocab, device=device, **overrides).eval()
    models = _peer_models(model, list(impls), {"torch": peers.torch_transformer,
                                               "marian": peers.marian}, say)
    src = torch.randint(3, vocab, (batch, src_len), device=device)
    cases = []
    for mode in modes:
        beams = 1 if mode == "greedy" else int(mode.removeprefix("beam"))
        flops = count_flops(_decoder("zoo", model, src, beams, new_tokens))
        for name, m in models.items():
            m.to(device).eval()
            run = _decoder(name, m, src, beams, new_tokens)
            if run is None:
                continue
            cases.append(Case("decode", name, "fp32", mode, run, batch * new_tokens,
                              "tokens/s", flops, device))
    return cases


def _decoder(name: str, m: nn.Module, src: torch.Tensor, beams: int, new_tokens: int):
    # no end token can occur (-1), so every implementation makes exactly new_tokens
    if name == "zoo":
        kwargs: dict[str, Any] = dict(max_new_tokens=new_tokens, bos_id=1, eos_id=-1)
        if beams == 1:
            return torch.no_grad()(lambda: m.generate(src, strategy="greedy", **kwargs))
        return torch.no_grad()(lambda: m.generate(src, strategy="beam", beam_size=beams,
                                                  **kwargs))
    if name == "marian":
        hf = m.model
        return torch.no_grad()(lambda: hf.generate(
            input_ids=src, attention_mask=src.ne(0), max_new_tokens=new_tokens,
            min_new_tokens=new_tokens, num_beams=beams, do_sample=False, early_stopping=False))
    if name == "torch" and beams == 1:
        return lambda: m.greedy(src, new_tokens, bos_id=1)
    return None


def vit_cases(*, recipe: str = "vit-small-patch16-224", batch: int = 8,
              modes=("inference", "train"), dtypes=("fp32", "bf16"), impls=("zoo", "timm"),
              device: str = "cpu", kernel: str | None = None, compile: bool = False,
              say=None) -> list[Case]:
    """ViT cases (inference, a training step): zoo and timm on the same shapes."""
    import zoo

    torch.manual_seed(0)
    model = zoo.build(recipe, device=device, **({"kernel": kernel} if kernel else {}))
    models = _peer_models(model, list(impls), {"timm": peers.timm_vit}, say)
    models = _compiled({k: m.to(device) for k, m in models.items()}, compile)
    s = zoo.get_recipe(recipe).architecture.settings
    x = torch.randn(batch, s.get("in_chans", 3), s["image_size"], s["image_size"],
                    device=device)
    y = torch.randint(0, s["num_classes"], (batch,), device=device)
    cases = []
    for mode in modes:
        for dtype in dtypes:
            flops = None
            for name, m in models.items():
                m.to(device)
                if mode == "inference":
                    def run(m=m, dtype=dtype):
                        m.eval()
                        with torch.no_grad(), _autocast(dtype, device):
                            return m(x)
                else:
                    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

                    def run(m=m, opt=opt, dtype=dtype):
                        m.train()
                        opt.zero_grad(set_to_none=True)
                        with _autocast(dtype, device):
                            out = m(x)
                        F.cross_entropy(out.float(), y).backward()
                        opt.step()
                if flops is None:
                    flops = count_flops(run)
                cases.append(Case("vit", name, dtype, mode, run, batch, "images/s", flops,
                                  device))
    return cases
