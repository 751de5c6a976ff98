"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017): 70,000 28x28 grey images of 10 kinds
of clothing, read from Debian's ``dataset-fashion-mnist`` package (its four idx
``.gz`` files) with numpy. The last ``valid_size`` training images form the
validation split; the 10,000 test images are the test split. Training images
get a random horizontal flip and a random shift of up to ``shift`` pixels.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import TaskDataError, missing_debian_package

DATA = Path("/usr/share/datasets/fashion-mnist")
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]
MEAN, STD = 0.2860, 0.3530


def read_idx(path: Path) -> np.ndarray:
    """An idx file (gzip'd): magic 0x00000803 for images (n, rows, cols), 0x00000801 labels."""
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    magic = int.from_bytes(raw[:4], "big")
    dims = magic & 0xFF
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise TaskDataError(f"{path} is truncated: {data.size} values for shape {shape}")
    return data.reshape(shape)


class FashionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    valid_size: int = Field(5000, ge=0)
    flip: bool = True
    shift: int = Field(2, ge=0)
    max_train: int | None = Field(None, ge=1)


class FashionMNIST:
    Settings = FashionSettings
    unit = "images"
    metric = "accuracy"

    def __init__(self, settings: FashionSettings | None = None, *, seed: int = 0,
                 workdir: Path | None = None, data: Path = DATA) -> None:
        self.settings = settings or FashionSettings()
        self.data_path = Path(data)
        self._splits: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def prepare(self) -> None:
        if self._splits:
            return
        arrays = {}
        for split, (images, labels) in FILES.items():
            paths = [self.data_path / images, self.data_path / labels]
            for p in paths:
                if not p.exists():
                    raise missing_debian_package("dataset-fashion-mnist", p,
                                                 "The fashion-mnist task's data")
            x = torch.from_numpy(read_idx(paths[0]).copy()).float().div_(255).unsqueeze(1)
            arrays[split] = ((x - MEAN) / STD, torch.from_numpy(read_idx(paths[1]).astype(np.int64)))
        x, y = arrays["train"]
        v = self.settings.valid_size
        train_end = len(x) - v
        self._splits = {"train": (x[:train_end], y[:train_end]),
                        "valid": (x[train_end:], y[train_end:]), "test": arrays["test"]}
        if self.settings.max_train is not None:
            tx, ty = self._splits["train"]
            self._splits["train"] = (tx[: self.settings.max_train], ty[: self.settings.max_train])

    def model_overrides(self) -> dict:
        return {"num_classes": 10, "in_chans": 1, "image_size": 28}

    def dataset(self, split: str):
        self.prepare()
        x, y = self._splits[split]
        return _Pairs(x, y)

    def collate(self, items) -> dict:
        images = torch.stack([x for x, _ in items])
        labels = torch.tensor([y for _, y in items])
        return {"images": images, "labels": labels}

    def augment(self, images: torch.Tensor) -> torch.Tensor:
        """Random flips and shifts from torch's global generator, which the training loop
        seeds and checkpoints, so a resumed run draws the same ones."""
        s = self.settings
        if s.flip:
            flip = torch.rand(len(images)) < 0.5
            images = torch.where(flip[:, None, None, None].to(images.device),
                                 images.flip(-1), images)
        if s.shift:
            padded = F.pad(images, (s.shift,) * 4, value=-MEAN / STD)
            dx, dy = torch.randint(0, 2 * s.shift + 1, (2,)).tolist()
            images = padded[..., dy:dy + 28, dx:dx + 28]
        return images

    def loss(self, model, batch: dict, criterion):
        images = self.augment(batch["images"]) if model.training else batch["images"]
        logits = model(images)
        loss = criterion(logits, batch["labels"])
        return loss, len(images)

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int = 500, limit: int | None = None,
                 device=None) -> dict[str, float]:
        self.prepare()
        x, y = self._splits[split]
        if limit is not None:
            x, y = x[:limit], y[:limit]
        device = device or next(model.parameters()).device
        correct, nll = 0, 0.0
        for start in range(0, len(x), batch_size):
            images = x[start:start + batch_size].to(device)
            labels = y[start:start + batch_size].to(device)
            logits = model(images).float()
            correct += int((logits.argmax(-1) == labels).sum())
            nll += float(F.cross_entropy(logits, labels, reduction="sum"))
        return {"accuracy": correct / max(len(x), 1), "loss": nll / max(len(x), 1)}


class _Pairs:
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], int(self.y[i])
