"""The commands that run a model on text: ``zoo translate`` (a source to its translation),
``zoo generate`` (a prompt to its continuation, streamed), ``zoo embed`` (texts to
sentence embeddings), ``zoo rerank`` (documents by their relevance to a query) and
``zoo classify`` (images by their labels)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from .kinds import Kind, kind_of, said


# -- zoo translate -------------------------------------------------------------------------------
def add_translate(sub) -> None:
    """``zoo translate RUN TEXT ...``."""
    p = sub.add_parser("translate", help="decode text with a trained run (translation, sort) "
                       "or a translation model from the Hub (opus-mt, T5, BART)")
    p.add_argument("run", help="a run folder (runs/translate-de-en), a run saved with "
                   "zoo save / zoo push (local-dir:PATH, hf-hub:OWNER/NAME), or a "
                   "transformers model folder (hf-hub:Helsinki-NLP/opus-mt-de-en)")
    p.add_argument("text", nargs="+", help="one or more inputs")
    p.add_argument("--beam", type=int, help="beam size (1: greedy); default the model's "
                   "own (a run's task's, an imported model's generation settings)")
    p.add_argument("--max-new-tokens", type=int, help="default the model's own (a run's "
                   "task's limit for the input's length, an imported model's max_length)")
    p.add_argument("--device")
    p.add_argument("--int8", action="store_true", help="decode with the model quantized to "
                   "int8 (zoo.quantize: int8 linear layers, CPU)")
    p.set_defaults(func=cmd_translate)


def cmd_translate(args: argparse.Namespace) -> int:
    """Decode each input with the model the name names (:func:`zoo.loading.load`: a run's,
    a saved run's, an imported folder's), by its own tokenizer and generation settings."""
    from .decoding.text import translate
    from .derived import fixed_weights
    from .loading import load

    if args.int8 and args.device not in (None, "cpu"):
        raise SystemExit("zoo translate: --int8 runs on the CPU; leave out --device")
    model = load(args.run, device=args.device)
    if kind_of(model) is not Kind.SEQ2SEQ:
        raise SystemExit(f"zoo translate: {args.run} is not a sequence-to-sequence model ("
                         f"{said(kind_of(model))}); zoo generate "
                         "continues a language model's prompts")
    if args.int8:
        from .quantization import quantize

        model = quantize(model)  # on the CPU: --device was checked above
    changes = {} if args.beam is None else {"num_beams": args.beam}
    if args.max_new_tokens is not None:
        changes["max_new_tokens"] = args.max_new_tokens
    with fixed_weights(model):  # the weights checked once for all the inputs
        for line in translate(model, args.text, **changes):
            print(line)
    return 0


def native_decision(name: str) -> str:
    """Whether the native step decodes the model ``name`` names, and why not: what its one
    gate (``model.native_plan()``, :class:`zoo.plugin_api.StaticDecoding`) returns.
    Nothing is decoded; a call still checks its own rows and dtype."""
    from .kinds import StaticDecoding
    from .loading import load

    model = load(name).eval()
    kind = kind_of(model)
    if kind is None or not kind.generates:
        return (f"the native step decodes sequence-to-sequence and language models; this is "
                f"{said(kind)}")
    if not isinstance(model, StaticDecoding):
        return (f"its architecture ({type(model).__name__}) has no native step (it gives no "
                "native_plan())")
    plan = model.native_plan()
    if not plan:
        return f"the native step does not run this model: {plan.reason}"
    return (f"the native step runs this model: {len(plan['layers'])} layers in one call "
            "a step")


def parse_sets(pairs: list[str]) -> dict:
    """``--set key=value`` pairs, each value read as YAML (bounded, like a recipe file)."""
    from .recipe import parse_value

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"zoo: --set takes key=value (e.g. norm=rmsnorm), got {pair!r}")
        overrides[key] = parse_value(value, f"--set {key}")
    return overrides


# -- zoo generate --------------------------------------------------------------------------------
SAMPLING = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff",
            "eta_cutoff")
"""The options that mean sampling: giving one samples, unless --greedy."""


def add_generate(sub) -> None:
    """``zoo generate MODEL PROMPT ...``."""
    p = sub.add_parser("generate", help="continue prompts with a language model (GPT-2, "
                       "Llama, Qwen2, Mistral from the Hub, or a trained run), streamed")
    p.add_argument("model", help="a transformers folder (local-dir:PATH, hf-hub:OWNER/NAME) "
                   "or a run folder trained on text")
    p.add_argument("prompt", nargs="+", help="one or more prompts; - reads one prompt per "
                   "line of standard input")
    add_generation_options(p)
    p.add_argument("--only-new", action="store_true", help="print only the new text, not "
                   "the prompt before it")
    p.add_argument("--device")
    p.add_argument("--dtype", choices=("fp32", "int8", "int4"), default="fp32",
                   help="the weights decoded with, on the CPU: int8 (int8 weights and "
                   "activations: zoo.quantize), int4 (weights alone in 4-bit groups of 32, "
                   "as llama.cpp's q4_0: zoo.quantize(model, 'int4')); default fp32, the "
                   "model's own")
    p.set_defaults(func=cmd_generate)


def add_generation_options(p) -> None:
    """The generation settings ``zoo generate`` and ``zoo chat`` take (read back by
    :func:`generation_changes`)."""
    p.add_argument("--max-new-tokens", type=int, help="default the model's own settings")
    p.add_argument("--temperature", type=float, help="sample at this temperature")
    p.add_argument("--top-k", type=int, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, help="sample among the most likely tokens holding "
                   "this probability (nucleus sampling)")
    p.add_argument("--min-p", type=float, help="sample among tokens at least this times as "
                   "likely as the most likely")
    p.add_argument("--typical-p", type=float, help="sample among the most typical tokens "
                   "holding this probability (locally typical sampling)")
    p.add_argument("--epsilon-cutoff", type=float, help="sample among tokens at least this "
                   "probable (epsilon sampling)")
    p.add_argument("--eta-cutoff", type=float, help="sample among tokens above this "
                   "entropy-dependent cutoff (eta sampling)")
    p.add_argument("--repetition-penalty", type=float)
    p.add_argument("--seed", type=int, help="the sampler's seed: a run repeats exactly")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other generation setting by name, a plugin's decoding rule's "
                   "too (--set no_repeat_ngram_size=3)")
    p.add_argument("--beam", type=int, help="beam search of this many beams (not streamed)")
    choice = p.add_mutually_exclusive_group()
    choice.add_argument("--sample", action="store_true", help="sample (the model's own "
                        "filters), as --temperature and the other sampling options do")
    choice.add_argument("--greedy", action="store_true", help="the most likely token each "
                        "step, whatever the model's own settings say")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="end a continuation right after this text (repeatable)")


def input_lines() -> Iterator[str]:
    """Standard input's lines as they come, read as UTF-8; a line that is not is one
    RecipeError naming it (not a UnicodeDecodeError)."""
    from .errors import RecipeError

    raw = getattr(sys.stdin, "buffer", None)
    if raw is None:  # a text stream put in its place (a caller's own)
        yield from (line.rstrip("\n") for line in sys.stdin)
        return
    for number, line in enumerate(iter(raw.readline, b""), 1):
        try:
            yield line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise RecipeError(f"standard input's line {number} is not UTF-8 (byte "
                              f"0x{line[exc.start]:02x} at {exc.start}): give the texts as "
                              "UTF-8") from None


def _prompts(given: list[str], command: str = "generate") -> list[str]:
    prompts = []
    for prompt in given:
        if prompt == "-":
            prompts += [line for line in input_lines() if line.strip()]
        else:
            prompts.append(prompt)
    if not prompts:
        raise SystemExit(f"zoo {command}: no text (standard input was empty)")
    return prompts


def generation_changes(args: argparse.Namespace) -> dict:
    """The generation settings :func:`add_generation_options`' arguments give."""
    changes = {name: getattr(args, name) for name in (*SAMPLING, "repetition_penalty", "seed",
                                                      "max_new_tokens")
               if getattr(args, name) is not None}
    changes.update(parse_sets(args.set))
    if args.beam is not None:
        changes.update(num_beams=args.beam, do_sample=False)
    elif args.greedy:
        changes.update(do_sample=False, num_beams=1)
    elif args.sample or any(getattr(args, name) is not None for name in SAMPLING):
        changes.update(do_sample=True, num_beams=1)
    return changes


def language_model(name: str, device, command: str = "generate"):
    """The language model ``name`` names (:func:`zoo.loading.load`), carrying its text."""
    from .loading import load

    model = load(name, device=device)
    if kind_of(model) is not Kind.LANGUAGE_MODEL:
        raise SystemExit(f"zoo {command}: {name} is not a language model ("
                         f"{said(kind_of(model))}); zoo translate "
                         "decodes sequence-to-sequence models")
    return model


def cmd_generate(args: argparse.Namespace) -> int:
    """Continue each prompt, streaming its new text as it is chosen (all of it at once
    for beam search)."""
    from .decoding import settings_for
    from .decoding.text import complete, stream_text
    from .derived import fixed_weights

    prompts = _prompts(args.prompt)
    if args.dtype != "fp32" and args.device not in (None, "cpu"):
        raise SystemExit(f"zoo generate: --dtype {args.dtype} runs on the CPU; leave out "
                         "--device")
    model = language_model(args.model, args.device)
    if args.dtype != "fp32":
        from .quantization import quantize

        model = quantize(model, args.dtype)
    changes = generation_changes(args)
    settings_for(model, None, **changes)  # a setting out of range: one zoo error, first
    with fixed_weights(model):  # the weights checked once for all the prompts
        for prompt in prompts:
            if not args.only_new:
                print(prompt, end="", flush=True)
            if args.beam is not None and args.beam > 1:
                print(complete(model, [prompt], stop=args.stop, **changes)[0], end="")
            else:
                for piece in stream_text(model, prompt, stop=args.stop, **changes):
                    print(piece, end="", flush=True)
            print(flush=True)
    return 0


# -- zoo embed -----------------------------------------------------------------------------------
def add_embed(sub) -> None:
    """``zoo embed MODEL TEXT ...``."""
    p = sub.add_parser("embed", help="sentence embeddings of texts with an encoder (BERT, "
                       "a sentence-transformers folder such as all-MiniLM-L6-v2), as JSON lines")
    p.add_argument("model", help="a transformers or sentence-transformers folder "
                   "(local-dir:PATH, hf-hub:OWNER/NAME)")
    p.add_argument("text", nargs="+", help="one or more texts; - reads one text per line of "
                   "standard input")
    p.add_argument("--batch-size", type=int, default=32, help="texts encoded together, of "
                   "similar length (32)")
    p.add_argument("--bf16", action="store_true", help="encode in bf16 (the weights converted "
                   "once): the fastest on a CPU with bf16 units (AMX, AVX512-BF16), emulated "
                   "and slow elsewhere")
    p.add_argument("--device")
    p.set_defaults(func=cmd_embed)


def cmd_embed(args: argparse.Namespace) -> int:
    """One JSON line per text: ``{"text": ..., "embedding": [...]}``, in the order given."""
    import json

    from .embedding import embed
    from .loading import load

    texts = _prompts(args.text, "embed")
    model = load(args.model, device=args.device)
    if kind_of(model) is not Kind.ENCODER:
        raise SystemExit(f"zoo embed: {args.model} is not an encoder (BERT, "
                         "sentence-transformers); zoo embed pools an encoder's hidden states")
    if args.bf16:
        import torch

        from .hardware import detect

        why = detect().why_no_bf16(args.device or "cpu")
        if why:
            print(f"zoo embed: warning: --bf16 with {why}", file=sys.stderr)
        model = model.to(torch.bfloat16)
    vectors = embed(model, texts, batch_size=args.batch_size)
    for text, vector in zip(texts, vectors.float().tolist()):
        print(json.dumps({"text": text, "embedding": [round(v, 7) for v in vector]}))
    return 0


# -- zoo rerank ----------------------------------------------------------------------------------
def add_rerank(sub) -> None:
    """``zoo rerank MODEL QUERY DOCUMENT ...``."""
    p = sub.add_parser("rerank", help="documents by their relevance to a query, scored by a "
                       "cross-encoder (ms-marco-MiniLM-L6-v2, bge-reranker), as JSON lines")
    p.add_argument("model", help="a cross-encoder folder: an encoder with a classification "
                   "head (local-dir:PATH, hf-hub:OWNER/NAME)")
    p.add_argument("query", help="the query")
    p.add_argument("document", nargs="+", help="one or more documents; - reads one document "
                   "per line of standard input")
    p.add_argument("--top-k", type=int, help="print only the best K documents")
    p.add_argument("--batch-size", type=int, default=32, help="pairs encoded together, of "
                   "similar length (32)")
    p.add_argument("--device")
    p.set_defaults(func=cmd_rerank)


def cmd_rerank(args: argparse.Namespace) -> int:
    """One JSON line per document, the most relevant first: ``{"rank": 1, "index": i,
    "score": s, "text": ...}`` (``index``: its place among the documents given, from 0);
    a head of several labels prints ``scores``, in the order given."""
    import json

    from .loading import load
    from .reranking import rerank

    documents = _prompts(args.document, "rerank")
    if args.top_k is not None and args.top_k < 1:
        raise SystemExit(f"zoo rerank: --top-k is at least 1, not {args.top_k}")
    model = load(args.model, device=args.device)
    scores = rerank(model, args.query, documents, batch_size=args.batch_size)
    if scores.ndim > 1:
        for i, (text, row) in enumerate(zip(documents, scores.tolist())):
            print(json.dumps({"index": i, "scores": [round(v, 7) for v in row], "text": text}))
        return 0
    order = sorted(range(len(documents)), key=lambda i: -scores[i].item())[:args.top_k]
    for rank, i in enumerate(order, 1):
        print(json.dumps({"rank": rank, "index": i, "score": round(scores[i].item(), 7),
                          "text": documents[i]}))
    return 0


# -- zoo classify --------------------------------------------------------------------------------
def add_classify(sub) -> None:
    """``zoo classify MODEL IMAGE ... [--labels LABEL ...]``."""
    p = sub.add_parser("classify", help="images by their labels: zero-shot by a CLIP against "
                       "--labels, or by an image classifier (ViT) over its own classes, as "
                       "JSON lines")
    p.add_argument("model", help="a CLIP or an image classifier (local-dir:PATH, "
                   "hf-hub:OWNER/NAME)")
    p.add_argument("image", nargs="+", help="image files (PNG, JPEG, ...)")
    p.add_argument("--labels", nargs="+", help="the labels to choose from (CLIP), each "
                   "put in --template")
    p.add_argument("--template", default="This is a photo of {}.",
                   help="the text each label is put in ({} is the label)")
    p.add_argument("--top-k", type=int, help="print only the best K labels of each image")
    p.add_argument("--device")
    p.set_defaults(func=cmd_classify)


def cmd_classify(args: argparse.Namespace) -> int:
    """One JSON line per image, in the order given: ``{"image": path, "labels": [{"label":
    ..., "score": ...}, ...]}``, the most probable label first."""
    import json

    from .classifying import class_names, classify_image
    from .loading import load

    if args.top_k is not None and args.top_k < 1:
        raise SystemExit(f"zoo classify: --top-k is at least 1, not {args.top_k}")
    model = load(args.model, device=args.device)
    if kind_of(model) is Kind.IMAGE_TEXT and not args.labels:
        raise SystemExit(f"zoo classify: {args.model} is a CLIP: give the labels to choose "
                         "from, --labels cat dog ...")
    probabilities = classify_image(model, args.image, args.labels, template=args.template)
    names = args.labels if kind_of(model) is Kind.IMAGE_TEXT else class_names(model)
    for path, row in zip(args.image, probabilities.tolist()):
        order = sorted(range(len(row)), key=lambda i: -row[i])[:args.top_k]
        print(json.dumps({"image": path, "labels": [
            {"label": names[i], "score": round(row[i], 6)} for i in order]}))
    return 0
