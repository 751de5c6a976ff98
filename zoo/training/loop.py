"""The training loop: ``zoo.train(recipe)`` and ``zoo train RECIPE``.

One step: the batch (the same examples in the same order for a given seed and
epoch) is cut into ``accumulate`` x processes micro-batches; each process runs
its share forward and backward (bf16/fp16 autocast when asked); the gradients
are averaged, clipped, and the optimizer and schedule step. Under ``torchrun``
the processes average through DistributedDataParallel (or FSDP), so 2 processes
compute what one process with twice the accumulation computes.

Everything a run writes is in its folder: ``train.yaml`` (the recipe as run),
``metrics.jsonl`` (one JSON object per log line), ``checkpoints/``, and at the
end ``model.safetensors``, ``model.yaml`` and ``results.json``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import RecipeError
from ..recipe import atomic_write_text, dump_recipe
from ..registry import registry
from . import schedules
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, set_rng_state
from .config import (
    TrainRecipe,
    apply_train_overrides,
    get_train_recipe,
    load_train_recipe,
    save_train_recipe,
)


@dataclass
class RunResult:
    run_dir: Path
    step: int
    metrics: dict[str, float]
    model: Any
    task: Any
    interrupted: bool = False


class Interrupted(Exception):
    """Training stopped by Ctrl-C after saving a checkpoint."""

    def __init__(self, run_dir: Path, step: int) -> None:
        super().__init__(f"interrupted at step {step}; checkpoint saved. Continue with: "
                         f"zoo train --resume {run_dir}")
        self.run_dir, self.step = run_dir, step


def new_run_dir(name: str, root: Path = Path("runs")) -> Path:
    """runs/NAME, or runs/NAME-2, -3, ... when taken."""
    path, n = root / name, 1
    while path.exists() and any(path.iterdir()):
        n += 1
        path = root / f"{name}-{n}"
    return path


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class _Dist:
    """torchrun's environment, or a single process."""

    def __init__(self, device: torch.device) -> None:
        import torch.distributed as dist

        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.dist = dist
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def mean(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        self.dist.all_reduce(t)
        return float(t) / self.world

    def barrier(self) -> None:
        if self.world > 1:
            self.dist.barrier()


def _optimizer(spec, model) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": spec.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if spec.name == "sgd":
        return torch.optim.SGD(groups, lr=spec.lr, momentum=spec.momentum)
    cls = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    return cls(groups, lr=spec.lr, betas=spec.betas, eps=spec.eps)


def _device(requested) -> torch.device:
    if requested is not None:
        return torch.device(requested)
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local)
    return torch.device("cpu")


def _autocast(precision: str, device: torch.device):
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "fp16" and device.type != "cuda":
        raise RecipeError("precision fp16 needs a CUDA device (it uses a gradient scaler); "
                          "on the CPU use bf16.")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


class _Log:
    def __init__(self, run_dir: Path, enabled: bool) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.enabled = enabled
        self.tb = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tensorboard"))
            except Exception:  # tensorboard is optional
                self.tb = None

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        if self.tb is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key not in ("step", "epoch"):
                    self.tb.add_scalar(f"{row.get('split', 'train')}/{key}", value, row["step"])


def _to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v
            for k, v in batch.items()}


def build_task(recipe: TrainRecipe, run_dir: Path | None):
    component = registry.get("task", recipe.task.name)
    settings = component.validate_settings(recipe.task.settings)
    return component.load()(settings, seed=recipe.seed, workdir=run_dir)


def check(recipe: TrainRecipe) -> None:
    """Everything about a recipe that can be checked before a run folder exists: the
    task and its settings, the model recipe and its overrides."""
    from ..recipe import get_recipe
    from ..resolver import resolve

    registry.get("task", recipe.task.name).validate_settings(recipe.task.settings)
    resolve(get_recipe(recipe.model.recipe), dict(recipe.model.overrides))


def build_model(recipe: TrainRecipe, task, device) -> Any:
    from ..builder import build

    overrides = {**recipe.model.overrides, **task.model_overrides()}
    model = build(recipe.model.recipe, device=device, **overrides)
    return model


def train(
    recipe: str | Path | TrainRecipe | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    device: str | torch.device | None = None,
    progress: bool = True,
    stop_after_steps: int | None = None,
) -> RunResult:
    """Train a recipe (a built-in name, a file or a :class:`TrainRecipe`), or continue
    the run in ``resume``. Returns the run's folder, final step, test metrics, the
    trained model and the task."""
    if resume is not None:
        run_dir = Path(resume)
        if not (run_dir / "train.yaml").exists():
            raise RecipeError(f"{run_dir} holds no run (no train.yaml); give a run folder "
                              "made by zoo train.")
        recipe = load_train_recipe(run_dir / "train.yaml")
        if overrides:
            recipe = apply_train_overrides(recipe, overrides)
    else:
        if recipe is None:
            raise RecipeError("name a training recipe (e.g. 'sort') or resume= a run folder")
        recipe = get_train_recipe(recipe)
        if overrides:
            recipe = apply_train_overrides(recipe, overrides)
    check(recipe)  # a bad recipe fails here, leaving nothing on disk
    device = _device(device)
    dist = _Dist(device)
    if run_dir is None:
        run_dir = new_run_dir(recipe.name)
        if dist.world > 1:  # every process must agree on the folder
            names = [str(run_dir)]
            dist.dist.broadcast_object_list(names, src=0)
            run_dir = Path(names[0])
    run_dir = Path(run_dir)
    if resume is None and (run_dir / "train.yaml").exists():
        raise RecipeError(f"{run_dir} already holds a run; continue it with --resume {run_dir} "
                          "(resume=...), or choose another folder.")
    if dist.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_train_recipe(recipe, run_dir / "train.yaml")
    dist.barrier()

    seed_everything(recipe.seed)
    task = build_task(recipe, run_dir)
    task.prepare()
    model = build_model(recipe, task, device)
    if dist.main:
        atomic_write_text(run_dir / "model.yaml", dump_recipe(model.recipe))
    if recipe.activation_checkpointing:
        model.gradient_checkpointing = True
    train_data = task.dataset("train")
    n = len(train_data)
    steps_per_epoch = math.ceil(n / recipe.batch_size)
    total = recipe.steps or recipe.epochs * steps_per_epoch
    optimizer = _optimizer(recipe.optimizer, model)
    factor = schedules.make(recipe.schedule, total)
    # the optimizer's first update is step 1 of the schedule (the paper counts from 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: factor(i + 1))

    step, epoch, position, elapsed = 0, 0, 0, 0.0
    checkpoint = latest_checkpoint(run_dir) if resume is not None else None
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, model, optimizer, scheduler)
        step, epoch, position = state["step"], state["epoch"], state["position"]
        elapsed = state.get("elapsed", 0.0)
        set_rng_state(state["rng"])
    elif resume is not None:
        raise RecipeError(f"{run_dir} has no checkpoint to resume from.")

    forward_model = model
    if dist.world > 1:
        if recipe.distributed == "fsdp":
            from torch.distributed.fsdp import fully_shard

            forward_model = fully_shard(model)
        else:
            forward_model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None)
    if recipe.compile:
        forward_model = torch.compile(forward_model)
    scaler = torch.amp.GradScaler("cuda") if recipe.precision == "fp16" else None
    log = _Log(run_dir, dist.main)
    bar = None
    if progress and dist.main:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=step, desc=recipe.name, unit="step", dynamic_ncols=True,
                   mininterval=1.0)

    def save() -> None:
        if dist.main:
            save_checkpoint(run_dir, step, model, optimizer, scheduler,
                            {"step": step, "epoch": epoch, "position": position,
                             "elapsed": elapsed + time.perf_counter() - started},
                            keep=recipe.keep_checkpoints)
        dist.barrier()

    def evaluate(split: str) -> dict[str, float]:
        model.eval()
        metrics = task.evaluate(model, split, device=device,
                                limit=recipe.eval_limit if split == "valid" else None)
        model.train()
        return metrics

    def validate() -> bool:
        """Evaluate on the validation split; True when the target is reached."""
        reached = torch.zeros(1)
        if dist.main:
            metrics = evaluate("valid")
            log.write({"step": step, "epoch": epoch, "split": "valid", **metrics})
            if recipe.target is not None and metrics.get(task.metric, -math.inf) >= recipe.target:
                reached[0] = 1
        if dist.world > 1:
            dist.dist.broadcast(reached, src=0)
        return bool(reached[0])

    micro = recipe.accumulate * dist.world
    window_units, window_loss, window_start = 0, [], time.perf_counter()
    started = time.perf_counter()
    model.train()
    stopped_early = False
    interrupt = _InterruptFlag()
    try:
        interrupt.install()
        while step < total:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(
                recipe.seed * 7919 + epoch)).tolist()
            batches = [order[i:i + recipe.batch_size] for i in range(0, n, recipe.batch_size)]
            while position < len(batches) and step < total:
                indices = batches[position]
                chunks = [c.tolist() for c in torch.tensor(indices).tensor_split(micro)]
                mine = chunks[dist.rank * recipe.accumulate:(dist.rank + 1) * recipe.accumulate]
                losses = []
                for i, chunk in enumerate(mine):
                    batch = _to(task.collate([train_data[j] for j in chunk]), device)
                    sync = i == len(mine) - 1 or dist.world == 1
                    ctx = contextlib.nullcontext() if sync or not hasattr(forward_model, "no_sync") \
                        else forward_model.no_sync()
                    with ctx:
                        with _autocast(recipe.precision, device):
                            loss, units = task.loss(forward_model, batch, recipe.label_smoothing)
                        scaled = loss / len(mine)
                        (scaler.scale(scaled) if scaler else scaled).backward()
                    losses.append(float(loss.detach()))
                    window_units += units
                if scaler:
                    scaler.unscale_(optimizer)
                if recipe.clip_norm:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_norm)
                lr = optimizer.param_groups[0]["lr"]
                if scaler:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                position += 1
                window_loss.append(sum(losses) / len(losses))
                if step % recipe.log_every == 0 or step == total:
                    now = time.perf_counter()
                    loss_value = dist.mean(sum(window_loss) / len(window_loss))
                    rate = window_units * dist.world / max(now - window_start, 1e-9)
                    log.write({"step": step, "epoch": epoch, "split": "train",
                               "loss": loss_value, "lr": lr, f"{task.unit}_per_s": rate})
                    if bar is not None:
                        bar.set_postfix(loss=f"{loss_value:.4f}", lr=f"{lr:.2e}",
                                        **{f"{task.unit[:3]}/s": f"{rate:,.0f}"}, refresh=False)
                    window_units, window_loss, window_start = 0, [], now
                if bar is not None:
                    bar.update(1)
                interrupt.check()
                if recipe.eval_every and step % recipe.eval_every == 0 and validate():
                    stopped_early = True
                    raise _Stop(interrupted=False)
                if recipe.checkpoint_every and step % recipe.checkpoint_every == 0:
                    save()
                over_time = recipe.time_limit_minutes is not None and (
                    elapsed + time.perf_counter() - started > recipe.time_limit_minutes * 60)
                if stop_after_steps is not None and step >= stop_after_steps:
                    save()
                    raise _Stop(interrupted=True)
                if over_time:
                    stopped_early = True
                    raise _Stop(interrupted=False)
            if position >= len(batches):
                epoch += 1
                position = 0
                if not recipe.eval_every and validate():
                    stopped_early = True
                    break
                if not recipe.checkpoint_every and step < total:
                    save()
    except _Stop as stop:
        if stop.interrupted:
            if bar is not None:
                bar.close()
            return RunResult(run_dir, step, {}, model, task, interrupted=True)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        save()
        raise Interrupted(run_dir, step) from None
    finally:
        interrupt.remove()
    if bar is not None:
        bar.close()
    save()
    metrics: dict[str, float] = {}
    if dist.main:
        metrics = evaluate("test")
        seconds = elapsed + time.perf_counter() - started
        log.write({"step": step, "epoch": epoch, "split": "test", **metrics})
        from safetensors.torch import save_model

        save_model(model, str(run_dir / "model.safetensors"))
        atomic_write_text(run_dir / "results.json", json.dumps(
            {"recipe": recipe.name, "step": step, "epochs": epoch, "seconds": round(seconds, 1),
             "stopped_early": stopped_early, "metric": task.metric,
             "test": metrics}, indent=2) + "\n")
    dist.barrier()
    return RunResult(run_dir, step, metrics, model, task)


class _InterruptFlag:
    """Ctrl-C (SIGINT) noted by a handler and acted on between steps, where the loop
    can save. Python's own KeyboardInterrupt can surface anywhere, including inside
    a finalizer, where it is printed and lost and the run goes on; a second Ctrl-C
    still raises at once."""

    def __init__(self) -> None:
        self.hit = False
        self._previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.hit:
            raise KeyboardInterrupt
        self.hit = True

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt

    def remove(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


class _Stop(Exception):
    def __init__(self, interrupted: bool) -> None:
        self.interrupted = interrupted
