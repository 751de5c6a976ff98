"""``zoo env``: what a bug report needs to say about this machine and installation,
as ``transformers env`` and ``torch.utils.collect_env`` do: zoo's version, the
plugins and their versions, torch and CUDA, the CPU's capability and bf16/AMX units,
threads, the Hub endpoint and cache, and the settings that change zoo's behaviour."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

from . import hardware, native
from .registry import list_plugins
from .version import __version__

PACKAGES = ("huggingface_hub", "safetensors", "pydantic", "pluggy", "numpy", "timm",
            "transformers", "xformers", "tokenizers", "sacrebleu")
"""Packages whose versions a report shows (absent ones as null)."""
SETTINGS = ("ZOO_PLUGINS", "ZOO_DISABLE_PLUGIN_AUTOLOAD", "ZOO_PREFER_BUILTIN", "ZOO_FORMAT_FOR",
            "ZOO_NATIVE", "ZOO_NATIVE_CACHE",
            "ZOO_NATIVE_BUILD_TIMEOUT", "ZOO_ADAPT_THREADS",
            "OMP_NUM_THREADS",
            "GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "CUDA_VISIBLE_DEVICES")
"""Environment variables that change what zoo does."""


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _hub() -> dict[str, Any]:
    from huggingface_hub import constants

    return {
        "huggingface_hub": _version("huggingface_hub"),
        "endpoint": os.environ.get("HF_ENDPOINT") or constants.ENDPOINT,
        "cache": str(constants.HF_HUB_CACHE),
        "offline": bool(constants.HF_HUB_OFFLINE),
        "token_set": bool(os.environ.get("HF_TOKEN") or os.path.exists(constants.HF_TOKEN_PATH)),
    }


def dtype_paths() -> dict[str, str]:
    """Which products each inference dtype takes on this CPU, one line each: zoo's native
    ones (and up to how many rows), oneDNN's (on AMX where the CPU has it), FBGEMM's."""
    import torch

    from .ops import onednn_bf16

    cpu = hardware.detect().cpu
    built = native.available()
    fp32 = (f"zoo's native products ({torch.ops.zoo.product_isa()}) up to "
            f"{native.default_rows()} rows (decoding steps, the native decoding step), "
            "oneDNN's above" if built else
            "oneDNN's (zoo's native products are not built: zoo native build)")
    if not cpu.bf16:
        bf16 = "emulated by PyTorch (no bf16 units): far slower than fp32"
    else:
        units = "AMX tiles" if cpu.amx else "AVX512-BF16"
        bf16 = (f"oneDNN's on {units} (a model built in bf16; the general decoding path)"
                if onednn_bf16() else f"PyTorch's on {units}")
    engine = torch.backends.quantized.engine
    engine = ENGINES.get(engine, f"PyTorch's {engine} engine")
    bits = "8-bit activations (VNNI)" if cpu.vnni else "7-bit activations (no VNNI)"
    int8 = (f"zoo's native int8 products ({torch.ops.zoo.int8_isa()}) up to "
            f"{native.default_rows(int8=True)} rows, {engine} above; {bits}" if built
            else f"{engine}; {bits}")
    return {"fp32": fp32, "bf16": bf16, "int8": int8}


ENGINES = {"x86": "PyTorch's x86 engine (FBGEMM, oneDNN)", "fbgemm": "FBGEMM",
           "onednn": "oneDNN", "qnnpack": "QNNPACK"}
"""PyTorch's quantized engines, by the names ``torch.backends.quantized.engine`` gives."""


def report() -> dict[str, Any]:
    """Everything ``zoo env`` shows, as plain data (never a token's value)."""
    import torch

    machine = hardware.detect()
    return {
        "zoo": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": {"built_with": torch.version.cuda, "available": torch.cuda.is_available()},
        "cpu": machine.to_dict()["cpu"],
        "gpus": machine.to_dict()["gpus"],
        "plugins": [{"name": i.name, "distribution": i.distribution, "version": i.version,
                     "ok": i.ok, "error": i.error} for i in list_plugins()],
        "hub": _hub(),
        "native_libraries": native.status(),
        "dtypes": dtype_paths(),
        "packages": {name: _version(name) for name in PACKAGES},
        "settings": {name: os.environ.get(name) for name in SETTINGS},
    }


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def as_text(data: dict[str, Any]) -> str:
    """The report as lines to paste into a bug report."""
    cpu, cuda, hub, libraries = (data["cpu"], data["cuda"], data["hub"],
                                 data["native_libraries"])
    gpus = "; ".join(f"{g['index']}: {g['name']} (sm {g['capability'][0]}{g['capability'][1]}, "
                     f"{g['memory_gib']} GiB, bf16 {_yes(g['bf16'])})" for g in data["gpus"])
    plugins = ", ".join(
        f"{p['name']} {p['version'] or '-'} ({p['distribution'] or '-'})" if p["ok"]
        else f"{p['name']} FAILED: {p['error']}" for p in data["plugins"])
    lines = [
        f"- zoo version: {data['zoo']}",
        f"- Platform: {data['platform']}",
        f"- Python version: {data['python']}",
        f"- PyTorch version: {data['torch']} (built with CUDA {cuda['built_with'] or '-'}; "
        f"CUDA available: {_yes(cuda['available'])})",
        f"- CPU: {cpu['name']}; capability {cpu['capability']}; bf16 units: {_yes(cpu['bf16'])};"
        f" AMX: {_yes(cpu['amx'])}; {cpu['cores']} cores, {cpu['threads']} torch threads",
        f"- GPUs: {gpus or 'none'}",
        "- Products by dtype: " + "; ".join(f"{k}: {v}" for k, v in data["dtypes"].items()),
        f"- zoo's native libraries: {libraries['state']}"
        + (f" ({libraries['folder']})" if libraries["folder"] else "")
        + (f"; log {libraries['log']}" if libraries["log"] else "")
        + (" (zoo native build compiles them)" if libraries["state"] in ("not built", "stale",
                                                                         "damaged")
           else ""),
        f"- Plugins: {plugins or 'none'}",
        f"- Hub: huggingface_hub {hub['huggingface_hub']}, endpoint {hub['endpoint']}, cache "
        f"{hub['cache']}, offline: {_yes(hub['offline'])}, token set: {_yes(hub['token_set'])}",
        "- Packages: " + ", ".join(f"{k} {v}" for k, v in data["packages"].items() if v),
        "- Settings: " + (", ".join(f"{k}={v}" for k, v in data["settings"].items()
                                     if v is not None) or "none of " + ", ".join(SETTINGS)),
    ]
    return "\n".join(lines)
