"""A peer of ``zoo bench`` in a process of its own, spoken to one JSON line each way.

torch's OpenMP pool and a peer's own pool (CTranslate2's OpenMP, OpenVINO's TBB) slow
each other down when both live in one process (each pool's threads spin while the other
works), so a peer runs in a child process that imports its engine and nothing of torch:
``python -m MODULE ARGS...``, reading one JSON job per line of stdin and answering each
with one JSON line (``{"error": ...}`` when the job failed). :class:`PeerProcess` is
the parent's end, :func:`serve` the child's; a call costs the child's work plus one short
line each way on a pipe. This module imports no torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable


class PeerProcess:
    """The parent's end of a peer's child process, ``python -m module *args``; ``name``
    says whose process it is in errors. The child's first answer (to ``{"ping": true}``)
    is kept as :attr:`ready`: it fails here, with the child's error, if the child cannot
    load its engine."""

    def __init__(self, name: str, module: str, *args: str) -> None:
        self.name = name
        self._child = subprocess.Popen(
            [sys.executable, "-m", module, *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ready = self.ask({"ping": True})

    def ask(self, job: dict) -> dict:
        """Send ``job``, return the child's answer; a RuntimeError naming the peer when the
        child ended or answered with an error."""
        assert self._child.stdin is not None and self._child.stdout is not None
        try:
            self._child.stdin.write(json.dumps(job) + "\n")
            self._child.stdin.flush()
            line = self._child.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            err = self._child.stderr.read() if self._child.stderr else ""
            raise RuntimeError(f"the {self.name} process ended: {err.strip()[-2000:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.name}: {answer['error']}")
        return answer

    def close(self) -> None:
        """End the child process."""
        if self._child.poll() is None:
            try:
                self._child.stdin.close()  # type: ignore[union-attr]
                self._child.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._child.kill()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class GeneratorProcess(PeerProcess):
    """The parent's end of a language-model peer (OpenVINO, llama.cpp): the child takes
    ``{"prompts": [[id, ...], ...]}`` once, then ``{"length": n}`` (with ``"sampling":
    {"topk": k, "topp": p, "temperature": t}`` to sample) and answers each prompt's new
    tokens' count, or with ``"tokens": true`` the tokens themselves."""

    def set_prompts(self, prompts: list[list[int]]) -> None:
        """The prompts (token ids) every later :meth:`generate` call continues."""
        self.ask({"prompts": prompts})

    def generate(self, length: int, sampling: dict | None = None) -> list[int]:
        """Continue every prompt by exactly ``length`` tokens (greedy, or sampled as
        ``sampling``'s ``topk``, ``topp`` and ``temperature`` say); each one's count."""
        job: dict = {"length": length}
        if sampling:
            job["sampling"] = sampling
        return self.ask(job)["lengths"]

    def tokens(self, length: int) -> list[list[int]]:
        """The greedy tokens themselves (to compare, untimed)."""
        return self.ask({"length": length, "tokens": True})["tokens"]


def serve(answer: Callable[[dict], dict]) -> int:
    """The child's loop: each line of stdin a JSON job, ``answer(job)`` written back as one
    JSON line; an exception becomes ``{"error": "Type: message"}`` for the parent to raise."""
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except Exception as exc:  # the parent reports it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


def serve_generator(decode: Callable, ready: dict,
                    keep: Callable = lambda prompts: prompts) -> int:
    """The child's end of :class:`GeneratorProcess`: ``keep(prompts)`` is what
    ``decode(kept, job)`` later continues (a list of new tokens for each prompt); a ping
    is answered with ``ready``."""
    state: dict = {"prompts": None}

    def answer(job: dict) -> dict:
        if "prompts" in job:
            state["prompts"] = keep(job["prompts"])
            return {"prompts": len(job["prompts"])}
        if "length" in job:
            made = decode(state["prompts"], job)
            return {"tokens": made} if job.get("tokens") else {
                "lengths": [len(m) for m in made]}
        return ready

    return serve(answer)


def mean_pooled(hidden, lengths):
    """Sentence embeddings from a padded batch's hidden states (batch, length, width) as
    NumPy arrays and each text's token count: the mean over its tokens, unit length (what
    sentence-transformers' mean pooling and Normalize give)."""
    import numpy as np

    keep = (np.arange(hidden.shape[1])[None, :] < np.asarray(lengths)[:, None])[..., None]
    pooled = (hidden * keep).sum(1) / np.asarray(lengths)[:, None]
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def text_tokenizer(folder: str, max_tokens: int):
    """The fast tokenizer of a transformers folder (its ``tokenizer.json``, through the
    ``tokenizers`` library that transformers' fast tokenizers wrap, which imports no torch),
    cutting each text at ``max_tokens``: what a peer's user runs on a text before handing
    its tokens to the engine."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tokenizer.enable_truncation(max_tokens)
    tokenizer.no_padding()
    return tokenizer
