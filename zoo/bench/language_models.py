"""What ``zoo bench decode --model`` measures for a decoder-only language model (GPT-2,
Llama, ``--model llama-110m-shape``): ``new_tokens`` generated after each prompt of a
batch (``decode``) and after one prompt alone (``latency``), greedy and sampled, by
zoo and its peers on the same weights:

- ``zoo``: ``zoo.generate`` with the KV cache;
- ``transformers``: the model's transformers export (``zoo export --format
  transformers``: ``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...) and its ``generate``;
- ``ct2``: CTranslate2's ``Generator`` over the model's CTranslate2 export (CTranslate2's
  own converter of that transformers folder), in a process of its own
  (:mod:`zoo.bench.ct2`);
- ``openvino``: OpenVINO over optimum-intel's export of that transformers folder (fp32
  weights, int8 weights), in a process of its own (:mod:`zoo.bench.openvino_generator`;
  skipped, with the command that installs the export, where it is not installed);
- ``llama.cpp``: llama.cpp over the GGUF files its own converter makes of that
  transformers folder (f32, q8_0 for int8, q4_0 for int4), in a process of its own
  (:mod:`zoo.bench.llama_cpp_peer`; skipped, with the command that installs it, where
  it is not installed).

OpenVINO's and llama.cpp's greedy tokens are held to zoo's fp32 ones and the share equal
said.

Every implementation makes exactly ``new_tokens`` tokens (no end token stops one
early), and samples with the same settings: temperature 0.8, the 50 likeliest tokens,
top-p 0.95. Prompts are random tokens of one length, so no padding is timed.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import torch
from torch import nn

from ..export import ExportError, default_vocabulary, to_ctranslate2, to_transformers
from .harness import Case, count_flops, step_bytes, weights_held

SAMPLING = {"temperature": 0.8, "top_k": 50, "top_p": 0.95}
"""The sampling every implementation runs in the ``sample`` mode."""
MODES = ("greedy", "sample")


class _Peers:
    """The transformers model and the CTranslate2 folder made from one zoo model (kept in
    a temporary folder as long as this object lives)."""

    def __init__(self, model: nn.Module, impls: list[str], say) -> None:
        self.names = default_vocabulary(model.settings.vocab_size)
        """The token names of the CTranslate2 export (the prompts are written in them)."""
        self.folder = tempfile.TemporaryDirectory(prefix="zoo-bench-lm-")
        root = Path(self.folder.name)
        self.transformers = self.ct2 = self.hf_folder = None
        if {"transformers", "llama.cpp", "openvino"} & set(impls):
            try:
                self.hf_folder = to_transformers(model, root / "transformers")
            except ExportError as exc:
                say(f"peers transformers, llama.cpp and OpenVINO skipped: {exc}")
        if "transformers" in impls and self.hf_folder is not None:
            try:
                from transformers import AutoModelForCausalLM

                self.transformers = AutoModelForCausalLM.from_pretrained(
                    self.hf_folder, dtype=torch.float32).eval()
            except ImportError as exc:
                say(f"peer transformers skipped: {exc}")
        if "ct2" in impls:
            try:
                to_ctranslate2(model, root / "ct2", vocabulary=self.names)
                self.ct2 = str(root / "ct2")
            except ExportError as exc:
                say(f"peer ct2 skipped: {exc}")

    def model_files(self, peer: str, dtypes, say) -> dict[str, str]:
        """The files ``peer`` (``llama.cpp``, ``openvino``) runs for each of ``dtypes`` it
        has, made from the transformers export by its own converter: {dtype: path}."""
        from . import llama_cpp_peer, openvino_generator

        module = llama_cpp_peer if peer == "llama.cpp" else openvino_generator
        why = module.installed() or ("" if self.hf_folder else "no transformers export")
        if why:
            say(f"peer {peer} skipped: {why}")
            return {}
        out = Path(self.folder.name) / peer
        if peer == "llama.cpp":
            llama_cpp_peer.name_tokens(self.hf_folder, self.names)
            made = llama_cpp_peer.convert(self.hf_folder, out, dtypes)
        else:
            made = openvino_generator.export(self.hf_folder, out, dtypes)
        for dtype, path in list(made.items()):
            if path.startswith("! "):
                say(f"peer {peer} {dtype} skipped: {made.pop(dtype)[2:]}")
        return made


def _prompts(vocab: int, batch: int, length: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(3, vocab - 1, (batch, length), generator=g).to(device)


def _zoo_run(model: nn.Module, prompts: torch.Tensor, mode: str, new_tokens: int):
    sampling = dict(do_sample=True, seed=0, **SAMPLING) if mode == "sample" else \
        dict(do_sample=False)
    return lambda: model.generate(prompts, num_beams=1, max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, **sampling)


def _transformers_run(model: nn.Module, prompts: torch.Tensor, mode: str, new_tokens: int):
    sampling = dict(do_sample=True, **SAMPLING) if mode == "sample" else dict(do_sample=False)
    mask = torch.ones_like(prompts)
    # max_new_tokens: its generation config may name max_length, max_new_tokens or both,
    # and max_new_tokens wins over max_length
    return torch.no_grad()(lambda: model.generate(
        input_ids=prompts, attention_mask=mask, max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, num_beams=1, pad_token_id=0, **sampling))


def _generators(folder: str | None, sources: dict[str, list[list[str]]], dtypes,
                say) -> dict[str, dict]:
    """One CTranslate2 generator per source batch and dtype, each in its own process."""
    from . import ct2

    found: dict[str, dict] = {bench: {} for bench in sources}
    if folder is None:
        return found
    dtypes = ct2.computable(dtypes, say)
    for bench, source in sources.items():
        for dtype in dtypes:
            try:
                generator = ct2.Translator(folder, ct2.COMPUTE_TYPES[dtype],
                                           torch.get_num_threads(), kind="generator")
                generator.set_source(source)
            except RuntimeError as exc:
                say(f"peer ct2 {dtype} skipped: {exc}")
                continue
            found[bench][dtype] = generator
    return found


def _child_generators(peer: str, peers: _Peers, prompts: dict[str, torch.Tensor], dtypes,
                      say) -> dict[str, dict]:
    """One generator of ``peer`` (``llama.cpp``, ``openvino``) per prompt batch and dtype,
    each in its own process."""
    from . import llama_cpp_peer, openvino_generator

    found: dict[str, dict] = {bench: {} for bench in prompts}
    threads = torch.get_num_threads()
    for dtype, path in peers.model_files(peer, dtypes, say).items():
        for bench, batch in prompts.items():
            try:
                if peer == "llama.cpp":
                    generator = llama_cpp_peer.Generator(path, threads, batch.shape[0])
                else:
                    generator = openvino_generator.Generator(
                        path, openvino_generator.WEIGHTS[dtype][1], threads)
                    if dtype == "bf16" and "BF16" not in generator.ready["capabilities"]:
                        say("peer openvino bf16 skipped: OpenVINO computes no bf16 on this CPU")
                        break
                generator.set_prompts(batch.tolist())
            except RuntimeError as exc:
                say(f"peer {peer} {dtype} skipped: {str(exc).strip()[-300:]}")
                break
            found[bench][dtype] = generator
    return found


def _greedy(model: nn.Module, prompts: torch.Tensor, tokens: int) -> list[list[int]]:
    """zoo's greedy tokens after each prompt."""
    return model.generate(prompts, num_beams=1, max_new_tokens=tokens, min_new_tokens=tokens,
                          do_sample=False).tolist()


def _agreement(who: str, ours: list[list[int]], theirs: dict[str, list[list[int]]],
               say) -> None:
    """Say how many of each dtype's greedy tokens (``theirs``) equal zoo's fp32 ones
    (``ours``): a ``--model llama-110m-shape``'s random weights make near ties common, so
    zoo's own int8 and int4 are said too."""
    for dtype, made in theirs.items():
        same = sum(a == b for x, y in zip(ours, made) for a, b in zip(x, y))
        first = sum(x[0] == y[0] for x, y in zip(ours, made))
        say(f"{who} {dtype}: {same} of {len(ours) * len(ours[0])} greedy tokens equal to "
            f"zoo fp32's ({first} of {len(ours)} first tokens)")


def generate_cases(model: nn.Module, *, batch: int, prompt_len: int, new_tokens: int,
                   modes, dtypes, impls, device: str,
                   latency: tuple[int, int] | None, say) -> list[Case]:
    """The cases of a decoder-only ``model`` (see the module)."""
    say = say or (lambda _: None)
    modes = [m for m in modes if m in MODES] or list(MODES)
    impls = list(impls)
    peers = _Peers(model, impls, say)
    vocab = model.settings.vocab_size
    groups = [("decode", _prompts(vocab, batch, prompt_len, device), new_tokens)]
    if latency is not None:
        groups.append(("latency", _prompts(vocab, 1, latency[0], device), latency[1]))
    for low in ("int8", "int4"):
        if low in dtypes and torch.device(device).type != "cpu":
            dtypes = tuple(d for d in dtypes if d != low)
            say(f"decode {low} skipped: zoo's {low} kernels run on the CPU")
    zoos, theirs = _in_process_models(model, peers.transformers, dtypes)
    generators = _generators(peers.ct2, {b: [[peers.names[i] for i in row]
                                             for row in p.tolist()]
                                         for b, p, _ in groups}, dtypes, say)
    children = {"ct2": generators}
    first, prompts0, tokens0 = groups[0]
    compared = [d for d in ("int8", "int4") if d in zoos]
    ours = (_greedy(model, prompts0, tokens0) if compared or {"openvino", "llama.cpp"} & set(impls)
            else [])
    _agreement("zoo", ours, {d: _greedy(zoos[d], prompts0, tokens0) for d in compared}, say)
    for peer in ("openvino", "llama.cpp"):
        if peer in impls:
            children[peer] = _child_generators(peer, peers, {b: p for b, p, _ in groups},
                                               dtypes, say)
            _agreement(f"peer {peer}", ours, {d: g.tokens(tokens0)
                                              for d, g in children[peer][first].items()}, say)
    cases = []
    for bench, prompts, tokens in groups:
        unit, per_call = ("sentences/s", 1) if bench == "latency" else (
            "tokens/s", prompts.shape[0] * tokens)
        for mode in modes:
            flops = count_flops(_zoo_run(model, prompts, mode, tokens))
            for dtype in dtypes:
                runs = {"zoo": _zoo_run(zoos[dtype], prompts, mode, tokens)} \
                    if dtype in zoos else {}
                if theirs.get(dtype) is not None:
                    runs["transformers"] = _transformers_run(theirs[dtype], prompts, mode,
                                                             tokens)
                for name, run in runs.items():
                    made = run().shape[1] - (prompts.shape[1] if name == "transformers" else 0)
                    if made != tokens:  # the same work as the others, or none
                        raise RuntimeError(f"{name} made {made} tokens, not exactly {tokens}")
                    extra = ({"step_bytes": step_bytes(zoos[dtype]), "steps": tokens}
                             if (bench, name, mode) == ("latency", "zoo", "greedy") else {})
                    cases.append(Case(bench, name, dtype, mode, run, per_call, unit, flops,
                                      device, extra=extra,
                                      hold=weights_held(zoos[dtype]) if name == "zoo" else None))
                for peer, made in children.items():
                    generator = made[bench].get(dtype)
                    if generator is not None:
                        cases.append(_peer_case(peer, generator, bench, dtype, mode, tokens,
                                                per_call, unit, flops, device))
    for made in children.values():  # their model files live as long as the cases
        for bench in made:
            for generator in made[bench].values():
                generator.folder = peers.folder
    return cases


def _in_process_models(model: nn.Module, transformers: nn.Module | None,
                       dtypes) -> tuple[dict, dict]:
    """zoo's model and transformers' in each dtype asked for: bf16 with its weights
    converted once (as a bf16 model is run), int8 and int4 by :func:`zoo.quantize`."""
    import zoo

    zoos = {"fp32": model}
    if "bf16" in dtypes:
        zoos["bf16"] = copy.deepcopy(model).to(torch.bfloat16)
    for low in ("int8", "int4"):
        if low in dtypes:
            zoos[low] = zoo.quantize(copy.deepcopy(model), low)
    theirs = {"fp32": transformers}
    if transformers is not None and "bf16" in dtypes:
        theirs["bf16"] = copy.deepcopy(transformers).to(torch.bfloat16)
    return zoos, theirs


def _peer_case(peer: str, generator, bench: str, dtype: str, mode: str, tokens: int,
               per_call: int, unit: str, flops: float, device: str) -> Case:
    """The case of a peer's child process (CTranslate2, OpenVINO, llama.cpp), after one
    call that checks it makes exactly ``tokens`` tokens a prompt."""
    sampling = ({"topk": SAMPLING["top_k"], "topp": SAMPLING["top_p"],
                 "temperature": SAMPLING["temperature"]} if mode == "sample" else None)
    run = ((lambda: generator.translate(1, tokens, sampling)) if peer == "ct2" else
           (lambda: generator.generate(tokens, sampling)))
    lengths = run()
    if set(lengths) != {tokens}:
        raise RuntimeError(f"{peer} made {sorted(set(lengths))} tokens, not exactly {tokens}")
    return Case(bench, peer, dtype, mode, run, per_call, unit, flops, device, in_process=False)
