"""OpenVINO as a peer of ``zoo bench decode`` for a language model, in a process of its own.

The model is what an OpenVINO user makes of the same transformers folder: optimum-intel's
export (``optimum-cli export openvino --task text-generation-with-past``), a stateful
model that keeps its KV cache inside OpenVINO, with fp32 weights (``--weight-format fp32``)
for the fp32 and bf16 rows and int8 weights (``--weight-format int8``: NNCF's weight
compression, one scale per output channel) for the int8 rows.

optimum-intel pins a transformers older than the one zoo's tests run with, so it lives in
an environment of its own, made once by ``python -m zoo.bench.openvino_generator install``:
a virtual environment in ``$XDG_CACHE_HOME/zoo/optimum-intel-VERSION`` that sees this
one's packages (torch among them) and holds only what optimum-intel needs in other
versions. Where optimum-intel imports here, this environment's own is used. CI never
makes it; without it the peer is skipped with that command.

The export runs in that environment's process; each timed model runs in a child of this
one (``python -m zoo.bench.openvino_generator serve DIR PRECISION THREADS``) that imports
OpenVINO and NumPy and nothing of torch (:mod:`zoo.bench.child` says why), compiled for
latency on ``THREADS`` threads in one stream at inference precision ``PRECISION`` (``f32``,
or ``bf16``, OpenVINO's own default on a CPU with bf16 units). It decodes as optimum-intel's
model does: the prompts in one call, then one call a step of every prompt's last token,
with the attention mask, the positions and ``beam_idx``; the next token is the argmax of
the last logits, or drawn after temperature, top-k and top-p. Its jobs and answers are
:class:`zoo.bench.child.GeneratorProcess`'s.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from . import child
from .child import GeneratorProcess

VERSION = "2.2.0"
"""The optimum-intel release that exports the model."""

WEIGHTS = {"fp32": ("fp32", "f32"), "bf16": ("fp32", "bf16"), "int8": ("int8", "f32")}
"""For each of ``zoo bench``'s dtypes, the export it runs (its ``--weight-format``) and
its inference precision."""

INSTALL = "python -m zoo.bench.openvino_generator install"
"""The one-line, cached step that makes the export's environment."""


def environment() -> Path:
    """Where optimum-intel's own environment is kept."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "zoo" / f"optimum-intel-{VERSION}"


def exporter() -> list[str] | None:
    """The command that runs ``optimum-cli``: this Python's where optimum-intel imports
    here, else its own environment's, else None."""
    if importlib.util.find_spec("optimum") and importlib.util.find_spec("optimum.intel"):
        return [sys.executable, "-m", "optimum.commands.optimum_cli"]
    python = environment() / "bin" / "python"
    return [str(python), "-m", "optimum.commands.optimum_cli"] if python.is_file() else None


def installed() -> str:
    """Empty when OpenVINO imports here and optimum-intel's export is at hand; else why
    the peer is skipped."""
    if importlib.util.find_spec("openvino") is None:
        return "openvino is not installed (pip install 'zoo-transformers[bench]')"
    if exporter() is None:
        return f"optimum-intel's export is not installed ({INSTALL})"
    return ""


def install() -> int:
    """Make :func:`environment`: a virtual environment that sees this one's packages (a
    ``.pth`` file naming this one's site-packages, after its own) with optimum-intel
    ``VERSION`` and what it needs in other versions installed into it. It is made beside
    its place and moved there when whole: a step that fails says which, leaves nothing
    behind, and returns 2."""
    import shutil
    import site
    import venv

    home = environment()
    if (home / "bin" / "python").is_file():
        return 0
    making = home.with_name(home.name + ".making")
    shutil.rmtree(making, ignore_errors=True)
    step = "making the virtual environment"
    try:
        venv.create(making, with_pip=True)
        python = str(making / "bin" / "python")
        step = "reading its site-packages"
        own = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        Path(own, "zz-zoo-outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        step = f"pip install optimum-intel[openvino]=={VERSION}"
        subprocess.run([python, "-m", "pip", "install", f"optimum-intel[openvino]=={VERSION}"],
                       check=True)
        making.rename(home)
    except (subprocess.CalledProcessError, OSError) as exc:
        shutil.rmtree(making, ignore_errors=True)
        what = (f"exit status {exc.returncode}" if isinstance(exc, subprocess.CalledProcessError)
                else str(exc))
        print(f"zoo: optimum-intel {VERSION}'s environment was not made: {step} failed "
              f"({what}). pip must "
              f"reach PyPI; nothing was kept in {home}.", file=sys.stderr)
        return 2
    print(f"optimum-intel {VERSION}: its environment is {home}")
    return 0


def export(folder: Path, out: Path, dtypes) -> dict[str, str]:
    """optimum-intel's exports of ``folder`` that ``dtypes`` need, into ``out``: {dtype:
    model folder}, and for a dtype whose export failed {dtype: "! why"}."""
    command = exporter()
    found: dict[str, str] = {}
    for dtype in [d for d in dtypes if d in WEIGHTS]:
        weights = WEIGHTS[dtype][0]
        target = out / weights
        if not (target / "openvino_model.xml").is_file():
            done = subprocess.run([*command, "export", "openvino", "--model", str(folder),
                                   "--task", "text-generation-with-past", "--weight-format",
                                   weights, str(target)], capture_output=True, text=True)
            if not (target / "openvino_model.xml").is_file():
                found[dtype] = ("! its export failed: "
                                + (done.stderr or done.stdout).strip()[-500:])
                continue
        found[dtype] = str(target)
    return found


class Generator(GeneratorProcess):
    """OpenVINO's model in ``folder`` (an export) at inference ``precision`` on
    ``threads`` threads, in a child process; :attr:`ready` holds the CPU's capabilities as
    OpenVINO reads them (``BF16`` where it computes bf16 in hardware)."""

    def __init__(self, folder: str, precision: str, threads: int) -> None:
        super().__init__("OpenVINO", "zoo.bench.openvino_generator", "serve", folder,
                         precision, threads)


def _drawn(logits, sampling: dict, rng):
    """One token a row of ``logits``: temperature, then the ``topk`` likeliest, then the
    smallest set whose probability reaches ``topp``, then a draw."""
    import numpy as np

    scaled = logits / sampling["temperature"]
    k = min(sampling["topk"], scaled.shape[-1])
    top = np.argpartition(-scaled, k - 1, axis=-1)[:, :k]
    picked = []
    for row, ids in zip(scaled, top):
        ids = ids[np.argsort(-row[ids])]
        p = np.exp(row[ids] - row[ids[0]])
        p /= p.sum()
        keep = int(np.searchsorted(np.cumsum(p), sampling["topp"])) + 1
        p = p[:keep] / p[:keep].sum()
        picked.append(ids[rng.choice(keep, p=p)])
    return np.array(picked, dtype=np.int64)


def _serve(folder: str, precision: str, threads: int) -> int:
    """The timed child: compile the export in ``folder`` and answer one job per line."""
    import numpy as np
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(Path(folder) / "openvino_model.xml", "CPU", {
        "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    names = {name for port in compiled.inputs for name in port.get_names()}

    def decode(prompts, job: dict) -> list[list[int]]:
        n = job["length"]
        batch, length = prompts.shape
        rng = np.random.default_rng(0)
        request.reset_state()
        ids, made = prompts, []
        for step in range(n):
            seen = length + step
            inputs = {"input_ids": ids,
                      "attention_mask": np.ones((batch, seen), dtype=np.int64),
                      "position_ids": np.arange(seen - ids.shape[1], seen,
                                                dtype=np.int64)[None].repeat(batch, 0),
                      "beam_idx": np.arange(batch, dtype=np.int32)}
            request.infer({k: v for k, v in inputs.items() if k in names})
            last = request.get_tensor("logits").data[:, -1, :]
            ids = (last.argmax(-1) if job.get("sampling") is None
                   else _drawn(last, job["sampling"], rng))[:, None].astype(np.int64)
            made.append(ids[:, 0])
        return np.stack(made, 1).tolist()

    return child.serve_generator(
        decode, {"ready": True, "capabilities": list(
            core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))},
        keep=lambda prompts: np.array(prompts, dtype=np.int64))


if __name__ == "__main__":
    if sys.argv[1] == "install":
        sys.exit(install())
    sys.exit(_serve(sys.argv[2], sys.argv[3], int(sys.argv[4])))
