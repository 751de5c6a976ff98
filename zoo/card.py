"""The model card (``README.md``) of an artifact, written with huggingface_hub's
``ModelCard``: a metadata header the Hub indexes, then what the model is made of,
how it was trained and how to load it."""

from __future__ import annotations

from typing import Any

from torch import nn

from .registry import registry
from .training.config import TrainRecipe

PIPELINE_TAGS = {"vit": "image-classification"}
TASK_PIPELINE_TAGS = {"translate-de-en": "translation", "fashion-mnist": "image-classification"}


def _task_datasets(task_name: str) -> list[str]:
    """The Hub datasets a task trains on, as its component declares (``hub_datasets``)."""
    if ("task", task_name) not in registry:
        return []
    return list(getattr(registry.get("task", task_name).load(), "hub_datasets", ()))


def _loss(loss: Any) -> str:
    settings = ", ".join(f"{k} {v}" for k, v in loss.settings.items())
    return f"{loss.name} ({settings})" if settings else loss.name


def model_card(config: dict[str, Any], model: nn.Module, *, train: TrainRecipe | None = None,
               results: dict[str, Any] | None = None, repo_id: str | None = None):
    """A ``huggingface_hub.ModelCard`` for the artifact described by ``config``; ``train``
    and ``results`` (a run's training recipe and results) describe how it was trained."""
    from huggingface_hub import ModelCard, ModelCardData

    recipe = config["recipe"]
    arch = recipe["architecture"]["name"]
    results = results or {}
    test = results.get("test", {}) if isinstance(results.get("test"), dict) else {}
    tags = ["zoo", "transformer", arch]
    tags += sorted({c["name"] for slot, c in config["components"].items() if slot != "architecture"})
    data = ModelCardData(
        library_name="zoo",
        tags=tags,
        pipeline_tag=TASK_PIPELINE_TAGS.get(train.task.name) if train else PIPELINE_TAGS.get(arch),
        datasets=_task_datasets(train.task.name) if train else None,
        metrics=sorted(test) or None,
        base_model=(recipe.get("weights") or {}).get("hub"),
    )
    params = sum(p.numel() for p in model.parameters())
    lines = [
        f"# {recipe['name']}",
        "",
        recipe.get("description") or f"A zoo `{arch}` model.",
        "",
        f"{params:,} parameters, saved by zoo {config['zoo_version']}.",
        "",
        "## Components",
        "",
        "| slot | component | settings | plugin |",
        "|---|---|---|---|",
    ]
    refs = {"architecture": recipe["architecture"], **recipe.get("components", {})}
    for slot, entry in config["components"].items():
        settings = refs.get(slot, {}).get("settings") or {}
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
        plugin = f"{entry.get('distribution') or entry['plugin']} {entry.get('version') or ''}"
        lines.append(f"| {slot} | `{entry['name']}` | {shown} | {plugin.strip()} |")
    if train is not None:
        lines += ["", "## Training", "",
                  f"Trained with `zoo train {train.name}` on the `{train.task.name}` task: "
                  f"{train.optimizer.name} (peak lr {train.optimizer.lr:g}), "
                  f"{train.schedule.name} schedule with {train.schedule.warmup_steps} warmup steps, "
                  f"batch {train.batch_size}, {_loss(train.loss)} loss, "
                  f"{train.precision}."]
        if results:
            lines.append(f"It ran {results.get('step')} steps ({results.get('epochs')} epochs) "
                         f"in {results.get('seconds')} s. The training recipe is `train.yaml`.")
        if test:
            lines += ["", "| test metric | value |", "|---|---|"]
            lines += [f"| {k} | {v:.4g} |" for k, v in sorted(test.items())]
    lines += ["", "## Usage", "", "```python", "import zoo", "",
              f'model = zoo.build("hf-hub:{repo_id or "OWNER/REPO"}")'
              '  # or zoo.build("local-dir:path/to/folder")',
              "```", "",
              "Weights are safetensors only; the config names registered zoo components and no "
              "code. `pip install zoo-transformers` (and any plugin listed above) to load it."]
    body = "\n".join(lines) + "\n"
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")
