"""Training recipes: a model recipe with overrides, a task, the optimizer, the
schedule, the batch, the length of the run and its precision. Data only, validated
by pydantic like model recipes, stored as YAML (``recipes/train/*.yaml``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from .._text import describe_validation_error, did_you_mean, quoted, validate_plain
from ..errors import RecipeError
from ..files import atomic_write_text
from ..recipe import ComponentRef, check_data, parse_data, read_text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(_Strict):
    """The model a run trains: a recipe and overrides."""

    recipe: str
    """A model recipe name (``zoo list``) or file; or a pretrained model in a foreign
    format to fine-tune (``hf-hub:Helsinki-NLP/opus-mt-de-en``, ``local-dir:PATH``)."""
    overrides: dict[str, JsonValue] = Field(default_factory=dict)
    """Validated like ``zoo.build`` overrides: slots, settings, ``slot.setting``."""


class OptimizerSpec(_Strict):
    """The optimizer and its settings."""

    name: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = Field(1e-3, gt=0)
    """Peak learning rate (reached at the end of warmup)."""
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = Field(1e-9, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    """Applied to matrices only (never to biases or norm gains)."""
    momentum: float = Field(0.9, ge=0)
    """sgd only."""


class ScheduleSpec(_Strict):
    """The learning-rate schedule, a multiple of the peak rate at each step."""

    name: Literal["inverse-sqrt", "cosine", "one-cycle", "constant", "step"] = "inverse-sqrt"
    """inverse-sqrt: the paper's (sec. 5.3); cosine: warmup then cosine to min_lr_ratio;
    one-cycle: linear up over pct_start, cosine down; constant: warmup then flat; step:
    warmup, then times gamma every step_size steps (StepLR)."""
    warmup_steps: int = Field(4000, ge=0)
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    pct_start: float = Field(0.3, gt=0, lt=1)
    step_size: int = Field(1000, ge=1)
    """step: updates between two decays."""
    gamma: float = Field(0.5, gt=0, le=1)
    """step: the factor of each decay."""
    over: Literal["steps", "time"] = "steps"
    """cosine only: ``time`` runs the curve over the run's ``time_limit_minutes`` or its
    steps (or epochs), whichever budget is further spent at each step, so a run ends at
    ``min_lr_ratio`` whatever stops it: the clock on a slow machine, its steps on a fast
    one (the rate then depends on the clock: such runs do not repeat step for step,
    unless the steps lead all the way, as they do where the machine is fast enough)."""

    @model_validator(mode="after")
    def _over_time_is_cosine(self) -> "ScheduleSpec":
        if self.over == "time" and self.name != "cosine":
            raise ValueError(f"over: time is a setting of the cosine schedule; this schedule "
                             f"is {self.name!r} (use name: cosine, or over: steps)")
        return self


class DecodeSpec(_Strict):
    """How a trained sequence model decodes when it is evaluated."""

    strategy: Literal["greedy", "beam"] = "greedy"
    beam_size: int = Field(4, ge=1)
    alpha: float = Field(0.6, ge=0)
    """Length penalty exponent (GNMT)."""
    max_new_tokens: int = Field(128, ge=1)


class TrainRecipe(_Strict):
    """A training run as data: the model, the task, the optimizer, the schedule, the batch,
    the length of the run and its precision."""

    name: str
    description: str = ""
    model: ModelSpec
    task: ComponentRef
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec)
    batch_size: int = Field(64, ge=1)
    """Examples per optimizer step, over all micro-batches and processes."""
    epochs: int | None = Field(None, ge=1)
    steps: int | None = Field(None, ge=1)
    """Length of the run: exactly one of epochs and steps."""
    batch_by_length: bool = False
    """Batches of examples of similar length, for tasks that tell lengths (``lengths(split)``:
    the sequence tasks): each pool of 100 batches' worth of shuffled examples is sorted by
    length and cut into batches, and the epoch's batches are shuffled. The same examples
    each epoch, far less padding (fairseq's and Marian's batching)."""
    accumulate: int = Field(1, ge=1)
    """Micro-batches per step (gradient accumulation)."""
    clip_norm: float | None = Field(1.0, gt=0)
    loss: ComponentRef = Field(default_factory=lambda: ComponentRef(name="cross-entropy"))
    """The training loss (family ``loss``, ``zoo components loss``) and its settings, e.g.
    ``{name: cross-entropy, settings: {label_smoothing: 0.1}}`` or ``focal``."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """bf16: autocast on CPU and CUDA; fp16: autocast with a gradient scaler, CUDA only."""
    seed: int = Field(0, ge=0, lt=2**32)
    """Seeds Python's, numpy's and torch's generators (numpy takes 32 bits)."""
    eval_every: int | None = Field(None, ge=1)
    """Steps between evaluations on the validation split; None: after every epoch."""
    eval_limit: int | None = Field(None, ge=1)
    """Validation examples used at each evaluation (None: all)."""
    log_every: int = Field(10, ge=1)
    checkpoint_every: int | None = Field(None, ge=1)
    """Steps between checkpoints; None: after every epoch. The end always saves."""
    keep_checkpoints: int = Field(2, ge=1)
    """Checkpoints kept on disk (at least ``average_checkpoints``)."""
    average_checkpoints: int = Field(1, ge=1)
    """The final model is the mean of the weights of the last N checkpoints, the end's among
    them (the paper averages the last 5 for its base models, written every 10 minutes);
    1: the last weights. Set ``checkpoint_every`` to space them."""
    keep_best: bool = False
    """The final model is the one of the best validation evaluation (the task's metric, BLEU
    for translation), not the last; the end of the run is evaluated too."""
    patience: int | None = Field(None, ge=1)
    """Stop once this many evaluations in a row have not improved the best validation metric
    (early stopping on the metric, not on the loss)."""
    target: float | None = None
    """Stop once the task's validation metric reaches this (early stopping)."""
    time_limit_minutes: float | None = Field(None, gt=0)
    """Stop (evaluate, save) once training has run this long."""
    compile: bool = False
    activation_checkpointing: bool = False
    distributed: Literal["ddp", "fsdp"] = "ddp"
    """Under torchrun: DistributedDataParallel, or FSDP (fully_shard)."""
    decode: DecodeSpec = Field(default_factory=DecodeSpec)

    @model_validator(mode="before")
    @classmethod
    def _label_smoothing_is_a_loss_setting(cls, data: Any) -> Any:
        # recipes and saved runs from before the loss family wrote label_smoothing at the top
        if isinstance(data, dict) and "label_smoothing" in data:
            data = dict(data)
            smoothing = data.pop("label_smoothing")
            loss = data.get("loss") or {"name": "cross-entropy"}
            loss = {"name": loss} if isinstance(loss, str) else dict(loss)
            if loss.get("name") != "cross-entropy" and smoothing:
                raise ValueError(f"label_smoothing {smoothing} is a setting of the "
                                 f"cross-entropy loss, and this recipe's loss is "
                                 f"{loss.get('name')!r}; drop label_smoothing")
            if smoothing:
                loss["settings"] = {"label_smoothing": smoothing, **loss.get("settings", {})}
            data["loss"] = loss
        return data

    @field_validator("name")
    @classmethod
    def _one_folder_name(cls, name: str) -> str:
        if not name or name in (".", "..") or name.startswith(".") or any(
                c in name for c in "/\\\0:") or not name.isprintable():
            raise ValueError(f"{name!r} cannot name a run: the run folder is runs/NAME, so "
                             "the name is one plain folder name (no '/', '\\', ':', no "
                             "leading '.'), e.g. 'sort-rope'")
        return name

    @model_validator(mode="after")
    def _length(self) -> "TrainRecipe":
        if (self.epochs is None) == (self.steps is None):
            raise ValueError("give exactly one of epochs and steps (e.g. epochs: 50)")
        if self.schedule.over == "time" and self.time_limit_minutes is None:
            raise ValueError("schedule over: time runs over time_limit_minutes, and this "
                             "recipe has none; set time_limit_minutes (e.g. 30) or over: steps")
        if self.keep_best and self.average_checkpoints > 1:
            raise ValueError(f"keep_best and average_checkpoints {self.average_checkpoints} both "
                             "choose the final model; keep one (average_checkpoints: 1, or "
                             "keep_best: false)")
        if self.batch_size % self.accumulate:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by accumulate "
                             f"{self.accumulate}")
        return self


SECTIONS = {"model", "task", "optimizer", "schedule", "decode", "train", "loss"}


def apply_train_overrides(recipe: TrainRecipe, overrides: dict[str, Any]) -> TrainRecipe:
    """``model`` (another model recipe, or a pretrained model to fine-tune:
    ``hf-hub:Helsinki-NLP/opus-mt-de-en``; the recipe's own model overrides are dropped
    with its model, whatever the order), ``model.X`` (a model override), ``task.X`` (a
    task setting), ``optimizer.X``,
    ``schedule.X``, ``decode.X``, ``train.X`` (a top-level field such as steps),
    ``loss.name`` (another loss: its settings start afresh) and ``loss.X`` (a setting)."""
    check_data(dict(overrides), "training overrides")
    data = recipe.model_dump(mode="json")
    if "model" in overrides:  # another model: a recipe, or a pretrained one to fine-tune
        value = overrides["model"]
        if not isinstance(value, str):
            raise RecipeError(f"model={value!r}: name a model recipe, a recipe file, "
                              "local-dir:PATH or hf-hub:OWNER/NAME.")
        # its settings start afresh, as loss.name's: the recipe's model overrides were
        # written for its own model (lm-english's widths cannot reshape a GPT-2)
        data["model"] = {"recipe": value, "overrides": {}}
    for key, value in overrides.items():
        if key == "model":
            continue
        section, _, rest = key.partition(".")
        if section not in SECTIONS or not rest:
            raise RecipeError(
                f"Unknown training override {key!r}.{did_you_mean(section, SECTIONS)} Keys are "
                f"'section.name' with section one of {quoted(sorted(SECTIONS))}, e.g. "
                "model.attention=rope, train.steps=2000, optimizer.lr=5e-4, task.seq_len=10, "
                "loss.name=focal, loss.gamma=2."
            )
        if section == "model":
            data["model"]["overrides"][rest] = value
        elif section == "task":
            data["task"].setdefault("settings", {})[rest] = value
        elif section == "loss":
            if rest == "name":
                data["loss"] = {"name": value, "settings": {}}
            else:
                data["loss"].setdefault("settings", {})[rest] = value
        elif section == "train" and rest == "label_smoothing":  # the old spelling
            data["loss"].setdefault("settings", {})[rest] = value
        elif section == "train":
            if rest not in TrainRecipe.model_fields or rest in SECTIONS:
                fields = [f for f in TrainRecipe.model_fields if f not in SECTIONS]
                raise RecipeError(f"Unknown training setting {rest!r}."
                                  f"{did_you_mean(rest, fields)} Settings: {quoted(fields)}.")
            data[rest] = value
            if rest in ("epochs", "steps"):  # one replaces the other
                data["steps" if rest == "epochs" else "epochs"] = None
        else:
            data[section][rest] = value
    try:
        return validate_plain(TrainRecipe, data)
    except ValidationError as exc:
        raise RecipeError(describe_validation_error(exc, f"training recipe {recipe.name!r}",
                                                    TrainRecipe)) from None


def load_train_recipe(path: str | Path) -> TrainRecipe:
    """A training recipe from a YAML file (its name defaults to the file's stem)."""
    path = Path(path)
    if not path.exists():
        raise RecipeError(f"No training recipe file {str(path)!r}.")
    data = parse_data(read_text(path, "training recipe"), str(path), path.suffix)
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a training recipe is a mapping (name, model, task, ...).")
    data.setdefault("name", path.stem)
    try:
        return validate_plain(TrainRecipe, data)
    except ValidationError as exc:
        raise RecipeError(describe_validation_error(exc, f"training recipe {str(path)!r}",
                                                    TrainRecipe)) from None


def _builtin() -> dict[str, Any]:
    folder = resources.files("zoo.recipes").joinpath("train")
    return {p.name.rsplit(".", 1)[0]: p for p in folder.iterdir()
            if p.name.endswith((".yaml", ".yml"))}


def list_train_recipes() -> list[str]:
    """The names of the built-in training recipes."""
    return sorted(_builtin())


def get_train_recipe(name: str | Path | TrainRecipe) -> TrainRecipe:
    """A built-in training recipe by name (``zoo train sort``), or a file."""
    if isinstance(name, TrainRecipe):
        return name
    builtin = _builtin()
    if str(name) in builtin:
        text = builtin[str(name)].read_text(encoding="utf-8")
        data = parse_data(text, str(name))
        try:
            return validate_plain(TrainRecipe, data)
        except ValidationError as exc:
            raise RecipeError(describe_validation_error(exc, f"training recipe {name!r}",
                                                        TrainRecipe)) from None
    if Path(name).suffix in (".yaml", ".yml", ".json") or Path(name).exists():
        return load_train_recipe(name)
    raise RecipeError(f"No training recipe {str(name)!r}.{did_you_mean(str(name), builtin)} "
                      f"Built-in: {quoted(sorted(builtin))}; or give a YAML file.")


def dump_train_recipe(recipe: TrainRecipe) -> str:
    """The training recipe as YAML text."""
    return yaml.safe_dump(recipe.model_dump(mode="json", exclude_none=False), sort_keys=False)


def save_train_recipe(recipe: TrainRecipe, path: str | Path) -> Path:
    """Write the training recipe as YAML, atomically."""
    return atomic_write_text(path, dump_train_recipe(recipe))
