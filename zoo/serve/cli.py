"""``zoo serve MODEL [MODEL ...]``: the models behind an HTTP API (OpenAI's, and
rerank, translation and image classification routes), on uvicorn.

Each MODEL is any name :func:`zoo.load` reads (a run folder, a saved model,
``local-dir:PATH``, ``hf-hub:OWNER/NAME``), served under its name (``OWNER/NAME`` for a
Hub model, the folder's name otherwise) or under ``NAME=MODEL``'s. It binds 127.0.0.1
unless told otherwise; ``--api-key`` (or ``ZOO_API_KEY``) guards every route but
``/health``. SIGTERM (or Ctrl-C) stops taking requests and finishes those in flight
within ``--drain-seconds``. ``--workers N`` runs N processes on one port, each with its
share of the cores.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..errors import RecipeError

SPEC = "ZOO_SERVE_SPEC"
"""How ``--workers`` hands each worker process its models and limits."""
KEY = "ZOO_API_KEY"
"""The API key, when ``--api-key`` is not given."""


def add_serve(sub) -> None:
    """``zoo serve MODEL [MODEL ...] [--host] [--port] [--api-key] [--max-...]``."""
    p = sub.add_parser("serve", help="serve models over HTTP: OpenAI's API (chat, "
                       "completions, embeddings), rerank, translation, image "
                       "classification; batching across requests")
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="a name zoo.load reads (runs/NAME, a folder, local-dir:PATH, "
                   "hf-hub:OWNER/NAME), or NAME=MODEL to serve it as NAME")
    p.add_argument("--host", default="127.0.0.1", help="the address to bind (default "
                   "127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help=f"a key every request but /health must give "
                   f"(Authorization: Bearer KEY); default ${KEY}")
    p.add_argument("--device")
    p.add_argument("--workers", type=int, default=1, help="processes serving one port, "
                   "each with its share of the cores and its own copy of the models")
    p.add_argument("--drain-seconds", type=float, default=30.0, help="on SIGTERM, how "
                   "long the requests in flight may take to finish")
    from .schemas import Limits

    for name, field in Limits.model_fields.items():
        flag = {"seconds": "max-seconds", "body_bytes": "max-body-bytes"}.get(
            name, f"max-{name.replace('_', '-')}")
        p.add_argument(f"--{flag}", dest=f"limit_{name}", type=field.annotation,
                       default=field.default, help=f"{field.description or ''} "
                       f"(default {field.default})".strip())
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=cmd_serve)


def served_names(specs: list[str]) -> dict[str, str]:
    """``NAME=MODEL`` or ``MODEL`` arguments as name -> what zoo.load reads; one
    RecipeError for a name given twice."""
    names: dict[str, str] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if sep and name and ":" not in name and "/" not in name:
            spec = rest
        elif spec.startswith("hf-hub:"):
            name = spec[len("hf-hub:"):]
        else:
            name = Path(spec.removeprefix("local-dir:")).name or spec
        if name in names:
            raise RecipeError(f"two models would be served as {name!r}: name one of them "
                              f"(zoo serve NAME={spec})")
        names[name] = spec
    return names


def cmd_serve(args: argparse.Namespace) -> int:
    """Load the models, then serve them until stopped."""
    import uvicorn

    from .schemas import Limits

    limits = Limits(**{k[len("limit_"):]: v for k, v in vars(args).items()
                       if k.startswith("limit_")})
    if args.workers < 1:
        raise RecipeError(f"--workers {args.workers}: one or more")
    spec = {"models": served_names(args.models), "device": args.device,
            "limits": limits.model_dump(), "workers": args.workers}
    api_key = args.api_key or os.environ.get(KEY) or None
    common = dict(host=args.host, port=args.port, log_level=args.log_level,
                  timeout_graceful_shutdown=args.drain_seconds)
    if args.workers == 1:
        app = app_for(spec, api_key)
        uvicorn.run(app, **common)
        return 0
    os.environ[SPEC] = json.dumps(spec)
    if api_key:
        os.environ[KEY] = api_key
    uvicorn.run("zoo.serve.cli:app_from_environment", factory=True, workers=args.workers,
                **common)
    return 0


def app_for(spec: dict, api_key: str | None):
    """The app of a serving spec: its models loaded, the cores shared by its workers."""
    import torch

    from ..hardware import usable_cores
    from ..loading import load
    from .app import make_app
    from .engine import steady_allocator
    from .schemas import Limits

    steady_allocator()

    if spec["workers"] > 1:
        torch.set_num_threads(max(1, usable_cores() // spec["workers"]))
    models = {name: load(source, device=spec["device"]).eval()
              for name, source in spec["models"].items()}
    print(f"zoo serve: {', '.join(models)} ({torch.get_num_threads()} threads)", flush=True)
    return make_app(models, limits=Limits(**spec["limits"]), api_key=api_key)


def app_from_environment():
    """A ``--workers`` process's app, from :data:`SPEC`."""
    return app_for(json.loads(os.environ[SPEC]), os.environ.get(KEY) or None)
