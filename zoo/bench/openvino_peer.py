"""OpenVINO as a peer of ``zoo bench embed``, in a process of its own.

The model is what an OpenVINO user makes of the same transformers folder, as
optimum-intel's export makes it: transformers' own model converted by
``openvino.convert_model`` (its PyTorch front end) and saved with its fp32 weights, and
for int8 the same graph with its weights compressed by NNCF's ``compress_weights`` (int8,
asymmetric, one scale per output channel: optimum-intel's ``--weight-format int8``). The
conversion runs once in a child process (``python -m zoo.bench.openvino_peer convert
FOLDER OUT``, which imports torch and transformers); each timed model runs in another
(``python -m zoo.bench.openvino_peer serve XML PRECISION THREADS``) that imports OpenVINO
and nothing of torch (:mod:`zoo.bench.child` says why), compiled for latency on
``THREADS`` threads in one stream with the inference precision ``PRECISION``: ``f32``
for the fp32 and int8 rows (int8 weights, fp32 activations), ``bf16`` for the bf16 row
(OpenVINO's default on a CPU with bf16 units, AMX included).

The child reads ``{"texts": [...], "tokenizer": FOLDER, "max_tokens": N}`` once (texts
it tokenizes at each call by the folder's fast tokenizer), then ``{"encode": true}``: it
tokenizes the texts, runs the padded batch and
mean-pools each text's hidden states to unit length (:func:`zoo.bench.child.mean_pooled`,
sentence-transformers' mean pooling), answering their shape, or with ``"vectors": true``
the vectors themselves, which the parent holds to zoo's (their least cosine).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from . import child
from .child import PeerProcess, mean_pooled

PRECISIONS = {"fp32": ("fp32.xml", "f32"), "bf16": ("fp32.xml", "bf16"),
              "int8": ("int8.xml", "f32")}
"""For each of ``zoo bench``'s dtypes, the converted model OpenVINO runs and its inference
precision."""


def installed() -> str:
    """Empty when OpenVINO and NNCF are importable here; else why the peer is skipped."""
    import importlib.util

    missing = [name for name in ("openvino", "nncf") if importlib.util.find_spec(name) is None]
    return (f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed "
            "(pip install 'zoo-transformers[bench]')") if missing else ""


def convert(folder: Path, out: Path) -> str:
    """Convert the transformers ``folder`` into ``out`` (``fp32.xml`` and ``int8.xml``) in a
    child process; empty when it did, else why not (the child's last words)."""
    done = subprocess.run([sys.executable, "-m", "zoo.bench.openvino_peer", "convert",
                           str(folder), str(out)], capture_output=True, text=True)
    if done.returncode == 0 and all((out / name).is_file() for name in ("fp32.xml", "int8.xml")):
        return ""
    return f"its conversion failed: {(done.stderr or done.stdout).strip()[-500:]}"


class Encoder(PeerProcess):
    """An OpenVINO encoder of ``xml`` at inference ``precision`` (``f32``, ``bf16``) on
    ``threads`` threads, in a child process. :attr:`ready` holds the CPU's
    ``capabilities`` as OpenVINO reads them (``BF16`` where it computes bf16 in hardware)."""

    def __init__(self, xml: Path, precision: str, threads: int) -> None:
        super().__init__("OpenVINO", "zoo.bench.openvino_peer", "serve", xml, precision, threads)

    def set_texts(self, texts: list[str], folder: str, max_tokens: int) -> None:
        """Texts that every later :meth:`embed` call tokenizes first, by ``folder``'s fast
        tokenizer (:func:`~zoo.bench.child.text_tokenizer`), as an OpenVINO user turns a
        text into the ids its model takes."""
        self.ask({"texts": texts, "tokenizer": folder, "max_tokens": max_tokens})

    def embed(self) -> list[int]:
        """Tokenize the texts :meth:`set_texts` gave, encode the batch and pool it; the
        embeddings' shape."""
        return self.ask({"encode": True})["shape"]

    def vectors(self) -> list[list[float]]:
        """The batch's embeddings themselves (to compare, untimed)."""
        return self.ask({"encode": True, "vectors": True})["vectors"]


def _convert(folder: str, out: str) -> int:
    """The converting child: transformers' model of ``folder`` through OpenVINO's PyTorch
    front end, saved in fp32, and its weights compressed to int8 by NNCF."""
    import nncf
    import openvino as ov
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(folder).eval()
    example = dict(AutoTokenizer.from_pretrained(folder)(
        ["An example sentence.", "Another one, a little longer."], padding=True,
        return_tensors="pt"))
    with torch.no_grad():
        graph = ov.convert_model(model, example_input=example)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    ov.save_model(graph, target / "fp32.xml", compress_to_fp16=False)
    compressed = nncf.compress_weights(ov.Core().read_model(target / "fp32.xml"))
    ov.save_model(compressed, target / "int8.xml", compress_to_fp16=False)
    return 0


def _serve(xml: str, precision: str, threads: int) -> int:
    """The timed child: compile ``xml`` and answer one job per line of stdin."""
    import numpy as np
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(xml, "CPU", {
        "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    names = {name for port in compiled.inputs for name in port.get_names()}
    batch: dict = {}

    def padded(ids: list[list[int]]) -> tuple[dict, list[int]]:
        """The model's inputs for a batch of token ids, padded, and each text's length."""
        lengths = [len(row) for row in ids]
        tokens = np.zeros((len(ids), max(lengths)), dtype=np.int64)
        for i, row in enumerate(ids):
            tokens[i, : len(row)] = row
        mask = (np.arange(tokens.shape[1])[None, :] < np.array(lengths)[:, None])
        inputs = {"input_ids": tokens, "attention_mask": mask.astype(np.int64),
                  "token_type_ids": np.zeros_like(tokens)}
        return {k: v for k, v in inputs.items() if k in names}, lengths

    def answer(job: dict) -> dict:
        if "texts" in job:
            batch.update(texts=job["texts"], tokenizer=child.text_tokenizer(
                job["tokenizer"], job["max_tokens"]))
            return {"sentences": len(job["texts"])}
        if "encode" in job:
            inputs, lengths = padded(
                [e.ids for e in batch["tokenizer"].encode_batch(batch["texts"])])
            hidden = request.infer(inputs)[compiled.outputs[0]]
            pooled = mean_pooled(np.asarray(hidden, dtype=np.float32), lengths)
            if job.get("vectors"):
                return {"vectors": pooled.tolist()}
            return {"shape": list(pooled.shape)}
        return {"ready": True, "capabilities": list(
            core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))}

    return child.serve(answer)


if __name__ == "__main__":
    if sys.argv[1] == "convert":
        sys.exit(_convert(sys.argv[2], sys.argv[3]))
    sys.exit(_serve(sys.argv[2], sys.argv[3], int(sys.argv[4])))
