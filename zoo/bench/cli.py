"""``zoo bench``: its subcommands, their arguments and their handlers, together.

Importing this module imports no torch (``zoo --help`` builds its parser); each
handler imports the bench it runs."""

from __future__ import annotations

import argparse
import json
import sys


def _size(text: str) -> int:
    """'8GiB', '512MiB', '2G' or a number of bytes."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8GiB, 512MiB)") from None


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") \
            from None


def _count(text: str, least: int = 1) -> int:
    """A whole number of at least ``least`` (a batch, a length, a count of rounds)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {least} or more")
    return value


def _counts(text: str) -> list[int]:
    """A comma-separated list of whole numbers of 1 or more."""
    values = _int_list(text)
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: each is a whole number of 1 or more")
    return values


def _rounds(text: str) -> int:
    return _count(text, least=0)


MODEL_BENCHES = (
    ("train", "transformer-base training steps: zoo vs torch.nn.Transformer and Marian"),
    ("decode", "greedy and beam-4 decoding: zoo vs Marian's generate, torch.nn.Transformer "
     "and CTranslate2; a language model (--model): greedy and sampled, vs transformers and "
     "CTranslate2's Generator"),
    ("vit", "ViT inference and training: zoo vs timm"),
    ("embed", "sentence embeddings of a real all-MiniLM-L6-v2 (or --model), one and 32 "
     "texts a call: zoo vs sentence-transformers, CTranslate2's Encoder and OpenVINO"),
    ("startup", "zoo --help, import zoo, zoo.build('transformer-base') in fresh processes"),
    ("all", "train, decode, vit and startup in one run"),
)


def add_bench(sub) -> None:
    """``zoo bench attention|train|decode|vit|startup|all``."""
    p = sub.add_parser("bench", help="benchmarks, side by side in one run")
    bench = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    _attention_arguments(bench.add_parser(
        "attention", help="time and peak memory of each attention vs length"))
    for name, text in MODEL_BENCHES:
        b = bench.add_parser(name, help=text)
        _model_bench_arguments(b)
        b.set_defaults(func=cmd_bench_models)


def _attention_arguments(b) -> None:
    b.add_argument("--mechanisms", help="comma-separated attention[:kernel], default: "
                   "vanilla:eager,vanilla:sdpa,sliding-window,bigbird,performer,linear")
    b.add_argument("--lengths", type=_counts, default=[256, 512, 1024, 2048, 4096, 8192, 16384],
                   help="comma-separated sequence lengths (default 256 ... 16384)")
    b.add_argument("--batch", type=_count, default=1)
    b.add_argument("--d-model", type=_count, default=512)
    b.add_argument("--heads", type=_count, default=8)
    b.add_argument("--causal", action="store_true", help="causal self-attention")
    b.add_argument("--backward", action="store_true", help="time forward and backward")
    b.add_argument("--repeat", type=_count, default=3, help="timed calls per point (median)")
    b.add_argument("--memory-bound", type=_size, default=_size("8GiB"),
                   help="stop a mechanism before it would pass this (default 8GiB)")
    b.add_argument("--device", default="cpu")
    b.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    b.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    b.add_argument("--json", metavar="OUT", help="write the measurements as JSON")
    b.add_argument("--plot", metavar="OUT.png", help="write a PNG plot")
    b.add_argument("-v", "--verbose", action="store_true", help="say what runs")
    b.set_defaults(func=cmd_bench_attention)


def _thread_counts(text: str) -> list[int]:
    """``--threads``: one count of threads, or several separated by commas."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--threads is a number of threads of at least 1, "
                                         f"or several separated by commas (1,2), not {text!r}")
    return list(dict.fromkeys(counts))


def cmd_bench_attention(args: argparse.Namespace) -> int:
    """Time each attention mechanism as sequences grow; print, and write JSON and a PNG."""
    import torch

    from ..files import atomic_write_text
    from ..registry import registry
    from . import attention as bench

    mechanisms = args.mechanisms.split(",") if args.mechanisms else list(bench.MECHANISMS)
    for spec in mechanisms:  # unknown names fail here, with suggestions, before any work
        name, kernel = bench.parse_mechanism(spec)
        registry.get("attention", name)
        registry.get("kernel", kernel)
    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    mode = "forward+backward" if args.backward else "forward"
    print(f"attention bench: batch {args.batch}, d_model {args.d_model}, {args.heads} heads, "
          f"{'causal' if args.causal else 'bidirectional'}, {mode}, {args.dtype}, "
          f"{args.device}, {torch.get_num_threads()} threads, memory bound "
          f"{args.memory_bound / 2**30:.1f} GiB", flush=True)
    results = bench.run(
        mechanisms, args.lengths, batch=args.batch, d_model=args.d_model, n_heads=args.heads,
        causal=args.causal, backward=args.backward, repeat=args.repeat,
        memory_bound=args.memory_bound, device=args.device, dtype=dtype,
        progress=(lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
        if args.verbose else None,
    )
    print(bench.table(results))
    if args.json:
        rows = bench.records(results, dtype=dtype, backward=args.backward, device=args.device)
        atomic_write_text(args.json, json.dumps(rows, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        bench.plot(results, args.plot, title=f"attention, d_model {args.d_model}, "
                   f"{args.heads} heads, batch {args.batch}, {mode}, {args.device}")
        print(f"wrote {args.plot}")
    return 0


ISA_ENVIRONMENT = {
    "avx2": ("an AVX2 CPU",
             {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
              "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"}),
    "avx512": ("an AVX-512 CPU",
               {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512", "CT2_FORCE_CPU_ISA": "AVX512"}),
    # AVX-512 with VNNI, BF16 and FP16, but no AMX tiles (oneDNN's ISA just below AMX's;
    # MKL's AVX512_E1 is AVX-512 with VNNI): an AMX Xeon as an AVX-512 EPYC with bf16 runs
    "no-amx": ("this CPU without its AMX tiles",
               {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_FP16",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512_E1", "CT2_FORCE_CPU_ISA": "AVX512"}),
}
"""Each ``--isa``: how ``zoo bench`` names the CPU it dispatches as, and what each library
reads to dispatch as on a CPU with at most that instruction set (zoo reads oneDNN's too:
:func:`zoo.hardware.detect_cpu` counts no AMX below it)."""


def cmd_bench_models(args: argparse.Namespace) -> int:
    """zoo side by side with its peers (train, decode, vit, startup, all); with ``--isa``,
    the same command again in a process whose libraries dispatch at most that ISA
    (CTranslate2's own process inherits it)."""
    import os
    import subprocess

    as_on, wanted = ISA_ENVIRONMENT.get(args.isa, (None, None))
    if wanted and os.environ.get("ZOO_BENCH_ISA") != args.isa:
        env = {**os.environ, **wanted, "ZOO_BENCH_ISA": args.isa}
        print(f"zoo bench: dispatching as on {as_on}: "
              + " ".join(f"{k}={v}" for k, v in wanted.items()), flush=True)
        return subprocess.call([sys.executable, "-m", "zoo", *sys.argv[1:]], env=env)
    from .run import main

    return main(args)


def _model_bench_arguments(parser) -> None:
    parser.add_argument("--json", metavar="OUT", help="write one JSON object per measured "
                        "implementation (bench, impl, dtype, mode, throughput, unit, ...)")
    parser.add_argument("--plot", metavar="OUT.png", help="bar chart of each peer vs zoo")
    parser.add_argument("--repeats", type=_count, default=5, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=_rounds, default=1)
    parser.add_argument("--impls", help="comma-separated: zoo,torch,marian,ct2 (decode; a "
                        "language model: zoo,transformers,ct2,openvino,llama.cpp), timm (vit), "
                        "zoo,sentence-transformers,ct2,openvino (embed)")
    parser.add_argument("--dtypes", help="comma-separated: fp32,bf16,int8 (int8: decode and "
                        "vit inference; decode's default is fp32 alone)")
    parser.add_argument("--modes", help="decode: greedy,beam4 (a language model: "
                        "greedy,sample); vit: inference,train; embed: batch1,batch32")
    parser.add_argument("--batch", type=_count, help="default 16 (train, decode), 8 (vit)")
    parser.add_argument("--length", type=_count, help="source (and target) length, default 64")
    parser.add_argument("--new-tokens", type=_count, default=64, help="decode: tokens made")
    parser.add_argument("--latency", type=_counts, default=[20, 20], metavar="SRC,NEW",
                        help="decode: also time one sentence at a time, a SRC-token source "
                        "and NEW tokens made (default 20,20)")
    parser.add_argument("--no-latency", action="store_true",
                        help="decode: leave out the one-sentence (latency) rows")
    parser.add_argument("--isa", choices=["native", *ISA_ENVIRONMENT], default="native",
                        help="run as on a CPU with this instruction set at most (no-amx: "
                        "this CPU without its AMX tiles): every library is told to dispatch "
                        "no further (torch, oneDNN, MKL, CTranslate2), in a process of its own")
    parser.add_argument("--vocab", type=_count, default=8000)
    parser.add_argument("--model", help="decode: a saved or imported model instead of "
                        "transformer-base (local-dir:PATH, hf-hub:Helsinki-NLP/opus-mt-de-en), "
                        "or a language model (llama-110m-shape, hf-hub:openai-community/gpt2); "
                        "its own vocabulary replaces --vocab")
    parser.add_argument("--vit-recipe", default="vit-small-patch16-224")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--kernel", help="zoo's attention kernel (sdpa, eager, xformers, auto)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile every implementation (train, vit)")
    parser.add_argument("--peak-tflops", type=float, help="bf16 peak for MFU instead of the "
                        "measured one (a card's datasheet figure, e.g. 989 for an H200)")
    parser.add_argument("--threads", type=_thread_counts, help="torch threads, or a "
                        "comma-separated list (1,2): each implementation is timed at each and "
                        "its fastest is set against zoo's fastest (default: torch's)")
    parser.add_argument("--wait", type=float, default=60.0,
                        help="seconds to wait for a quiet machine (default 60)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress lines (which case warms up, rounds left)")
