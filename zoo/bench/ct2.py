"""CTranslate2 as a decoding peer, in a process of its own.

The translator runs in a child process that imports CTranslate2 and nothing of torch
(:mod:`zoo.bench.child` says why); :class:`Translator` hands it a batch and waits for
the answer.

The child is ``python -m zoo.bench.ct2 MODEL_DIR COMPUTE_TYPE THREADS [KIND]``, KIND
``translator`` (the default: an encoder-decoder model), ``generator`` (a language
model, continuing each source as its prompt) or ``encoder`` (BERT: the batch's hidden
states, mean-pooled over each text's tokens and normalised, as sentence embeddings). It reads one JSON job per line
(``{"source": [[token, ...], ...]}`` once, then ``{"beam_size": k, "length": n}``, with
``"sampling": {"topk": k, "topp": p, "temperature": t}`` to sample; an encoder's
``{"texts": [...], "tokenizer": FOLDER, "max_tokens": N}`` instead of ``source``, texts it
tokenizes at each ``{"encode": true}``) and answers each with a JSON line (the length of
every hypothesis made, the embeddings' shape, or ``{"error": ...}``). This module imports
no torch.
"""

from __future__ import annotations

import sys

from . import child
from .child import PeerProcess, mean_pooled


COMPUTE_TYPES = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16"}
"""CTranslate2's compute type for each of ``zoo bench``'s dtypes."""


def why_not(compute_type: str) -> str:
    """Why CTranslate2 cannot compute in ``compute_type`` on this CPU (empty when it can):
    it has no bf16 on the CPU, for one."""
    import ctranslate2

    supported = ctranslate2.get_supported_compute_types("cpu")
    if compute_type in supported:
        return ""
    return (f"CTranslate2 has no {compute_type} on this CPU (it computes in "
            f"{', '.join(sorted(supported))})")


def computable(dtypes, say) -> list[str]:
    """Those of ``dtypes`` (``zoo bench``'s names) that CTranslate2 computes in on this
    CPU (:data:`COMPUTE_TYPES`); ``say`` hears why each other one is skipped."""
    kept = []
    for dtype in dtypes:
        why = (why_not(COMPUTE_TYPES[dtype]) if dtype in COMPUTE_TYPES else
               f"CTranslate2 has no {dtype} weights (its int4 is for AWQ models on CUDA)")
        if why:
            if say:
                say(f"peer ct2 {dtype} skipped: {why}")
        else:
            kept.append(dtype)
    return kept


class Translator(PeerProcess):
    """A CTranslate2 translator (or, ``kind="generator"``, generator; ``kind="encoder"``,
    encoder) of ``model_dir`` in a child process (:class:`~zoo.bench.child.PeerProcess`).

    ``compute_type`` is CTranslate2's (``float32``, ``int8``, ``int8_float32``, ...);
    ``threads`` its intra-op threads."""

    def __init__(self, model_dir: str, compute_type: str = "float32", threads: int = 1,
                 kind: str = "translator") -> None:
        self.compute_type = compute_type
        super().__init__("CTranslate2", "zoo.bench.ct2", model_dir, compute_type, threads, kind)

    def set_source(self, source: list[list[str]], start: str | None = None) -> None:
        """The batch every later :meth:`translate` call decodes (token strings); ``start``
        the decoder's first token where the model names none (mBART's, whose start is
        the target language's code), given as each sentence's target prefix."""
        self.ask({"source": source, "start": start})

    def translate(self, beam_size: int, length: int,
                  sampling: dict | None = None) -> list[int]:
        """Decode the batch, exactly ``length`` new tokens per sentence (no end token can
        stop it earlier), sampled when ``sampling`` gives ``topk``, ``topp`` and
        ``temperature``; returns each hypothesis' length."""
        job: dict = {"beam_size": beam_size, "length": length}
        if sampling:
            job["sampling"] = sampling
        return self.ask(job)["lengths"]

    def set_texts(self, texts: list[str], folder: str, max_tokens: int) -> None:
        """(``kind="encoder"``) Texts that every later :meth:`embed` call tokenizes first,
        by ``folder``'s fast tokenizer (:func:`~zoo.bench.child.text_tokenizer`), as a
        CTranslate2 user turns a text into the tokens its encoder takes."""
        self.ask({"texts": texts, "tokenizer": folder, "max_tokens": max_tokens})

    def embed(self) -> list[int]:
        """(``kind="encoder"``) Encode the batch (the texts tokenized first, where
        :meth:`set_texts` gave them) and pool each text's hidden states; returns the
        embeddings' shape."""
        return self.ask({"encode": True})["shape"]


def _decode(engine, kind: str, source: list[list[str]], job: dict,
            start: str | None = None) -> list[int]:
    """Run one job; the length of each hypothesis."""
    n = job["length"]
    if kind == "generator":
        sampling = job.get("sampling") or {"topk": 1, "topp": 1.0, "temperature": 1.0}
        out = engine.generate_batch(
            source, beam_size=job["beam_size"], max_length=n, min_length=n,
            include_prompt_in_result=False, max_batch_size=0, num_hypotheses=1,
            sampling_topk=sampling["topk"], sampling_topp=sampling["topp"],
            sampling_temperature=sampling["temperature"])
        return [len(r.sequences_ids[0]) for r in out]
    out = engine.translate_batch(
        source, beam_size=job["beam_size"], max_decoding_length=n, min_decoding_length=n,
        max_batch_size=0, num_hypotheses=1,
        target_prefix=[[start]] * len(source) if start else None)
    return [len(r.hypotheses[0]) for r in out]


def _embed(engine, source: list[list[str]]) -> list[int]:
    """Mean-pooled, normalised hidden states of the batch (:func:`~zoo.bench.child.mean_pooled`);
    their shape."""
    import numpy as np

    hidden = np.array(engine.forward_batch(source).last_hidden_state)
    return list(mean_pooled(hidden, [len(s) for s in source]).shape)


def serve(model_dir: str, compute_type: str, threads: int, kind: str = "translator") -> int:
    """The child: load the translator, generator or encoder, then answer one job per line
    of stdin (:func:`zoo.bench.child.serve`)."""
    import ctranslate2

    engines = {"generator": ctranslate2.Generator, "encoder": ctranslate2.Encoder}
    engine = engines.get(kind, ctranslate2.Translator)(
        model_dir, device="cpu", compute_type=compute_type, intra_threads=threads,
        inter_threads=1)
    batch: dict = {"source": [], "start": None, "texts": None}

    def answer(job: dict) -> dict:
        if "source" in job:
            batch.update(source=job["source"], start=job.get("start"), texts=None)
            return {"sentences": len(job["source"])}
        if "texts" in job:
            batch.update(texts=job["texts"], tokenizer=child.text_tokenizer(
                job["tokenizer"], job["max_tokens"]))
            return {"sentences": len(job["texts"])}
        if "beam_size" in job:
            return {"lengths": _decode(engine, kind, batch["source"], job, batch["start"])}
        if "encode" in job:
            source = batch["source"] if batch["texts"] is None else [
                e.tokens for e in batch["tokenizer"].encode_batch(batch["texts"])]
            return {"shape": _embed(engine, source)}
        return {"ready": True}

    return child.serve(answer)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:5]))
