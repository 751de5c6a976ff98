"""The work ``zoo bench train``, ``decode`` and ``vit`` measure, for zoo and each peer
on the same shapes, weights' sizes, dropout, optimizer (AdamW) and inputs.

- train: one optimizer step of transformer-base (a vocabulary of 8000 by default)
  on batch x source x target tokens, cross-entropy on the target; tokens/s counts
  target tokens.
- decode: ``new_tokens`` generated for each of ``batch`` sources (no end token can
  stop it early), greedy and beam 4: zoo's ``generate`` and Marian's, both with their
  KV caches; torch.nn.Transformer has none and re-runs its decoder (greedy only). zoo's
  calls run inside one block that fixes its weights (:func:`.harness.weights_held`).
- vit: a forward pass (inference) or an optimizer step (train) on a batch of images.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..kinds import Kind, kind_of
from . import peers
from .harness import Case, count_flops, step_bytes, weights_held, without_int4

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""The dtypes run under autocast; ``int8`` (decode) is a quantized copy instead."""


def _autocast(dtype: str, device: str):
    if dtype in ("fp32", "int8"):
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
    dtypes = without_int4(dtypes, "train", say)
    if "int8" in dtypes and say:
        say("train int8 skipped: int8 (zoo.quantize) is for inference")
    for dtype in [d for d in dtypes if d != "int8"]:
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
                 src_len: int = 64, new_tokens: int = 64, modes=None,
                 dtypes=("fp32",), impls=("zoo", "marian", "torch", "ct2"), device: str = "cpu",
                 kernel: str | None = None, model: str | None = None,
                 latency: tuple[int, int] | None = (20, 20), say=None) -> list[Case]:
    """Decoding cases (greedy, beam 4): zoo, Marian's generate, torch.nn.Transformer and
    CTranslate2, in each dtype asked for: ``fp32``; ``bf16`` (each model's weights
    converted to bf16 once; CTranslate2 has none on the CPU); ``int8`` (zoo quantized by
    :func:`zoo.quantize`, CTranslate2's ``int8``).
    ``model`` names a saved or imported model to decode instead of ``recipe`` (its own
    weights and vocabulary: ``hf-hub:Helsinki-NLP/opus-mt-de-en``); the peers get its
    sizes. ``latency`` = (source length, new tokens) adds the bench ``latency``: one
    sentence at a time, as ``zoo translate`` and a translation service see it. A
    decoder-only model (``--model llama-110m-shape``, a GPT-2 or Llama folder) is timed
    by :func:`zoo.bench.language_models.generate_cases` instead: prompts continued,
    greedy and sampled, beside transformers, CTranslate2's Generator, OpenVINO and
    llama.cpp. ``modes``:
    None for each kind's own (greedy and beam4; greedy and sample)."""
    import zoo

    torch.manual_seed(0)
    overrides = {"kernel": kernel} if kernel else {}
    if model is not None:
        built = zoo.build(model, device=device, **overrides).eval()
        vocab = built.settings.vocab_size
    else:
        built = zoo.build(recipe, vocab_size=vocab, device=device, **overrides).eval()
    model = built
    if kind_of(model) is Kind.LANGUAGE_MODEL:  # its own peers and modes
        from .language_models import MODES, generate_cases

        lm_impls = ["zoo", *(["transformers"] if {"transformers", "marian"} & set(impls)
                             else []), *[i for i in ("ct2", "openvino", "llama.cpp")
                                         if i in impls]]
        return generate_cases(model, batch=batch, prompt_len=src_len, new_tokens=new_tokens,
                              modes=modes or MODES, dtypes=dtypes, impls=lm_impls,
                              device=device, latency=latency, say=say)
    modes = modes or ("greedy", "beam4")
    dtypes = without_int4(dtypes, "decode", say)
    imported = model.imported
    # the transformers peer: the folder the model was read from, else a Marian of its sizes
    hf = "transformers" if imported is not None else "marian"
    impls = [hf if i in ("marian", "transformers") else i for i in impls]
    wanted = [i for i in impls if i != "ct2"]
    makers = {"torch": peers.torch_transformer, "marian": peers.marian,
              "transformers": lambda _: peers.transformers_folder(imported.folder)}
    if "ct2" in impls and hf == "marian" and "marian" not in wanted:
        wanted.append("marian")  # CTranslate2 runs the Marian peer's weights
    models = _peer_models(model, wanted, makers, say)
    groups = [("decode", torch.randint(3, vocab - 1, (batch, src_len), device=device),
               new_tokens)]  # Marian's pad is the last id
    if latency is not None:
        groups.append(("latency", torch.randint(3, vocab - 1, (1, latency[0]), device=device),
                       latency[1]))
    sources = {bench: src for bench, src, _ in groups}
    if imported is not None:
        def convert(folder):
            path, start = peers.ctranslate2_of_folder(imported.folder, imported.config, folder)
            return path, peers.folder_tokens(imported.config), start
    elif "marian" in models:
        def convert(folder):
            return (peers.ctranslate2_model(models["marian"], folder),
                    peers.marian_tokens(models["marian"].model.config.vocab_size), None)
    else:
        convert = None
    translators = (_ct2_translators(convert, sources, dtypes, device, say)
                   if "ct2" in impls and convert is not None
                   else {bench: {} for bench in sources})
    if "marian" not in impls:
        models.pop("marian", None)
    if "int8" in dtypes and torch.device(device).type != "cpu":
        dtypes = tuple(d for d in dtypes if d != "int8")
        if say:
            say("decode int8 skipped: zoo's int8 kernels run on the CPU")
    variants = {("zoo", "int8"): zoo.quantize(copy.deepcopy(model))} if "int8" in dtypes \
        else {}
    if "bf16" in dtypes:  # each model's weights converted once, as a bf16 model is run
        variants.update({(name, "bf16"): _in_bf16(m) for name, m in models.items()})
    cases = []
    for bench, src, tokens in groups:
        cases += _decode_group(bench, src, tokens, models, variants, translators[bench],
                               modes, dtypes, device)
    return cases


def _decode_group(bench: str, src: torch.Tensor, new_tokens: int, models: dict, variants: dict,
                  translators: dict, modes, dtypes, device: str) -> list[Case]:
    """The cases of one source batch: every implementation, mode and dtype."""
    cases = []
    unit, per_call = ("sentences/s", src.shape[0]) if bench == "latency" else (
        "tokens/s", src.shape[0] * new_tokens)
    for mode in modes:
        beams = 1 if mode == "greedy" else int(mode.removeprefix("beam"))
        flops = count_flops(_decoder("zoo", models["zoo"], src, beams, new_tokens))
        for dtype in dtypes:
            for name, m in models.items():
                m = variants.get((name, dtype), m)
                if dtype == "int8" and (name, dtype) not in variants:
                    continue  # only zoo and CTranslate2 decode in int8
                m.to(device).eval()
                run = _decoder(name, m, src, beams, new_tokens)
                if run is not None:
                    extra = ({"step_bytes": step_bytes(m), "steps": new_tokens}
                             if (bench, name, mode) == ("latency", "zoo", "greedy") else {})
                    cases.append(Case(bench, name, dtype, mode, run, per_call, unit, flops,
                                      device, extra=extra,
                                      hold=weights_held(m) if name == "zoo" else None))
            if dtype in translators:
                translator = translators[dtype]
                lengths = translator.translate(beams, new_tokens)
                if set(lengths) != {new_tokens}:  # the same work as the others, or none
                    raise RuntimeError(f"CTranslate2 made {sorted(set(lengths))} tokens, not "
                                       f"exactly {new_tokens}")
                cases.append(Case(bench, "ct2", dtype, mode,
                                  lambda t=translator, b=beams, n=new_tokens: t.translate(b, n),
                                  per_call, unit, flops, device, in_process=False))
    return cases


def _ct2_translators(convert: Callable, sources: dict[str, torch.Tensor], dtypes,
                     device: str, say) -> dict[str, dict]:
    """For each source batch (by bench name), one CTranslate2 translator per dtype, each in
    its own process, of the model ``convert(folder)`` writes once into a temporary folder
    with CTranslate2's own converter (the Marian peer's weights, or the folder an imported
    model was read from); it returns the model's path, its token names and the decoder's
    start token where the model names none."""
    import tempfile

    from . import ct2

    none = {bench: {} for bench in sources}
    if device != "cpu":
        if say:
            say("peer ct2 skipped: zoo bench runs CTranslate2 on the CPU only")
        return none
    folder = tempfile.TemporaryDirectory(prefix="zoo-ct2-")
    try:
        path, tokens, start = convert(folder.name)
    except (peers.PeerMissing, AttributeError, KeyError, ValueError) as exc:
        # a converter that cannot read this model (CTranslate2's loaders follow transformers'
        # configs of their own release) skips the peer, saying why
        if say:
            say(f"peer ct2 skipped: {type(exc).__name__}: {exc}")
        folder.cleanup()
        return none
    translators: dict[str, dict] = {}
    dtypes = ct2.computable(dtypes, say)
    for bench, src in sources.items():
        source = [[tokens[i] for i in row] for row in src.tolist()]
        translators[bench] = {}
        for dtype in dtypes:
            try:
                translator = ct2.Translator(path, ct2.COMPUTE_TYPES[dtype],
                                            torch.get_num_threads())
                translator.set_source(source, start)
            except RuntimeError as exc:
                if say:
                    say(f"peer ct2 {dtype} skipped: {exc}")
                continue
            translator.folder = folder  # the model files live as long as a translator does
            translators[bench][dtype] = translator
    return translators


def _in_bf16(m: nn.Module) -> nn.Module:
    """A copy of a decoding implementation with its weights in bf16 (a peer's wrapper, such
    as Marian's, holds its model as ``model``)."""
    return copy.deepcopy(m).to(torch.bfloat16)


def _decoder(name: str, m: nn.Module, src: torch.Tensor, beams: int, new_tokens: int):
    # no end token before the last, so every implementation makes exactly new_tokens
    if name == "zoo":  # the model's own settings (an imported model's), as zoo translate
        return lambda: m.generate(src, num_beams=beams, do_sample=False,
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    if name in ("marian", "transformers"):
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
    dtypes = without_int4(dtypes, "vit", say)
    if "int8" in dtypes and torch.device(device).type != "cpu":
        dtypes = tuple(d for d in dtypes if d != "int8")
        if say:
            say("vit int8 skipped: zoo's int8 kernels run on the CPU")
    quantized = zoo.quantize(copy.deepcopy(model)) if "int8" in dtypes else None
    cases = []
    for mode in modes:
        for dtype in dtypes:
            if dtype == "int8" and mode != "inference":
                continue  # a quantized model has no gradients
            flops = None
            for name, m in models.items():
                if dtype == "int8":
                    if name != "zoo":
                        continue  # zoo's int8 against its own fp32 and the peers' rows
                    m = quantized
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
                if flops is None and dtype == "int8":  # the fp32 model's work, counted
                    flops = count_flops(torch.no_grad()(lambda: model.eval()(x)))
                elif flops is None:
                    flops = count_flops(run)
                cases.append(Case("vit", name, dtype, mode, run, batch, "images/s", flops,
                                  device))
    return cases
