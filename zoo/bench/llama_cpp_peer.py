"""llama.cpp as a peer of ``zoo bench decode`` for a language model, in a process of its own.

The model is what a llama.cpp user makes of the same transformers folder: a GGUF file
written by llama.cpp's own converter (``convert_hf_to_gguf.py``, ``--outtype f32`` and
``q8_0``), and for q4_0 that f32 file quantized by llama.cpp's ``llama_model_quantize``
(what its ``llama-quantize`` tool runs). zoo's dtypes map to llama.cpp's as
:data:`QUANTS` says: fp32 to f32, int8 to q8_0, int4 to q4_0.

llama.cpp comes from ``llama-cpp-python``, which PyPI ships as a source package that
compiles llama.cpp for this CPU (minutes on two cores). One command installs it and
takes the converter out of the same source package, once:
``python -m zoo.bench.llama_cpp_peer install`` (pip keeps the wheel it built, so a second
install is quick; the converter is kept in ``$XDG_CACHE_HOME/zoo/llama.cpp-VERSION``, or
``$ZOO_LLAMA_CPP_CONVERTER`` names it). CI never runs it; without it the peer is skipped
with its reason.

The conversion runs in a child process (``python -m zoo.bench.llama_cpp_peer convert
FOLDER OUT DTYPE...``); each timed model runs in another (``python -m
zoo.bench.llama_cpp_peer serve GGUF THREADS BATCH``) that imports llama.cpp and nothing
of torch (:mod:`zoo.bench.child` says why). The child decodes a batch of prompts as
llama.cpp's own batched example does: one context with a sequence a prompt, each step one
``llama_decode`` of every sequence's last token, and a sampler chain a sequence
(``llama_sampler_init_greedy``, or top-k, top-p, temperature and a seeded draw). Its jobs
and answers are :class:`zoo.bench.child.GeneratorProcess`'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import child
from .child import GeneratorProcess

VERSION = "0.3.36"
"""The ``llama-cpp-python`` release the peer is installed at (its llama.cpp and converter)."""

QUANTS = {"fp32": "f32", "int8": "q8_0", "int4": "q4_0"}
"""llama.cpp's weight type for each of ``zoo bench``'s dtypes."""

Q4_0 = 2
"""llama.cpp's ``LLAMA_FTYPE_MOSTLY_Q4_0``."""

INSTALL = "python -m zoo.bench.llama_cpp_peer install"
"""The one-line, cached step that installs the peer."""


def converter_home() -> Path:
    """Where the converter of :data:`VERSION` is kept: the folder of
    ``$ZOO_LLAMA_CPP_CONVERTER`` where set, else ``$XDG_CACHE_HOME/zoo/llama.cpp-VERSION``."""
    named = os.environ.get("ZOO_LLAMA_CPP_CONVERTER")
    if named:
        return Path(named).expanduser().absolute().parent
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "zoo" / f"llama.cpp-{VERSION}"


def installed() -> str:
    """Empty when llama.cpp (``llama_cpp``) imports here and its converter is at hand; else
    why the peer is skipped and the command that installs it."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed ({INSTALL})"
    if not (converter_home() / "convert_hf_to_gguf.py").is_file():
        return f"llama.cpp's converter is not in {converter_home()} ({INSTALL})"
    return ""


def install() -> int:
    """Install ``llama-cpp-python`` at :data:`VERSION` (pip compiles llama.cpp the first
    time and keeps the wheel) and put llama.cpp's converter (``convert_hf_to_gguf.py``,
    ``conversion/``, ``gguf-py/``) from the same source package into
    :func:`converter_home`; a step already done is skipped. A step that fails says which,
    leaves no half-made converter behind, and returns 2."""
    import importlib.util
    import tarfile
    import tempfile

    pip = [sys.executable, "-m", "pip"]
    home = converter_home()
    step = f"pip install llama-cpp-python=={VERSION}"
    try:
        if importlib.util.find_spec("llama_cpp") is None:
            subprocess.run([*pip, "install", f"llama-cpp-python=={VERSION}"], check=True)
        if (home / "convert_hf_to_gguf.py").is_file():
            return 0
        step = "taking llama.cpp's converter out of its source package"
        home.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=home.parent) as tmp:  # renamed on one disk
            subprocess.run([*pip, "download", "--no-deps", "--no-binary", ":all:", "-d", tmp,
                            f"llama-cpp-python=={VERSION}"], check=True)
            prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
            with tarfile.open(next(Path(tmp).glob("*.tar.gz"))) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (
                    m.name == prefix + "convert_hf_to_gguf.py"
                    or m.name.startswith((prefix + "conversion/", prefix + "gguf-py/")))]
                for m in members:
                    m.name = m.name[len(prefix):]
                tar.extractall(Path(tmp) / "out", members=members, filter="data")
            (Path(tmp) / "out").rename(home)  # whole, or not at all
    except (subprocess.CalledProcessError, OSError, tarfile.TarError, StopIteration) as exc:
        what = (f"exit status {exc.returncode}" if isinstance(exc, subprocess.CalledProcessError)
                else "no source package came" if isinstance(exc, StopIteration) else str(exc))
        print(f"zoo: llama.cpp {VERSION} was not installed: {step} failed ({what}). pip must "
              f"reach PyPI and compile llama.cpp (gcc, cmake); nothing was kept in {home}.",
              file=sys.stderr)
        return 2
    print(f"llama.cpp {VERSION}: llama-cpp-python installed, its converter in {home}")
    return 0


def name_tokens(folder: Path, names: list[str]) -> None:
    """Give ``folder`` (a transformers export with no tokenizer) a SentencePiece
    ``tokenizer.model`` naming each id as ``names`` do, which llama.cpp's converter reads
    as a Llama vocabulary (the bench hands llama.cpp token ids, never text)."""
    from sentencepiece import sentencepiece_model_pb2 as spm

    proto = spm.ModelProto()
    proto.trainer_spec.model_type = spm.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(names)
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id = 3, 1
    proto.trainer_spec.eos_id, proto.trainer_spec.pad_id = 2, 0
    kinds = {0: spm.ModelProto.SentencePiece.CONTROL, 1: spm.ModelProto.SentencePiece.CONTROL,
             2: spm.ModelProto.SentencePiece.CONTROL, 3: spm.ModelProto.SentencePiece.UNKNOWN}
    for i, name in enumerate(names):
        piece = proto.pieces.add()
        piece.piece = name if i < 4 else f"\u2581{name}"
        piece.score = -float(i)
        piece.type = kinds.get(i, spm.ModelProto.SentencePiece.NORMAL)
    (folder / "tokenizer.model").write_bytes(proto.SerializeToString())


def convert(folder: Path, out: Path, dtypes) -> dict[str, str]:
    """The GGUF files of the transformers ``folder`` for those of ``dtypes`` llama.cpp has
    (:data:`QUANTS`), written into ``out`` in a child process: {dtype: path}, and for a
    dtype that failed {dtype: "! why"}."""
    wanted = [d for d in dtypes if d in QUANTS]
    done = subprocess.run([sys.executable, "-m", "zoo.bench.llama_cpp_peer", "convert",
                           str(folder), str(out), *wanted], capture_output=True, text=True)
    why = (done.stderr or done.stdout).strip()[-500:]
    return {d: str(out / f"{QUANTS[d]}.gguf") if (out / f"{QUANTS[d]}.gguf").is_file()
            else f"! its conversion failed: {why}" for d in wanted}


class Generator(GeneratorProcess):
    """A llama.cpp model (a GGUF file) decoding up to ``batch`` prompts at a time on
    ``threads`` threads, in a child process."""

    def __init__(self, gguf: str, threads: int, batch: int) -> None:
        super().__init__("llama.cpp", "zoo.bench.llama_cpp_peer", "serve", gguf, threads,
                         batch)


def _convert(folder: str, out: str, dtypes: list[str]) -> int:
    """The converting child: llama.cpp's converter to f32 and q8_0, and llama.cpp's
    quantizer from f32 to q4_0."""
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    script = converter_home() / "convert_hf_to_gguf.py"
    for outtype in {QUANTS[d] for d in dtypes} & {"f32", "q8_0"} | (
            {"f32"} if "int4" in dtypes else set()):
        subprocess.run([sys.executable, str(script), folder, "--outtype", outtype,
                        "--outfile", str(target / f"{outtype}.gguf")], check=True,
                       stdout=subprocess.DEVNULL)
    if "int4" in dtypes:
        import llama_cpp

        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = Q4_0
        if llama_cpp.llama_model_quantize(str(target / "f32.gguf").encode(),
                                          str(target / "q4_0.gguf").encode(),
                                          params) != 0:
            print("llama_model_quantize failed", file=sys.stderr)
            return 1
    return 0


def _sampler(llama_cpp, sampling: dict | None, seed: int):
    """A sampler chain: greedy, or top-k, top-p, temperature and a seeded draw."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if sampling is None:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    for made in (llama_cpp.llama_sampler_init_top_k(sampling["topk"]),
                 llama_cpp.llama_sampler_init_top_p(sampling["topp"], 1),
                 llama_cpp.llama_sampler_init_temp(sampling["temperature"]),
                 llama_cpp.llama_sampler_init_dist(seed)):
        llama_cpp.llama_sampler_chain_add(chain, made)
    return chain


def _serve(gguf: str, threads: int, batch_size: int) -> int:
    """The timed child: load ``gguf`` and answer one job per line of stdin."""
    import llama_cpp

    # llama.cpp logs each load at length to stderr, which the parent reads only when the
    # child ends: a full pipe would stop the child, so its log goes nowhere
    quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(quiet, None)
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(gguf.encode(),
                                                 llama_cpp.llama_model_default_params())
    if not model:
        raise SystemExit(f"llama.cpp could not load {gguf}")
    state: dict = {"ctx": None}

    def context(tokens_needed: int):
        """A context for the batch's sequences, made again when it is too short."""
        if state["ctx"] is not None and state["n_ctx"] >= tokens_needed:
            return state["ctx"]
        if state["ctx"] is not None:
            llama_cpp.llama_free(state["ctx"])
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = tokens_needed
        params.n_batch = params.n_ubatch = max(512, tokens_needed)
        params.n_seq_max = batch_size
        params.n_threads = params.n_threads_batch = threads
        state.update(ctx=llama_cpp.llama_init_from_model(model, params), n_ctx=tokens_needed)
        return state["ctx"]

    def decode(prompts: list[list[int]], job: dict) -> list[list[int]]:
        n = job["length"]
        ctx = context(sum(len(p) + n for p in prompts) + 8)
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        batch = llama_cpp.llama_batch_init(sum(len(p) for p in prompts), 0, len(prompts))
        samplers = [_sampler(llama_cpp, job.get("sampling"), s) for s in range(len(prompts))]
        made: list[list[int]] = [[] for _ in prompts]
        try:
            last = []  # each sequence's index in the batch whose logits it samples
            batch.n_tokens = 0
            for s, prompt in enumerate(prompts):
                for pos, token in enumerate(prompt):
                    i = batch.n_tokens
                    batch.token[i], batch.pos[i] = token, pos
                    batch.n_seq_id[i], batch.seq_id[i][0] = 1, s
                    batch.logits[i] = pos == len(prompt) - 1
                    batch.n_tokens += 1
                last.append(batch.n_tokens - 1)
            for step in range(n):
                if llama_cpp.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
                batch.n_tokens = 0
                for s, prompt in enumerate(prompts):
                    token = llama_cpp.llama_sampler_sample(samplers[s], ctx, last[s])
                    made[s].append(token)
                    batch.token[s], batch.pos[s] = token, len(prompt) + step
                    batch.n_seq_id[s], batch.seq_id[s][0], batch.logits[s] = 1, s, True
                    last[s] = s
                batch.n_tokens = len(prompts)
        finally:
            llama_cpp.llama_batch_free(batch)
            for sampler in samplers:
                llama_cpp.llama_sampler_free(sampler)
        return made

    return child.serve_generator(decode, {
        "ready": True, "system": llama_cpp.llama_print_system_info().decode()})


if __name__ == "__main__":
    if sys.argv[1] == "install":
        sys.exit(install())
    if sys.argv[1] == "convert":
        sys.exit(_convert(sys.argv[2], sys.argv[3], sys.argv[4:]))
    sys.exit(_serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
