"""The training loop: ``zoo.train(recipe)`` and ``zoo train RECIPE``.

One step: the batch (the same examples in the same order for a given seed and
epoch) is cut into ``accumulate`` x processes micro-batches; each process runs
its share forward and backward (bf16/fp16 autocast when asked); the gradients
are averaged, clipped, and the optimizer and schedule step. Under ``torchrun``
the processes average through DistributedDataParallel (or FSDP), so 2 processes
compute what one process with twice the accumulation computes.

Everything a run writes goes into its folder (:mod:`zoo.training.runs`).
:func:`train` reads as its steps: pick the recipe, open (or resume) the run, wrap
the model, loop over optimizer steps (each followed by its logging, evaluation,
checkpoint and stopping rules), finish. The state lives in one :class:`Trainer`.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, RecipeError, TrainingError
from ..record import record_of
from . import schedules
from .checkpoint import (
    average_checkpoints,
    checkpoints,
    latest_checkpoint,
    load_best,
    load_checkpoint,
    save_best,
    save_checkpoint,
    set_rng_state,
    step_of,
)
from .config import TrainRecipe, apply_train_overrides, get_train_recipe
from .dist import Dist, is_distributed_failure, restart_count
from .runs import (
    TENSORBOARD,
    RunFolder,
    adopt_task_text,
    build_loss,
    build_task,
    is_run,
    new_run_dir,
)
from .setup import (
    _autocast,
    _device,
    _optimizer,
    build_model,
    check,
    check_precision,
    pretrained_model,
    seed_everything,
    set_threads,
)


@dataclass
class RunResult:
    """What :func:`train` returns: the run's folder, its last step, the test metrics (empty
    when it stopped before the end), the trained model and the task."""

    run_dir: Path
    step: int
    metrics: dict[str, float]
    model: Any
    task: Any
    interrupted: bool = False
    samples: list[dict[str, str]] = field(default_factory=list)
    """Test inputs, references and outputs (tasks with ``samples``; also in samples.md)."""


class Interrupted(Exception):
    """Training stopped by Ctrl-C after saving a checkpoint."""

    def __init__(self, run_dir: Path, step: int) -> None:
        super().__init__(f"interrupted at step {step}; checkpoint saved. Continue with: "
                         f"zoo train --resume {run_dir}")
        self.run_dir, self.step = run_dir, step


def train(
    recipe: str | Path | TrainRecipe | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    device: str | torch.device | None = None,
    progress: bool = True,
    stop_after_steps: int | None = None,
    allow_slow_bf16: bool = False,
    threads: int | None = None,
) -> RunResult:
    """Train a recipe (a built-in name, a file or a :class:`TrainRecipe`), or continue
    the run in ``resume``. Returns the run's folder, final step, test metrics, the
    trained model and the task.

    ``precision: bf16`` is refused on a CPU without bf16 units (PyTorch would emulate
    it, about two orders of magnitude slower than fp32) unless ``allow_slow_bf16``.
    ``threads`` sets torch's threads on the CPU (see :func:`set_threads`)."""
    recipe = recipe_to_run(recipe, overrides, resume)
    device = _device(device)
    set_threads(threads, device)
    check(recipe)  # a bad recipe fails here, leaving nothing on disk
    check_precision(recipe.precision, device, allow_slow_bf16=allow_slow_bf16)
    try:
        trainer = Trainer.open(recipe, run_dir=run_dir, resume=resume, device=device)
    except CheckpointError as exc:
        if resume is None or not overrides:
            raise
        raise RecipeError(
            f"The overrides {', '.join(map(repr, overrides))} do not fit the checkpoint of "
            f"{resume}: {getattr(exc, 'reason', exc)} A resumed run keeps its model; nothing "
            "was written. Resume without them, or start a new run with them.") from None
    trainer.wrap_model()
    trainer.dist.stop_on_sigterm(trainer.folder.path, latest_checkpoint)
    try:
        return trainer.run(progress=progress, stop_after_steps=stop_after_steps)
    except Exception as exc:
        if trainer.dist.world == 1 or not is_distributed_failure(exc):
            raise
        path = trainer.folder.path
        raise trainer.dist.failure(exc, path, latest_checkpoint(path)) from None
    finally:
        trainer.dist.close()


def recipe_to_run(recipe: str | Path | TrainRecipe | None, overrides: dict[str, Any] | None,
                  resume: str | Path | None) -> TrainRecipe:
    """The training recipe: the resumed run's own, or the one named; overrides applied."""
    if resume is not None:
        folder = RunFolder(resume)
        if not folder.exists():
            raise RecipeError(f"{folder.path} holds no run (no train.yaml); give a run folder "
                              "made by zoo train.")
        recipe = folder.train_recipe()
    elif recipe is None:
        raise RecipeError("name a training recipe (e.g. 'sort') or resume= a run folder")
    else:
        recipe = get_train_recipe(recipe)
    return apply_train_overrides(recipe, overrides) if overrides else recipe


class _Log:
    """Rows to the run's ``metrics.jsonl`` (and TensorBoard when it is installed), from the
    main process only."""

    def __init__(self, run: RunFolder, enabled: bool) -> None:
        self.run = run
        self.enabled = enabled
        self.tb = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run.path / TENSORBOARD))
            except Exception:  # tensorboard is optional
                self.tb = None

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        self.run.append_metrics(row)
        if self.tb is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key not in ("step", "epoch"):
                    self.tb.add_scalar(f"{row.get('split', 'train')}/{key}", value, row["step"])


def _to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v
            for k, v in batch.items()}


class _Stop(Exception):
    """Leave the loop: ``interrupted`` (stop_after_steps) returns at once, else finish."""

    def __init__(self, interrupted: bool) -> None:
        self.interrupted = interrupted


POOL_BATCHES = 100
"""batch_by_length sorts pools of this many batches' worth of examples."""


def length_batches(order: list[int], lengths: list[int], batch_size: int,
                   generator: torch.Generator) -> list[list[int]]:
    """``order`` (a shuffled list of example indices) cut into batches of similar length:
    each pool of ``POOL_BATCHES * batch_size`` consecutive examples sorted by length and cut
    into batches of ``batch_size``, then the batches shuffled with ``generator``. As many
    batches as plain batching makes; only the last pool's last batch may be short."""
    pool = POOL_BATCHES * batch_size
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffled]


class _Window:
    """Loss and units since the last log line."""

    def __init__(self) -> None:
        self.units, self.losses, self.start = 0, [], time.perf_counter()


class Trainer:
    """One training run's state: its folder, task, model, optimizer, schedule and where it
    is (step, epoch, position in the epoch, seconds already spent before a resume)."""

    def __init__(self, recipe: TrainRecipe, run: RunFolder, dist: Dist, device: torch.device,
                 task: Any, model: Any, criterion: Any, resumed: bool) -> None:
        self.recipe, self.folder, self.dist, self.device = recipe, run, dist, device
        self.task, self.model, self.forward_model = task, model, model
        self.criterion = criterion.to(device)
        self.train_data = task.dataset("train")
        self.lengths = None
        if recipe.batch_by_length:
            if not hasattr(task, "lengths"):
                raise RecipeError(
                    f"batch_by_length needs a task that tells its examples' lengths "
                    f"(lengths(split)); task {recipe.task.name!r} does not. Set "
                    "train.batch_by_length=false.")
            self.lengths = list(task.lengths("train"))
        self.total = recipe.steps or recipe.epochs * math.ceil(len(self.train_data)
                                                               / recipe.batch_size)
        last = len(self.train_data) % recipe.batch_size or recipe.batch_size
        if dist.world > 1 and last < recipe.accumulate * dist.world:
            raise RecipeError(
                f"The last batch of each epoch holds {last} examples, fewer than the "
                f"{recipe.accumulate * dist.world} micro-batches (accumulate x processes) it "
                "is split into. Change batch_size or accumulate so that it divides "
                f"{len(self.train_data)} examples better.")
        self.optimizer = _optimizer(recipe.optimizer, model,  # FSDP shards after this
                                    fused=dist.world == 1 or recipe.distributed == "ddp")
        self.step, self.epoch, self.position, self.elapsed = 0, 0, 0, 0.0
        self.started = time.perf_counter()
        self.agreed: float | None = None  # the processes' common clock, as of the last step
        self.scheduler = schedules.lambda_lr(self.optimizer, recipe.schedule, self.total,
                                             spent=self._time_spent)
        self.stopped_early = False
        self.best: float | None = None  # the best validation metric so far
        self.since_best = 0  # evaluations since it
        self.validated_at = -1  # the step of the last validation
        self.scaler = None
        self.log = _Log(run, dist.main)
        self.bar = None
        if resumed:
            self._restore()

    # -- open or resume the run -----------------------------------------------------------------
    @classmethod
    def open(cls, recipe: TrainRecipe, *, run_dir: str | Path | None, resume: str | Path | None,
             device: torch.device) -> "Trainer":
        """Create the run folder (or open the one to resume), write its recipes, build the
        task and the model; a resumed run continues from its latest checkpoint."""
        dist = Dist(device)
        if resume is not None:
            path = Path(resume)
        elif run_dir is not None:
            path = Path(run_dir)
        else:
            path = dist.same_folder(new_run_dir(recipe.name))
        run = RunFolder(path)
        if path.exists() and not path.is_dir():
            raise RecipeError(f"{path} is a file; a run folder is a folder. Choose another "
                              "--out (run_dir=).")
        if resume is None and is_run(path) and dist.world > 1 and restart_count() > 0:
            resume = path  # torchrun restarted the job: it goes on from its last checkpoint
        elif resume is None and is_run(path):
            raise RecipeError(f"{path} already holds a run; continue it with --resume {path} "
                              "(resume=...), or choose another folder.")
        seed_everything(recipe.seed)
        task = build_task(recipe, path)
        criterion = build_loss(recipe, task)
        model = pretrained_model(recipe, task, device)
        task.prepare()
        if model is None:
            model = build_model(recipe, task, device)
        adopt_task_text(model, task)
        if recipe.activation_checkpointing:
            model.gradient_checkpointing = True
        trainer = cls(recipe, run, dist, device, task, model, criterion,
                      resumed=resume is not None)
        # written only now: a resume whose overrides do not fit its checkpoint, or a task
        # or model that fails to build, changes nothing on disk
        if dist.main:
            run.write_train_recipe(recipe)
            run.write_model_recipe(record_of(model).recipe)
        dist.barrier()
        return trainer

    def _restore(self) -> None:
        """Continue from the latest whole checkpoint; a run killed before its first one
        starts again from step 0."""
        checkpoint = latest_checkpoint(self.folder.path)
        if checkpoint is None:
            warnings.warn(f"{self.folder.path} has no checkpoint yet: the run starts again "
                          "from step 0", RuntimeWarning, stacklevel=2)
            if self.dist.main:
                self.folder.truncate_metrics(after_step=0)
            return
        state = load_checkpoint(checkpoint, self.model, self.optimizer, self.scheduler)
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.elapsed = state.get("elapsed", 0.0)
        self.best, self.since_best = state.get("best"), int(state.get("since_best", 0))
        set_rng_state(state["rng"])
        if self.dist.main:
            self.folder.truncate_metrics(after_step=self.step)

    # -- wrap the model -------------------------------------------------------------------------
    def wrap_model(self) -> None:
        """DistributedDataParallel or FSDP under torchrun, torch.compile when asked, and a
        gradient scaler for fp16."""
        if self.dist.world > 1:
            if self.recipe.distributed == "fsdp":
                from torch.distributed.fsdp import fully_shard

                self.forward_model = fully_shard(self.model)
            else:
                # a model that skips whole layers (LayerDrop) leaves their parameters unused
                self.forward_model = torch.nn.parallel.DistributedDataParallel(
                    self.model,
                    device_ids=[self.device.index] if self.device.type == "cuda" else None,
                    find_unused_parameters=record_of(self.model).drops_layers)
        if self.recipe.compile:
            self.forward_model = torch.compile(self.forward_model)
        if self.recipe.precision == "fp16":
            self.scaler = torch.amp.GradScaler("cuda")

    # -- the loop -------------------------------------------------------------------------------
    def run(self, *, progress: bool, stop_after_steps: int | None) -> RunResult:
        """Train to the end (or an early stop), then finish; Ctrl-C saves and raises
        :class:`Interrupted`."""
        if progress and self.dist.main:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, initial=self.step, desc=self.recipe.name,
                            unit="step", dynamic_ncols=True, mininterval=1.0)
        self.started = time.perf_counter()
        self.model.train()
        interrupt = _InterruptFlag()
        try:
            interrupt.install()
            self._epochs(interrupt, stop_after_steps)
        except _Stop as stop:
            if stop.interrupted:
                self._close_bar()
                return RunResult(self.folder.path, self.step, {}, self.model, self.task,
                                 interrupted=True)
        except KeyboardInterrupt:
            self._close_bar()
            self.save()
            raise Interrupted(self.folder.path, self.step) from None
        except TrainingError:
            self._close_bar()
            raise
        finally:
            interrupt.remove()
        self._close_bar()
        return self.finish()

    def _epochs(self, interrupt: "_InterruptFlag", stop_after_steps: int | None) -> None:
        recipe, n = self.recipe, len(self.train_data)
        window = _Window()
        while self.step < self.total:
            generator = torch.Generator().manual_seed(recipe.seed * 7919 + self.epoch)
            order = torch.randperm(n, generator=generator).tolist()
            if self.lengths is not None:
                batches = length_batches(order, self.lengths, recipe.batch_size, generator)
            else:
                batches = [order[i:i + recipe.batch_size] for i in range(0, n, recipe.batch_size)]
            while self.position < len(batches) and self.step < self.total:
                self.optimizer_step(batches[self.position], window)
                interrupt.check()
                self._after_step(stop_after_steps)
            if self.position >= len(batches):
                self.epoch += 1
                self.position = 0
                if not recipe.eval_every and self.validate():
                    self.stopped_early = True
                    return
                if not recipe.checkpoint_every and self.step < self.total:
                    self.save()

    def optimizer_step(self, indices: list[int], window: _Window) -> None:
        """One optimizer step over the examples ``indices``: this process's micro-batches
        forward and backward, then clip, step, schedule, and log when it is time."""
        recipe, dist = self.recipe, self.dist
        chunks = [c.tolist() for c in torch.tensor(indices).tensor_split(recipe.accumulate
                                                                          * dist.world)]
        mine = chunks[dist.rank * recipe.accumulate:(dist.rank + 1) * recipe.accumulate]
        if dist.world == 1:  # a short last batch leaves some micro-batches empty
            mine = [chunk for chunk in mine if chunk]
        losses = []
        for i, chunk in enumerate(mine):
            batch = _to(self.task.collate([self.train_data[j] for j in chunk]), self.device)
            sync = i == len(mine) - 1 or dist.world == 1
            no_sync = getattr(self.forward_model, "no_sync", None)
            with contextlib.nullcontext() if sync or no_sync is None else no_sync():
                with _autocast(recipe.precision, self.device):
                    loss, units = self.task.loss(self.forward_model, batch, self.criterion)
                scaled = loss / len(mine)
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            losses.append(float(loss.detach()))
            window.units += units
        self._agree(losses)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if recipe.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), recipe.clip_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.position += 1
        window.losses.append(sum(losses) / len(losses))
        if self.step % recipe.log_every == 0 or self.step == self.total:
            self._log_window(window, lr)
        if self.bar is not None:
            self.bar.update(1)

    def _agree(self, losses: list[float]) -> None:
        """What the processes settle together at each step, in one collective: the clock
        (the slowest process's, so that all follow the same schedule over time and stop at
        the same step), and whether any loss is not finite. A NaN or infinite loss stops
        the run before the step is applied, keeping the last good checkpoint (with fp16,
        the gradient scaler skips such steps itself)."""
        bad = float(not all(math.isfinite(x) for x in losses))
        if self.dist.world > 1:
            bad, self.agreed = self.dist.max([bad, self._own_seconds()])
        if self.scaler is not None or bad == 0.0:
            return
        kept = latest_checkpoint(self.folder.path)
        raise TrainingError(
            f"The loss became {next((x for x in losses if not math.isfinite(x)), 'nan')} at "
            f"step {self.step + 1} (epoch {self.epoch}); that step was not applied. "
            + (f"The checkpoint of step {int(kept.name.removeprefix('step-'))} is kept. "
               if kept is not None else "There is no checkpoint yet. ")
            + "Lower optimizer.lr, raise schedule.warmup_steps or set train.clip_norm, then "
            f"continue with: zoo train --resume {self.folder.path} --set optimizer.lr=...")

    def _log_window(self, window: _Window, lr: float) -> None:
        now = time.perf_counter()
        loss = self.dist.mean(sum(window.losses) / len(window.losses))
        rate = window.units * self.dist.world / max(now - window.start, 1e-9)
        unit = self.task.unit
        self.log.write({"step": self.step, "epoch": self.epoch, "split": "train",
                        "loss": loss, "lr": lr, f"{unit}_per_s": rate})
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}",
                                 **{f"{unit[:3]}/s": f"{rate:,.0f}"}, refresh=False)
            self._follow_the_clock((now - window.start) / max(len(window.losses), 1))
        window.units, window.losses, window.start = 0, [], now

    def _after_step(self, stop_after_steps: int | None) -> None:
        """Evaluate, checkpoint and stop when the recipe says so."""
        recipe = self.recipe
        if recipe.eval_every and self.step % recipe.eval_every == 0 and self.validate():
            self.stopped_early = True
            raise _Stop(interrupted=False)
        if recipe.checkpoint_every and self.step % recipe.checkpoint_every == 0:
            self.save()
        over_time = recipe.time_limit_minutes is not None and (
            self.seconds() > recipe.time_limit_minutes * 60)
        if stop_after_steps is not None and self.step >= stop_after_steps:
            self.save()
            raise _Stop(interrupted=True)
        if over_time:
            self._say(f"time limit of {recipe.time_limit_minutes:g} min reached at step "
                      f"{self.step}")
            self.stopped_early = True
            raise _Stop(interrupted=False)

    # -- evaluate, save, finish -----------------------------------------------------------------
    def _time_spent(self) -> float:
        """The share of the time limit used so far (0 without one)."""
        limit = self.recipe.time_limit_minutes
        return self.seconds() / (limit * 60) if limit else 0.0

    def seconds(self) -> float:
        """Training time so far, the time before a resume included; with more than one
        process, the clock they agreed on at the last step."""
        return self._own_seconds() if self.agreed is None else self.agreed

    def _own_seconds(self) -> float:
        return self.elapsed + time.perf_counter() - self.started

    def evaluate(self, split: str) -> dict[str, float]:
        """The task's metrics on ``split`` (the validation split limited by ``eval_limit``)."""
        self.model.eval()
        metrics = self.task.evaluate(self.model, split, device=self.device,
                                     limit=self.recipe.eval_limit if split == "valid" else None)
        self.model.train()
        return metrics

    def validate(self) -> bool:
        """Evaluate on the validation split and follow the best metric (keeping its weights
        with ``keep_best``); True when the target is reached or patience has run out."""
        reached = torch.zeros(1)
        self.validated_at = self.step
        if self.dist.main:
            metrics = self.evaluate("valid")
            self.log.write({"step": self.step, "epoch": self.epoch, "split": "valid", **metrics})
            self._say(f"step {self.step} (epoch {self.epoch}): validation "
                      + ", ".join(f"{k} {v:.5g}" for k, v in metrics.items()))
            target, metric = self.recipe.target, self.task.metric
            lower = getattr(self.task, "lower_is_better", False)  # perplexity, a loss
            sign = -1.0 if lower else 1.0
            value = metrics.get(metric, math.inf if lower else -math.inf)
            if target is not None and sign * value >= sign * target:
                reached[0] = 1
                than = "\u2264" if lower else "\u2265"
                self._say(f"target reached at step {self.step}: validation {metric} "
                          f"{metrics[metric]:.5g} {than} {target:g}")
            if self.best is None or sign * value > sign * self.best:
                self.best, self.since_best = value, 0
                if self.recipe.keep_best:
                    save_best(self.folder.path, self.model, self.step, metric, value)
            else:
                self.since_best += 1
                patience = self.recipe.patience
                if patience is not None and self.since_best >= patience:
                    reached[0] = 1
                    self._say(f"stopping at step {self.step}: validation {metric} has not "
                              f"passed {self.best:.5g} for {patience} evaluations")
        if self.dist.world > 1:
            self.dist.dist.broadcast(reached, src=0)
        return bool(reached[0])

    def save(self) -> None:
        """A checkpoint of this step (written by the main process)."""
        if self.dist.main:
            save_checkpoint(self.folder.path, self.step, self.model, self.optimizer, self.scheduler,
                            {"step": self.step, "epoch": self.epoch, "position": self.position,
                             "elapsed": self.seconds(), "best": self.best,
                             "since_best": self.since_best},
                            keep=max(self.recipe.keep_checkpoints,
                                     self.recipe.average_checkpoints))
        self.dist.barrier()

    def finish(self) -> RunResult:
        """The last checkpoint, the final model (the last weights, the best validation's
        or the mean of the last checkpoints), its test metrics, its weights and
        ``results.json``."""
        self.save()
        if self.recipe.keep_best and self.validated_at != self.step:
            self.validate()  # the end of the run is a candidate too
        metrics: dict[str, float] = {}
        samples: list[dict[str, str]] = []
        if self.dist.main:
            weights = self.final_weights()
            metrics = self.evaluate("test")
            seconds = self.seconds()
            if hasattr(self.task, "samples"):
                self.model.eval()
                samples = self.task.samples(self.model, device=self.device)
                self.model.train()
                self.folder.write_samples(samples)
            self.log.write({"step": self.step, "epoch": self.epoch, "split": "test", **metrics})
            self.folder.write_final(self.model, {
                "recipe": self.recipe.name, "step": self.step, "epochs": self.epoch,
                "seconds": round(seconds, 1), "stopped_early": self.stopped_early,
                "metric": self.task.metric, "weights": weights, "test": metrics})
        self.dist.barrier()
        return RunResult(self.folder.path, self.step, metrics, self.model, self.task,
                         samples=samples)

    def final_weights(self) -> str:
        """Put the final model's weights in place; returns what they are, for results.json."""
        recipe = self.recipe
        if recipe.keep_best:
            best = load_best(self.folder.path, self.model)
            self._say(f"final model: the best validation, step {best['step']} "
                      f"({best['metric']} {best['value']:.5g})")
            return f"best validation (step {best['step']})"
        if recipe.average_checkpoints > 1:
            paths = checkpoints(self.folder.path)[-recipe.average_checkpoints:]
            average_checkpoints(self.model, paths)
            steps = ", ".join(str(step_of(p)) for p in paths)
            self._say(f"final model: the mean of the checkpoints of steps {steps}")
            return f"mean of {len(paths)} checkpoints (steps {steps})"
        return "last"

    def _say(self, message: str) -> None:
        """One line above the progress bar (nothing without one)."""
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)

    def _follow_the_clock(self, seconds_per_step: float) -> None:
        """With a time limit, the bar's total is the step the run will stop at, so its ETA
        is the real one."""
        limit = self.recipe.time_limit_minutes
        if self.bar is None or limit is None or seconds_per_step <= 0:
            return
        left = max(0.0, limit * 60 - self.seconds())
        total = min(self.total, self.step + int(left / seconds_per_step) + 1)
        if total != self.bar.total:
            self.bar.total = total
            self.bar.refresh()

    def _close_bar(self) -> None:
        if self.bar is not None:
            if self.stopped_early:
                self.bar.total = self.bar.n  # it ended here, not at the planned total
                self.bar.refresh()
            self.bar.close()
            self.bar = None


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
