"""Classifying images: ``zoo.classify_image(model, images, labels)``.

Two kinds of model classify images:

- an ``image-text`` model (CLIP, Radford et al. 2021) classifies with no training for the
  labels given (zero-shot): each label becomes a text through ``template`` ("This is a
  photo of {}.", transformers' zero-shot image classification pipeline's), the image's
  probabilities are the softmax of its logits against those texts;
- an ``image-classifier`` (ViT) gives the softmax over its own classes (``labels`` left
  out; their names are :func:`class_names`).

Images are files (a path), PIL images, or pixels already prepared (a float tensor
(C, H, W) or (B, C, H, W) of the model's channels and image size, taken as they are; another
shape is refused by name). Files and PIL images are prepared by the folder's image
processor (``preprocessor_config.json``: resizing, cropping and normalising, through
transformers' class that the file names, never code from the folder), read once per model
(:func:`image_processor`); a value of the file that could not give the model's pixels (a
zero ``image_std``, a ``crop_size`` other than the model's image size) is refused by name
(:func:`check_processor`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Sequence

import torch

from .decoding.text import as_texts, own_tokenizer
from .embedding import on_device
from .errors import FormatError, RecipeError
from .files import read_json
from .foreign import EXTRA
from .kinds import Kind, kind_of
from .record import record_of, update_record

TEMPLATE = "This is a photo of {}."
"""transformers' zero-shot image classification pipeline's hypothesis template."""
PROCESSOR_FILE = "preprocessor_config.json"


def image_processor(model: Any) -> Any:
    """The image processor of ``model``'s folder (transformers' class that its
    ``preprocessor_config.json`` names, one of transformers' own image processors), read
    once and kept on the model; a model with no folder, a folder without the file, or a
    value of the file that could not give the model's pixels (:func:`check_processor`)
    is refused by name."""
    record = record_of(model)
    if record.image_processor is not None:
        return record.image_processor
    imported = record.imported
    if imported is None:
        raise RecipeError("this model came with no image processor (it was not read from a "
                          "folder): give its images as prepared pixels, a tensor (B, C, H, W)")
    source = imported.source
    config = read_json(imported.folder / PROCESSOR_FILE, source)
    name = config.get("image_processor_type") or config.get("feature_extractor_type")
    try:
        import transformers
    except ImportError:
        raise FormatError(f"{source}: its image processor is transformers', which is not "
                          f"installed: pip install '{EXTRA}'.") from None
    cls = _processor_class(transformers, name)
    if cls is None:
        raise FormatError(f"{source}: {PROCESSOR_FILE} names image_processor_type {name!r}, "
                          "which is not one of transformers' image processors "
                          "(CLIPImageProcessor, ViTImageProcessor, ...).")
    try:
        processor = cls.from_pretrained(str(imported.folder))
    except Exception as exc:  # noqa: BLE001 - a processor's own checks raise anything
        raise FormatError(f"{source}: its {PROCESSOR_FILE} could not be read by {name} "
                          f"({str(exc)[:300]}).") from None
    check_processor(processor, config, model)
    update_record(model, image_processor=processor)
    return processor


def _processor_class(transformers: Any, name: Any) -> Any:
    """transformers' image processor class that ``name`` names, or None; a feature
    extractor's name reads as its image processor's, as transformers' own
    ``AutoImageProcessor`` reads it (the first CLIP folders name ``CLIPFeatureExtractor``,
    which transformers 5 no longer has)."""
    if not isinstance(name, str) or not name.endswith(("ImageProcessor", "ImageProcessorFast",
                                                       "FeatureExtractor")):
        return None
    cls = getattr(transformers, name, None)
    if cls is None and name.endswith("FeatureExtractor"):
        cls = getattr(transformers, name.replace("FeatureExtractor", "ImageProcessor"), None)
    return cls


def image_shape(model: Any) -> tuple[int, int]:
    """The channels and the side (in pixels) of the square images ``model`` reads: a
    CLIP's image tower's, a ViT's own."""
    settings = record_of(model).settings
    vision = getattr(settings, "vision", settings)
    return vision.in_chans, vision.image_size


def check_processor(processor: Any, config: dict[str, Any], model: Any) -> None:
    """Refuse, by name, a value that ``processor`` (read from ``preprocessor_config.json``,
    ``config`` as read) holds and that could not give ``model``'s pixels: an
    ``image_mean`` or ``image_std`` that is not a number or one number per channel (a
    deviation not above 0: a zero divides by zero), a ``size`` that is not a positive
    number of pixels, a ``crop_size`` other than the model's image size."""
    chans, side = image_shape(model)
    source = record_of(model).imported.source

    def refuse(key: str, right: str) -> RecipeError:
        said = f"{key}={config[key]!r}" if key in config else \
            f"no {key} ({type(processor).__name__}'s default: {_shown(getattr(processor, key))})"
        return RecipeError(f"{source}: {PROCESSOR_FILE} has {said}, which cannot prepare "
                           f"this model's images: {right}")

    if getattr(processor, "do_normalize", False):
        for key, example in (("image_mean", 0.5), ("image_std", 0.25)):
            numbers = getattr(processor, key, None)
            numbers = list(numbers) if isinstance(numbers, (list, tuple)) else [numbers]
            if len(numbers) not in (1, chans) or not all(
                    _number(n) and (key == "image_mean" or n > 0) for n in numbers):
                what = "numbers" if key == "image_mean" else "numbers above 0"
                default = getattr(type(processor), key, None)
                raise refuse(key, f"give {chans} {what}, one per channel, such as "
                                  f"{list(default or [example] * chans)!r}")
    square = {"height": side, "width": side}
    if getattr(processor, "do_resize", False):
        size = _sizes(getattr(processor, "size", None))
        if not size or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                               for v in size.values()):
            raise refuse("size", f"give a positive number of pixels, such as "
                                 f"{{'shortest_edge': {side}}} or {square}")
    if getattr(processor, "do_center_crop", False):
        crop = _sizes(getattr(processor, "crop_size", None))
        if {k: crop.get(k) for k in square} != square:
            raise refuse("crop_size", f"this model reads images of {side}×{side} pixels: "
                                      f"give {square}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _sizes(size: Any) -> dict[str, Any]:
    """A processor's ``size`` or ``crop_size`` (a number of pixels, a pair, an object, or
    transformers' SizeDict) as an object of its given values."""
    if dataclasses.is_dataclass(size):
        size = dataclasses.asdict(size)
    if isinstance(size, dict):
        return {k: v for k, v in size.items() if v is not None}
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return {"height": size[0], "width": size[1]}
    return {} if size is None else {"height": size, "width": size}


def _shown(value: Any) -> str:
    return repr(_sizes(value)) if dataclasses.is_dataclass(value) else repr(value)


def _checked(model: Any, images: torch.Tensor, processed: bool = False) -> torch.Tensor:
    """``images`` when they are floats (B, C, H, W) of ``model``'s channels and image size;
    anything else refused by name (``processed``: made by the folder's image processor)."""
    chans, side = image_shape(model)
    if images.dim() == 4 and tuple(images.shape[1:]) == (chans, side, side) \
            and images.is_floating_point():
        return images
    got = f"pixels of shape {tuple(images.shape)} and dtype {images.dtype}"
    if processed:
        crops = getattr(image_processor(model), "do_center_crop", False)
        key = "crop_size" if crops else "size"
        raise RecipeError(f"{record_of(model).imported.source}: {PROCESSOR_FILE} prepares "
                          f"{got}, and this model reads (N, {chans}, {side}, {side}): set its "
                          f"{key} to {{'height': {side}, 'width': {side}}}")
    raise RecipeError(f"{got}: this model reads floats (N, {chans}, {side}, {side}), "
                      f"{side}×{side} images of {chans} channels, normalised as its image "
                      "processor normalises them; give files or PIL images to have them "
                      "prepared")


def pixels(model: Any, images: Any) -> torch.Tensor:
    """``images`` (one or a list of paths, PIL images, or prepared tensors) as the pixels
    (B, C, H, W) the model reads; pixels of another shape are refused by name."""
    if torch.is_tensor(images):
        return _checked(model, images[None] if images.dim() == 3 else images)
    items = [images] if isinstance(images, (str, os.PathLike)) or hasattr(images, "size") \
        and not isinstance(images, (list, tuple)) else list(images)
    if not items:
        raise RecipeError("images is empty: give one image or more")
    if all(torch.is_tensor(i) for i in items):
        return torch.cat([_checked(model, i[None]) for i in items])
    from PIL import Image, UnidentifiedImageError

    opened = []
    for item in items:
        if isinstance(item, (str, os.PathLike)):
            path = Path(item)
            if not path.is_file():
                raise RecipeError(f"image {str(path)!r} is not a file")
            try:
                with Image.open(path) as image:
                    opened.append(image.convert("RGB"))
            except (UnidentifiedImageError, OSError) as exc:
                raise RecipeError(f"image {str(path)!r} could not be read as an image "
                                  f"({exc})") from None
        elif isinstance(item, Image.Image):
            opened.append(item.convert("RGB"))
        else:
            raise RecipeError(f"an image is a path, a PIL image or a tensor, not "
                              f"{type(item).__name__}")
    processor = image_processor(model)
    try:
        prepared = processor(images=opened, return_tensors="pt")["pixel_values"]
    except Exception as exc:  # noqa: BLE001 - a processor's own checks raise anything
        raise RecipeError(f"{record_of(model).imported.source}: its {PROCESSOR_FILE} could "
                          f"not prepare the images ({type(exc).__name__}: {str(exc)[:300]}); "
                          "correct the file's values") from None
    return _checked(model, prepared, processed=True)


def class_names(model: Any) -> list[str]:
    """An image classifier's class names (its folder's ``id2label``), else ``class i``."""
    record = record_of(model)
    count = record.settings.num_classes
    labels = (record.imported.config.get("id2label") or {}) if record.imported else {}
    return [str(labels.get(str(i), labels.get(i, f"class {i}"))) for i in range(count)]


def classify_image(model: Any, images: Any, labels: Sequence[str] | None = None, *,
                   template: str = TEMPLATE) -> torch.Tensor:
    """Probabilities (images, labels) of each image: against ``labels`` for an
    ``image-text`` model (CLIP, zero-shot: each label put in ``template``), over its own
    classes for an ``image-classifier`` (``labels`` left out; :func:`class_names`)."""
    kind = kind_of(model)
    if kind not in (Kind.IMAGE_TEXT, Kind.IMAGE_CLASSIFIER):
        raise RecipeError(f"classify_image needs an image model (CLIP, ViT); this model is "
                          f"{'a ' + kind if kind else 'of no kind zoo classifies with'}")
    with torch.no_grad():
        was = model.training
        model.eval()
        try:
            images = pixels(model, images).to(next(model.parameters()).device)
            if kind is Kind.IMAGE_CLASSIFIER:
                if labels is not None:
                    raise RecipeError("an image classifier's labels are its own classes "
                                      "(zoo.classifying.class_names): leave labels out")
                return model(images).float().softmax(-1)
            return _zero_shot(model, images, labels, template)
        finally:
            model.train(was)


def _zero_shot(model: Any, images: torch.Tensor, labels: Sequence[str] | None,
               template: str) -> torch.Tensor:
    """CLIP's probabilities of each label for each image."""
    labels = as_texts(labels, "labels") if labels is not None else None
    if not labels:
        raise RecipeError("labels is empty: zero-shot classification needs the labels to "
                          "choose from, such as ['cat', 'dog']")
    if not isinstance(template, str) or "{}" not in template:
        raise RecipeError(f"template {template!r} is a text with {{}} where the label goes, "
                          f"such as {TEMPLATE!r}")
    tokenizer = own_tokenizer(model)
    batch = tokenizer([template.format(label) for label in labels], padding=True,
                      truncation=True, return_tensors="pt")
    tokens, keep, _ = on_device(batch, images.device)
    logits = model(images, tokens, padding_mask=~keep)
    return logits.float().softmax(-1)
