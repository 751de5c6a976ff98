"""The ``zoo`` command line. Importing this module imports no torch; commands
that need it import it when they run.

Each command is a pair: ``add_NAME(sub)`` declares its arguments, and
``cmd_NAME(args)`` right below it runs it. ``zoo bench`` lives in
:mod:`zoo.bench.cli`. A new command is one more pair here and one line in
:data:`COMMANDS`.

A command refuses its arguments with ``raise SystemExit("zoo NAME: why")`` or one of
zoo's errors; :func:`main` prints either as one line, ``zoo: error: why``, and exits 2,
and prints each warning as one line, once
(:func:`zoo.cli_warnings.one_line_warnings`).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from .bench.cli import add_bench
from .cli_chat import add_chat
from .cli_warnings import one_line_warnings
from .serve.cli import add_serve
from .cli_decode import (add_classify, add_embed, add_generate, add_rerank, add_translate,
                         parse_sets)
from .version import __version__


def _width() -> int | None:
    """The columns a table may use: ``COLUMNS`` when set, the terminal's width when
    standard output is one, else no limit (a pipe or a file gets every character)."""
    import shutil

    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _table(rows: list[list[str]], header: list[str], *, whole: int = 2) -> str:
    """Columns padded to their widest cell. Where the terminal is narrower, the columns
    after the first ``whole`` are cut (with "…"), the last ones first, so that every
    line fits it."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    limit = _width()
    for i in range(len(widths) - 1, whole - 1, -1):
        excess = sum(widths) + 2 * (len(widths) - 1) - (limit or sys.maxsize)
        if excess <= 0:
            break
        widths[i] = max(widths[i] - excess, len(header[i]), 8)
        rows = [[*r[:i], r[i] if len(r[i]) <= widths[i] else r[i][: widths[i] - 1] + "\u2026",
                 *r[i + 1:]] for r in rows]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


# -- zoo list ------------------------------------------------------------------------------------
LISTED = "recipes"
"""The word ``zoo list`` takes before its pattern, as ``zoo components`` takes a family:
``zoo list recipes`` lists them all, as ``zoo list`` does."""


def add_list(sub) -> None:
    """``zoo list [recipes] [PATTERN] [--train] [--pretrained]``."""
    p = sub.add_parser("list", help="list the recipes (named models)")
    p.add_argument("pattern", nargs="*", metavar="[recipes] PATTERN",
                   help="fnmatch pattern, e.g. 'vit-*' (default: every recipe)")
    p.add_argument("--train", action="store_true", help="list the training recipes instead "
                   "(for zoo train)")
    p.add_argument("--pretrained", action="store_true", help="only recipes with published "
                   "weights (zoo.build(name, pretrained=True))")
    p.set_defaults(func=cmd_list)


def list_pattern(words: list[str]) -> str:
    """The pattern of ``zoo list``'s words: ``[]`` and ``["recipes"]`` are every recipe
    (``*``), ``["recipes", P]`` and ``[P]`` are ``P``."""
    if words[:1] == [LISTED]:
        words = words[1:]
    if len(words) > 1:
        raise SystemExit(f"zoo list: one pattern, not {len(words)} ({' '.join(words)}); "
                         "quote it ('vit-*') so that the shell does not expand it")
    return words[0] if words else "*"


def cmd_list(args: argparse.Namespace) -> int:
    """Print the recipes (or training recipes) matching the pattern."""
    from .recipe import catalogue_recipe, list_recipes, recipe_plugin

    args.pattern = list_pattern(args.pattern)
    if args.train:
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
        recipe = catalogue_recipe(name)
        shown = recipe.weights.hub if args.pretrained else recipe.description.split(":")[0]
        rows.append([name, recipe.architecture.name, recipe_plugin(name), shown])
    print(_table(rows, ["recipe", "architecture", "plugin",
                        "published weights" if args.pretrained else "description"]))
    return 0


# -- zoo save ------------------------------------------------------------------------------------
def add_save(sub) -> None:
    """``zoo save SOURCE OUT``."""
    p = sub.add_parser("save", help="save a model, run or recipe as config.json + "
                       "model.safetensors + README.md")
    p.add_argument("source", help="a run folder (runs/sort), a recipe, hf-hub:owner/repo")
    p.add_argument("out", help="the folder to write")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--pretrained", action="store_true", help="with the recipe's published weights")
    p.add_argument("--max-shard-size", default="5GB", help="shard weights above this (5GB)")
    p.set_defaults(func=cmd_save)


def cmd_save(args: argparse.Namespace) -> int:
    """Save a run, a recipe or a saved model as a folder."""
    from .saving import save_pretrained
    from .training.runs import is_run, load_run

    if is_run(args.source):
        model, run = load_run(args.source).model, args.source
    else:
        from .builder import build

        model, run = build(args.source, pretrained=args.pretrained or None,
                           **parse_sets(args.set)), None
    out = save_pretrained(model, args.out, run=run, max_shard_size=args.max_shard_size)
    print(f"Saved {args.source} to {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


# -- zoo push ------------------------------------------------------------------------------------
def add_push(sub) -> None:
    """``zoo push SOURCE OWNER/NAME``."""
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


def cmd_push(args: argparse.Namespace) -> int:
    """Publish a run, a saved folder or a recipe's model to the Hub."""
    from .saving import push_to_hub

    source: Any = args.source
    if not Path(source).exists():
        from .builder import build

        source = build(source, pretrained=args.pretrained or None)
    info = push_to_hub(source, args.repo, private=args.private or None, revision=args.revision,
                       commit_message=args.message, max_shard_size=args.max_shard_size)
    print(f"Pushed {args.source} to {args.repo}: {info.commit_url}")
    return 0


# -- zoo pull ------------------------------------------------------------------------------------
def add_pull(sub) -> None:
    """``zoo pull OWNER/NAME [--out FOLDER] [--force]``."""
    p = sub.add_parser("pull", help="download a model from the Hub into the cache (or --out) "
                       "and check that it loads")
    p.add_argument("name", help="owner/name or hf-hub:owner/name[@revision]")
    p.add_argument("--out", help="also save a copy in this folder")
    p.add_argument("--force", action="store_true", help="download every file again, even "
                   "when the cache holds it")
    p.set_defaults(func=cmd_pull)


def cmd_pull(args: argparse.Namespace) -> int:
    """Download a saved model, check that it loads, and copy it out when asked."""
    from .artifact import copy_artifact
    from .builder import HF_HUB_PREFIX, load_artifact, saved_model

    name = args.name if args.name.startswith(HF_HUB_PREFIX) else HF_HUB_PREFIX + args.name
    saved = saved_model(name)
    if args.force:  # the config first: a foreign format's config names the files to fetch
        saved.config_folder(force=True)
    folder = saved.files_folder(force=args.force)
    load_artifact(folder, source=name)  # the checks zoo.build makes: it loads, or an error now
    if args.out:
        folder = copy_artifact(folder, args.out)
    print(folder)
    return 0


# -- zoo components, info, plugins ---------------------------------------------------------------
def add_components(sub) -> None:
    """``zoo components [FAMILY] [PATTERN]``."""
    p = sub.add_parser("components", help="list registered components by family")
    p.add_argument("family", nargs="?", help="attention, kernel, positional, norm, ffn, block, ...")
    p.add_argument("pattern", nargs="?", default="*")
    p.set_defaults(func=cmd_components)


def cmd_components(args: argparse.Namespace) -> int:
    """Print the registered components, by family: a component whose plain name another
    plugin's holds by its qualified name, a renamed one with its former names."""
    from .registry import list_components, list_families, registry

    families = [args.family] if args.family else [f.name for f in list_families()]
    rows = []
    for family in families:
        plain = {c.qualified_name for c in list_components(family)}
        shadowed = [c for c in registry.qualified(family) if c.qualified_name not in plain
                    and fnmatch.fnmatchcase(c.name, args.pattern)]
        for c in [*list_components(family, args.pattern), *shadowed]:
            name = c.name if c.qualified_name in plain else c.qualified_name
            if c.former_names:  # in the name column, which a narrow terminal never cuts
                name += f" (formerly {', '.join(c.former_names)})"
            rows.append([family, name, c.plugin, c.capability_summary(), c.description])
    print(_table(rows, ["family", "name", "plugin", "capabilities", "description"]))
    return 0


def add_info(sub) -> None:
    """``zoo info NAME [--set KEY=VALUE ...]``."""
    p = sub.add_parser("info", help="a recipe: its components, parameters, memory")
    p.add_argument("name", help="recipe name or recipe file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override, e.g. --set norm=rmsnorm --set encoder_layers=3")
    p.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    """Print a recipe, its components, its parameter count and the memory it needs."""
    import torch

    from ._text import format_bytes
    from .builder import footprint, get_recipe
    from .hardware import memory_available
    from .recipe import dump_recipe
    from .resolver import resolve

    resolved = resolve(get_recipe(args.name), parse_sets(args.set))
    recipe = resolved.recipe
    fp = footprint(resolved)
    print(f"# {recipe.name}: {recipe.description}\n")
    if recipe.based_on:
        print(f"# written as base: {recipe.based_on} and its changes; resolved:\n")
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
    print(f"memory free for this process: {format_bytes(memory_available())}")
    return 0


def add_plugins(sub) -> None:
    """``zoo plugins [--json]``."""
    p = sub.add_parser("plugins", help="installed plugins: what each registered, or its error")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)


def cmd_plugins(args: argparse.Namespace) -> int:
    """Print the plugins, with what each registered or its error."""
    from .registry import list_plugins

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


def add_env(sub) -> None:
    """``zoo env [--json]``."""
    p = sub.add_parser("env", help="this installation and machine, to paste into a bug report")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_env)


def cmd_env(args: argparse.Namespace) -> int:
    """Print zoo's version, the plugins, torch, CUDA, the CPU's bf16/AMX units, the Hub."""
    from .environment import as_text, report

    data = report()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("Copy and paste the lines below into your bug report.\n")
        print(as_text(data))
    return 0


# -- zoo native ----------------------------------------------------------------------------------
def add_native(sub) -> None:
    """``zoo native build|status``."""
    p = sub.add_parser("native", help="zoo's native libraries (C++) for CPU decoding: build them (about half "
                       "a minute on 2 cores, once; no command builds them by itself), or say "
                       "where they stand")
    p.add_argument("action", choices=["build", "status"])
    p.add_argument("model", nargs="?", help="status: also say whether the native step "
                   "decodes this model (a run, a saved model, a transformers folder, a "
                   "recipe), and why not")
    p.set_defaults(func=cmd_native)


def cmd_native(args: argparse.Namespace) -> int:
    """Compile zoo's native libraries now (``build``), or report them (``status``)."""
    from . import native
    from .registry import registry

    registry.ensure_loaded()  # the plugins declare their own libraries
    if args.action == "build":
        native.build()
    state = native.status()
    for lib in state["libraries"]:
        where = f" in {lib['folder']}" if lib["folder"] else ""
        print(f"zoo's native libraries: {lib['name']} {lib['state']}{where}"
              + (f"; the compiler's output: {lib['log']}" if lib["log"] else ""))
    if state["missing"]:
        print(f"zoo: error: this installation lacks {', '.join(state['missing'])}",
              file=sys.stderr)
    if args.action == "status" and state["state"] in ("not built", "stale"):
        print("zoo native build compiles them (about half a minute on 2 cores, once)")
    if args.action == "status" and state["state"] == "damaged":
        print("zoo native build builds the damaged ones again")
    if args.model:
        from .cli_decode import native_decision

        print(f"{args.model}: {native_decision(args.model)}")
    return 0 if state["state"] in ("loaded", "built", "off", "unsupported") or (
        args.action == "status" and state["state"] in ("not built", "stale")) else 1


# -- zoo train -----------------------------------------------------------------------------------
def add_train(sub) -> None:
    """``zoo train RECIPE`` or ``zoo train --resume RUN``."""
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
    p.add_argument("--allow-slow-bf16", action="store_true", help="train in bf16 even on a CPU "
                   "without bf16 units (emulated: about 100x slower than fp32)")
    p.add_argument("--threads", type=int, help="torch threads on the CPU (default: one per "
                   "core; fewer when other processes keep cores busy)")
    p.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    """Train a recipe or resume a run; Ctrl-C saves and exits 130."""
    from .training.config import list_train_recipes
    from .training.loop import Interrupted, train

    if args.resume and args.recipe:
        raise SystemExit("zoo: give a recipe or --resume RUN, not both")
    if not args.resume and not args.recipe:
        raise SystemExit("zoo train: name a recipe (zoo train sort) or --resume RUN; "
                         "built-in recipes: " + ", ".join(list_train_recipes()))
    try:
        result = train(args.recipe, overrides=parse_sets(args.set), run_dir=args.out,
                       resume=args.resume, device=args.device, progress=not args.no_progress,
                       allow_slow_bf16=args.allow_slow_bf16, threads=args.threads)
    except Interrupted as exc:
        print(f"zoo: {exc}", file=sys.stderr)
        return 130
    if result.metrics:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
        print(f"{result.run_dir}: step {result.step}; test: {shown}")
    if result.samples:
        from .training.runs import SAMPLES, format_samples

        print(f"\n{len(result.samples)} test samples (also in {result.run_dir / SAMPLES}):\n")
        print(format_samples(result.samples))
    return 0


# -- zoo export ----------------------------------------------------------------------------------
def add_export(sub) -> None:
    """``zoo export SOURCE --format TARGET --out DIR``."""
    p = sub.add_parser("export", help="export a model or run to CTranslate2, ONNX "
                       "(ONNX Runtime), a transformers folder, or a plugin's target")
    p.add_argument("source", help="a run folder (runs/translate-de-en), a recipe, "
                   "local-dir:PATH or hf-hub:OWNER/NAME")
    p.add_argument("--format", required=True, metavar="TARGET",
                   help="an export target of the installed formats (zoo's: ctranslate2, "
                   "onnx, transformers: a folder from_pretrained loads; zoo components "
                   "format lists them with their plugins)")
    p.add_argument("--out", required=True, help="the folder to write")
    p.add_argument("--quantization", help="ctranslate2: CTranslate2's weight type (int8, "
                   "int8_float32, float16, ...); default float32")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override of a recipe (not of a run)")
    p.add_argument("--pretrained", action="store_true", help="a recipe's published weights")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """Export a run or a model; a run's tokenizer names the CTranslate2 vocabulary."""
    from .export import export, formats
    from .training.runs import is_run, load_run

    if args.format not in formats():
        raise SystemExit(f"zoo export: unknown --format {args.format!r}; the installed "
                         f"formats write {', '.join(formats())}")
    options: dict = {"quantization": args.quantization}
    if is_run(args.source.removeprefix("local-dir:")):
        run = load_run(args.source)
        model = run.model
        if hasattr(run.task, "token_strings"):  # the ids' names, for a writer that reads them
            options["vocabulary"] = run.task.token_strings(range(model.settings.vocab_size))
        options["tokenizer"] = getattr(run.task, "tokenizer_files", lambda: None)()
    else:
        from .builder import build

        model = build(args.source, pretrained=args.pretrained or None, **parse_sets(args.set))
    out = export(model, args.out, args.format, force=args.force, **options)
    print(f"Exported {args.source} to {out} ({args.format}): "
          f"{', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


# -- pictures ------------------------------------------------------------------------------------
def add_plot(sub) -> None:
    """``zoo plot RUN``."""
    p = sub.add_parser("plot", help="PNG curves of a run's loss, learning rate and metrics")
    p.add_argument("run")
    p.add_argument("--out", help="PNG path (default RUN/curves.png)")
    p.set_defaults(func=cmd_plot)


def cmd_plot(args: argparse.Namespace) -> int:
    """Draw a run's curves."""
    from .plots import plot_run

    print(f"wrote {plot_run(args.run, args.out)}")
    return 0


def add_attention_map(sub) -> None:
    """``zoo attention-map RUN TEXT``."""
    p = sub.add_parser("attention-map", help="PNG of a trained model's attention for an input")
    p.add_argument("run", help="a run folder, or a saved run (local-dir:PATH, hf-hub:OWNER/NAME)")
    p.add_argument("text", help="the input, e.g. 'Was wird jetzt aus uns?' or '3 1 4 1 5'")
    p.add_argument("--layer", default="-1", help="which layer (default: the last), or 'all' "
                   "for one PNG per layer")
    p.add_argument("--out", help="PNG path (default RUN/attention.png)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--device")
    p.set_defaults(func=cmd_attention_map)


def cmd_attention_map(args: argparse.Namespace) -> int:
    """Decode an input greedily and draw the attention weights, one PNG per layer asked."""
    import torch

    from .decoding import generate
    from .plots import attention_weights, plot_attention
    from .training.runs import load_run

    run = load_run(args.run, device=args.device)
    task, model = run.task, run.model
    if not hasattr(task, "parse_input"):
        raise SystemExit(f"zoo: attention maps are drawn for sequence tasks; {args.run} is a "
                         f"{run.recipe.task.name} run")
    device = next(model.parameters()).device
    src = torch.tensor([task.parse_input(args.text)], device=device)
    out = generate(model, src, num_beams=1, do_sample=False,
                   max_new_tokens=args.max_new_tokens)[0].tolist()
    if task.eos_id in out:
        out = out[: out.index(task.eos_id) + 1]
    tgt_in = torch.tensor([[task.bos_id, *out[:-1]]] if out else [[task.bos_id]], device=device)
    weights = attention_weights(model, src, tgt_in)
    depth = len(next(iter(weights.values())))
    layers = range(depth) if args.layer == "all" else [int(args.layer)]
    print(f"output: {task.render_output(out)}")
    for layer in layers:
        target = args.out or (f"{args.run}/attention.png" if ":" not in args.run
                              else "attention.png")
        if args.layer == "all":
            target = str(Path(target).with_name(f"{Path(target).stem}-layer{layer}.png"))
        path = plot_attention(weights, task.token_strings(src[0].tolist()),
                              task.token_strings(tgt_in[0].tolist()), target, layer=layer)
        print(f"wrote {path}")
    return 0


def add_plot_positions(sub) -> None:
    """``zoo plot-positions``."""
    p = sub.add_parser("plot-positions", help="PNG of the sinusoidal position encoding")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--length", type=int, default=100)
    p.add_argument("--out", default="positional_encoding.png")
    p.set_defaults(func=cmd_plot_positions)


def cmd_plot_positions(args: argparse.Namespace) -> int:
    """Draw the sinusoidal position encoding."""
    from .plots import plot_positions

    print(f"wrote {plot_positions(args.out, d_model=args.d_model, length=args.length)}")
    return 0


# -- zoo experiment ------------------------------------------------------------------------------
def add_experiment(sub) -> None:
    """``zoo experiment NAME`` (or ``all``, or ``--list``)."""
    p = sub.add_parser("experiment", help="run one of the articles' experiments (zoo "
                       "experiment --list) and write its table and figure")
    p.add_argument("name", nargs="?", help="an experiment (sqrt-dk, heads, norms, pre-post, "
                   "positions, schedules, scaling) or 'all'")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("--seeds", type=int, help="seeds per variant (default: the experiment's)")
    p.add_argument("--steps", type=int, help="training steps per run (default: the "
                   "experiment's)")
    p.add_argument("--device", help="cpu, cuda (default: cuda when there is one)")
    p.add_argument("--out", default="experiments", help="folder for NAME.md, NAME.json and "
                   "NAME.png (default: experiments/)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a training override for every run, as zoo train --set")
    p.add_argument("--quiet", action="store_true", help="print only the result (no "
                   "progress bar)")
    p.set_defaults(func=cmd_experiment)


def _say(line: str) -> None:
    print(line, flush=True)  # progress shows as it happens, also when piped to a file


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run an experiment (or all) and print its report: the article's claim beside ours.
    Each training run shows ``zoo train``'s progress bar, unless ``--quiet``."""
    from .experiments import EXPERIMENTS, get_experiment, run_experiment

    if args.list or not args.name:
        rows = [[e.name, str(e.seeds), str(e.steps), f"{e.minutes:g}", e.summary]
                for e in EXPERIMENTS.values()]
        print(_table(rows, ["experiment", "seeds", "steps",
                            "minutes (rough, 2-core EPYC AVX-512)", "what it runs"]))
        return 0
    names = list(EXPERIMENTS) if args.name == "all" else [get_experiment(args.name).name]
    for name in names:
        report = run_experiment(name, seeds=args.seeds, steps=args.steps, device=args.device,
                                out=args.out, overrides=parse_sets(args.set),
                                say=(lambda line: None) if args.quiet else _say,
                                progress=not args.quiet)
        print("\n" + report.markdown())
        print(f"wrote {args.out}/{name}.md, {name}.json and {name}.png")
    return 0


# -- the parser ----------------------------------------------------------------------------------
COMMANDS = (add_list, add_save, add_push, add_pull, add_components, add_info, add_plugins,
            add_env, add_native, add_train, add_translate, add_generate, add_chat, add_embed,
            add_rerank, add_classify, add_export, add_plot, add_attention_map, add_plot_positions,
            add_experiment, add_bench, add_serve)
"""Each adds one subcommand (its arguments and its handler), in ``zoo --help``'s order."""


def make_parser() -> argparse.ArgumentParser:
    """The ``zoo`` parser: every command of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="zoo",
        description="A plugin-based zoo of Transformer models: list recipes and "
        "components, inspect models, see the installed plugins.",
    )
    parser.add_argument("--version", action="version", version=f"zoo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


SPINNING_COMMANDS = ("translate", "generate", "chat", "embed", "rerank", "bench", "serve")
"""Commands that keep libgomp's spinning: one request at a time, many short products."""
TRAINING_COMMANDS = ("train", "experiment")
"""Commands that keep libgomp's spinning when the machine is idle as they start."""


def _calm_openmp(argv: list[str], environ: dict, busy=None) -> None:
    """Before torch is imported: OpenMP threads that find nothing to do spin 1,000 times,
    not libgomp's 300,000, before they sleep, unless this process will have the machine
    to itself. Beside another torch process, spinning threads slow both down many times
    over (benchmarks/train_under_load.py); alone, calm threads cost small models time,
    since each of their thousands of short products wakes them: on a 2-core AMD EPYC
    with AVX2, fashion-mnist-vit's step was 1.45 times slower and sort's 1.35 times.

    So ``zoo translate`` and ``zoo bench`` always keep the spinning; ``zoo train`` and
    ``zoo experiment`` keep it when other processes keep less than ``BUSY_CORE`` (0.75)
    of a core busy (``busy()``, by default :func:`zoo.hardware.cores_busy` over a
    quarter of a second; a run started beside one calms itself and takes the free
    cores); other commands calm it. A GOMP_SPINCOUNT or
    OMP_WAIT_POLICY of your own is left as it is."""
    if "GOMP_SPINCOUNT" in environ or "OMP_WAIT_POLICY" in environ:
        return
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in SPINNING_COMMANDS:
        return
    if command in TRAINING_COMMANDS:
        from .hardware import BUSY_CORE, cores_busy

        if (busy or cores_busy)() < BUSY_CORE:
            return
    environ["GOMP_SPINCOUNT"] = "1000"


_COMMAND_PREFIX = re.compile(r"^zoo(?: [a-z][a-z-]*)*: ")
"""How a command's refusal opens (``zoo generate: ``), replaced by ``zoo: error: ``."""


def _run(argv: list[str] | None) -> int:
    """Parse ``argv`` and run its command; an error, zoo's or a command's refusal of its
    arguments (``SystemExit("zoo NAME: why")``), is one line and exit status 2."""
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
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(f"zoo: error: {_COMMAND_PREFIX.sub('', exc.code)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `zoo list | head -1`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit's flush cannot fail again
        return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``zoo``: errors print one line, ``zoo: error: ...``, and exit 2; warnings
    print one line each, once
    (:func:`~zoo.cli_warnings.one_line_warnings`)."""
    if "torch" not in sys.modules:
        _calm_openmp(sys.argv[1:] if argv is None else argv, os.environ)
    with one_line_warnings():
        return _run(argv)


if __name__ == "__main__":
    sys.exit(main())
