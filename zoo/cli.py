"""The ``zoo`` command line. Importing this module imports no torch; commands
that need it import it when they run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import __version__


def _parse_sets(pairs: list[str]) -> dict[str, Any]:
    import yaml

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"zoo: --set takes key=value (e.g. norm=rmsnorm), got {pair!r}")
        overrides[key] = yaml.safe_load(value)
    return overrides


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def cmd_list(args: argparse.Namespace) -> int:
    from .recipe import get_recipe, list_recipes

    if args.train:
        import fnmatch

        from .training.config import get_train_recipe, list_train_recipes

        recipes = [get_train_recipe(n) for n in list_train_recipes()
                   if fnmatch.fnmatch(n, args.pattern)]
        rows = [[r.name, r.task.name, r.model.recipe, r.description[:60]] for r in recipes]
        print(_table(rows, ["training recipe", "task", "model", "description"]))
        return 0

    names = list_recipes(args.pattern, pretrained=args.pretrained)
    if not names:
        print(f"No recipe matches {args.pattern!r}.", file=sys.stderr)
        return 1
    rows = []
    for name in names:
        recipe = get_recipe(name)
        if args.pretrained:
            rows.append([name, recipe.architecture.name, recipe.weights.hub])
        else:
            rows.append([name, recipe.architecture.name, recipe.description.split(":")[0][:70]])
    print(_table(rows, ["recipe", "architecture",
                        "published weights" if args.pretrained else "description"]))
    return 0


def cmd_save(args: argparse.Namespace) -> int:
    from .artifact import save_pretrained

    source = Path(args.source)
    if (source / "train.yaml").is_file():
        from .training.runs import load_run

        model, run = load_run(source).model, source
    else:
        from .builder import build

        model, run = build(args.source, pretrained=args.pretrained or None,
                           **_parse_sets(args.set)), None
    out = save_pretrained(model, args.out, run=run, max_shard_size=args.max_shard_size)
    print(f"Saved {args.source} to {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from .hub import push_to_hub

    source: Any = args.source
    if not Path(source).exists():
        from .builder import build

        source = build(source, pretrained=args.pretrained or None)
    info = push_to_hub(source, args.repo, private=args.private or None, revision=args.revision,
                       commit_message=args.message, max_shard_size=args.max_shard_size)
    print(f"Pushed {args.source} to {args.repo}: {info.commit_url}")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    from .hub import HF_HUB_PREFIX, download, parse_hub_name

    name = args.name if args.name.startswith(HF_HUB_PREFIX) else HF_HUB_PREFIX + args.name
    repo_id, revision = parse_hub_name(name)
    folder = download(repo_id, revision)
    from .artifact import copy_artifact, load_artifact

    load_artifact(folder, source=name)  # the checks zoo.build makes: it loads, or an error now
    if args.out:
        folder = copy_artifact(folder, args.out)
    print(folder)
    return 0


def cmd_components(args: argparse.Namespace) -> int:
    from .api import list_components, list_families

    families = [args.family] if args.family else [f.name for f in list_families()]
    rows = []
    for family in families:
        for c in list_components(family, args.pattern):
            rows.append([family, c.name, c.plugin, c.capability_summary(), c.description])
    print(_table(rows, ["family", "name", "plugin", "capabilities", "description"]))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    import torch

    from .builder import footprint, format_bytes, memory_available
    from .recipe import dump_recipe, get_recipe
    from .resolver import resolve

    resolved = resolve(get_recipe(args.name), _parse_sets(args.set))
    recipe = resolved.recipe
    fp = footprint(resolved)
    print(f"# {recipe.name}: {recipe.description}\n")
    print(dump_recipe(recipe))
    rows = [["architecture", resolved.architecture.name, resolved.architecture.plugin,
             resolved.architecture.description]]
    rows += [[slot, p.component.name, p.component.plugin, p.component.description]
             for slot, p in resolved.parts.items()]
    print(_table(rows, ["slot", "component", "plugin", "description"]))
    print()
    print(f"parameters: {fp.parameters:,}")
    for dtype in (torch.float32, torch.bfloat16):
        size = format_bytes(fp.bytes_in(dtype))
        print(f"weights in {str(dtype).removeprefix('torch.')}: {size}")
    print(f"memory on this machine: {format_bytes(memory_available())}")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from .plugin_manager import list_plugins

    infos = list_plugins()
    if args.json:
        print(json.dumps([
            {"name": i.name, "module": i.module, "distribution": i.distribution,
             "version": i.version, "registered": [f"{f}:{n}" for f, n in i.registered],
             "error": i.error}
            for i in infos
        ], indent=2))
        return 0
    rows = []
    for i in infos:
        what = i.error and f"FAILED: {i.error}" or ", ".join(f"{f}:{n}" for f, n in i.registered)
        rows.append([i.name, i.distribution or "-", i.version or "-", what or "(nothing)"])
    print(_table(rows, ["plugin", "distribution", "version", "registered"]))
    return 0


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


def cmd_bench_attention(args: argparse.Namespace) -> int:
    import torch

    from .bench import attention as bench
    from .registry import registry

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
        from .recipe import atomic_write_text

        atomic_write_text(args.json, json.dumps(rows, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        bench.plot(results, args.plot, title=f"attention, d_model {args.d_model}, "
                   f"{args.heads} heads, batch {args.batch}, {mode}, {args.device}")
        print(f"wrote {args.plot}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .training.loop import Interrupted, train

    if args.resume and args.recipe:
        raise SystemExit("zoo: give a recipe or --resume RUN, not both")
    if not args.resume and not args.recipe:
        raise SystemExit("zoo train: name a recipe (zoo train sort) or --resume RUN; "
                         "built-in recipes: " + ", ".join(_train_recipes()))
    try:
        result = train(args.recipe, overrides=_parse_sets(args.set), run_dir=args.out,
                       resume=args.resume, device=args.device, progress=not args.no_progress)
    except Interrupted as exc:
        print(f"zoo: {exc}", file=sys.stderr)
        return 130
    if result.metrics:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
        print(f"{result.run_dir}: step {result.step}; test: {shown}")
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from .training.runs import load_run

    run = load_run(args.run, device=args.device)
    if not hasattr(run.task, "translate"):
        raise SystemExit(f"zoo: the task of {args.run} ({run.recipe.task.name}) does not "
                         "decode text")
    for line in run.task.translate(run.model, args.text, beam_size=args.beam,
                                   max_new_tokens=args.max_new_tokens):
        print(line)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_run

    print(f"wrote {plot_run(args.run, args.out)}")
    return 0


def cmd_attention_map(args: argparse.Namespace) -> int:
    import torch

    from .decoding import greedy
    from .plots import attention_weights, plot_attention
    from .training.runs import load_run

    run = load_run(args.run, device=args.device)
    task, model = run.task, run.model
    if not hasattr(task, "parse_input"):
        raise SystemExit(f"zoo: attention maps are drawn for sequence tasks; {args.run} is a "
                         f"{run.recipe.task.name} run")
    device = next(model.parameters()).device
    src = torch.tensor([task.parse_input(args.text)], device=device)
    out = greedy(model, src, max_new_tokens=args.max_new_tokens, bos_id=task.bos_id,
                 eos_id=task.eos_id)[0].tolist()
    if task.eos_id in out:
        out = out[: out.index(task.eos_id) + 1]
    tgt_in = torch.tensor([[task.bos_id, *out[:-1]]] if out else [[task.bos_id]], device=device)
    weights = attention_weights(model, src, tgt_in)
    depth = len(next(iter(weights.values())))
    layers = range(depth) if args.layer == "all" else [int(args.layer)]
    print(f"output: {task.render_output(out)}")
    for layer in layers:
        target = args.out or f"{args.run}/attention.png"
        if args.layer == "all":
            target = str(Path(target).with_name(f"{Path(target).stem}-layer{layer}.png"))
        path = plot_attention(weights, task.token_strings(src[0].tolist()),
                              task.token_strings(tgt_in[0].tolist()), target, layer=layer)
        print(f"wrote {path}")
    return 0


def cmd_plot_positions(args: argparse.Namespace) -> int:
    from .plots import plot_positions

    print(f"wrote {plot_positions(args.out, d_model=args.d_model, length=args.length)}")
    return 0


def _train_recipes() -> list[str]:
    from .training.config import list_train_recipes

    return list_train_recipes()


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoo",
        description="A plugin-based zoo of Transformer models: list recipes and "
        "components, inspect models, see the installed plugins.",
    )
    parser.add_argument("--version", action="version", version=f"zoo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="list the recipes (named models)")
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 'vit-*'")
    p.add_argument("--train", action="store_true", help="list the training recipes instead "
                   "(for zoo train)")
    p.add_argument("--pretrained", action="store_true", help="only recipes with published "
                   "weights (zoo.build(name, pretrained=True))")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("save", help="save a model, run or recipe as config.json + "
                       "model.safetensors + README.md")
    p.add_argument("source", help="a run folder (runs/sort), a recipe, hf-hub:owner/repo")
    p.add_argument("out", help="the folder to write")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--pretrained", action="store_true", help="with the recipe's published weights")
    p.add_argument("--max-shard-size", default="5GB", help="shard weights above this (5GB)")
    p.set_defaults(func=cmd_save)

    p = sub.add_parser("push", help="publish a run, saved folder or recipe to the Hugging Face "
                       "Hub (HF_TOKEN, HF_ENDPOINT)")
    p.add_argument("source", help="a run folder (runs/sort), a save_pretrained folder, a recipe")
    p.add_argument("repo", help="owner/name on the Hub")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.add_argument("--revision", help="branch to push to (created from main if needed)")
    p.add_argument("--message", help="commit message")
    p.add_argument("--pretrained", action="store_true", help="a recipe with its published weights")
    p.add_argument("--max-shard-size", default="5GB")
    p.set_defaults(func=cmd_push)

    p = sub.add_parser("pull", help="download a model from the Hub into the cache (or --out) "
                       "and check that it loads")
    p.add_argument("name", help="owner/name or hf-hub:owner/name[@revision]")
    p.add_argument("--out", help="also save a copy in this folder")
    p.set_defaults(func=cmd_pull)

    p = sub.add_parser("components", help="list registered components by family")
    p.add_argument("family", nargs="?", help="attention, kernel, positional, norm, ffn, block, ...")
    p.add_argument("pattern", nargs="?", default="*")
    p.set_defaults(func=cmd_components)

    p = sub.add_parser("info", help="a recipe: its components, parameters, memory")
    p.add_argument("name", help="recipe name or recipe file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override, e.g. --set norm=rmsnorm --set encoder_layers=3")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("plugins", help="installed plugins: what each registered, or its error")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("train", help="train a recipe (zoo train sort), or --resume a run")
    p.add_argument("recipe", nargs="?", help="a training recipe name (sort, translate-de-en, "
                   "fashion-mnist-vit) or YAML file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override: model.attention=rope, train.steps=2000, optimizer.lr=5e-4, "
                   "task.seq_len=10")
    p.add_argument("--out", help="run folder (default runs/NAME, or runs/NAME-2 when taken)")
    p.add_argument("--resume", metavar="RUN", help="continue the run in this folder")
    p.add_argument("--device", help="cpu, cuda, cuda:1 (default: cuda when there is one)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("translate", help="decode text with a trained run (translation, sort)")
    p.add_argument("run", help="a run folder (runs/translate-de-en)")
    p.add_argument("text", nargs="+", help="one or more inputs")
    p.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--device")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("plot", help="PNG curves of a run's loss, learning rate and metrics")
    p.add_argument("run")
    p.add_argument("--out", help="PNG path (default RUN/curves.png)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("attention-map", help="PNG of a trained model's attention for an input")
    p.add_argument("run")
    p.add_argument("text", help="the input, e.g. 'Was wird jetzt aus uns?' or '3 1 4 1 5'")
    p.add_argument("--layer", default="-1", help="which layer (default: the last), or 'all' "
                   "for one PNG per layer")
    p.add_argument("--out", help="PNG path (default RUN/attention.png)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--device")
    p.set_defaults(func=cmd_attention_map)

    p = sub.add_parser("plot-positions", help="PNG of the sinusoidal position encoding")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--length", type=int, default=100)
    p.add_argument("--out", default="positional_encoding.png")
    p.set_defaults(func=cmd_plot_positions)

    p = sub.add_parser("bench", help="benchmarks, side by side in one run")
    bench = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    b = bench.add_parser("attention", help="time and peak memory of each attention vs length")
    b.add_argument("--mechanisms", help="comma-separated attention[:kernel], default: "
                   "vanilla:eager,vanilla:sdpa,sliding-window,bigbird,performer,linear")
    b.add_argument("--lengths", type=_int_list, default=[256, 512, 1024, 2048, 4096, 8192, 16384],
                   help="comma-separated sequence lengths (default 256 ... 16384)")
    b.add_argument("--batch", type=int, default=1)
    b.add_argument("--d-model", type=int, default=512)
    b.add_argument("--heads", type=int, default=8)
    b.add_argument("--causal", action="store_true", help="causal self-attention")
    b.add_argument("--backward", action="store_true", help="time forward and backward")
    b.add_argument("--repeat", type=int, default=3, help="timed calls per point (median)")
    b.add_argument("--memory-bound", type=_size, default=_size("8GiB"),
                   help="stop a mechanism before it would pass this (default 8GiB)")
    b.add_argument("--device", default="cpu")
    b.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    b.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    b.add_argument("--json", metavar="OUT", help="write the measurements as JSON")
    b.add_argument("--plot", metavar="OUT.png", help="write a PNG plot")
    b.add_argument("-v", "--verbose", action="store_true", help="say what runs")
    b.set_defaults(func=cmd_bench_attention)
    for name, text in (
        ("train", "transformer-base training steps: zoo vs torch.nn.Transformer and Marian"),
        ("decode", "greedy and beam-4 decoding: zoo vs Marian's generate and "
                   "torch.nn.Transformer"),
        ("vit", "ViT inference and training: zoo vs timm"),
        ("startup", "zoo --help, import zoo, zoo.build('transformer-base') in fresh processes"),
        ("all", "train, decode, vit and startup in one run"),
    ):
        b = bench.add_parser(name, help=text)
        _bench_arguments(b)
        b.set_defaults(func=cmd_bench_models)
    return parser


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    from .bench.run import add_arguments

    add_arguments(parser)


def cmd_bench_models(args: argparse.Namespace) -> int:
    from .bench.run import main as bench_main

    return bench_main(args)


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from .errors import ZooError

    try:
        return args.func(args)
    except ZooError as exc:
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
