"""Classifying images: ``zoo.classify_image(model, images, labels)``.

Two kinds of model classify images:

- an ``image-text`` model (CLIP, Radford et al. 2021) classifies with no training for the
  labels given (zero-shot): each label becomes a text through ``template`` ("This is a
  photo of {}.", transformers' zero-shot image classification pipeline's), the image's
  probabilities are the softmax of its logits against those texts;
- an ``image-classifier`` (ViT) gives the softmax over its own classes (``labels`` left
  out; their names are :func:`class_names`).

Images are files (a path), PIL images, or pixels already prepared (a tensor (C, H, W) or
(B, C, H, W), taken as they are). Files and PIL images are prepared by the folder's image
processor (``preprocessor_config.json``: resizing, cropping and normalising, through
transformers' class that the file names, never code from the folder), read once per model
(:func:`image_processor`).
"""

from __future__ import annotations

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
    once and kept on the model; a model with no folder, or a folder without the file,
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
    cls = getattr(transformers, str(name), None) if isinstance(name, str) else None
    if cls is None or not name.endswith(("ImageProcessor", "ImageProcessorFast",
                                         "FeatureExtractor")):
        raise FormatError(f"{source}: {PROCESSOR_FILE} names image_processor_type {name!r}, "
                          "which is not one of transformers' image processors "
                          "(CLIPImageProcessor, ViTImageProcessor, ...).")
    try:
        processor = cls.from_pretrained(str(imported.folder))
    except Exception as exc:  # noqa: BLE001 - a processor's own checks raise anything
        raise FormatError(f"{source}: its {PROCESSOR_FILE} could not be read by {name} "
                          f"({str(exc)[:300]}).") from None
    update_record(model, image_processor=processor)
    return processor


def pixels(model: Any, images: Any) -> torch.Tensor:
    """``images`` (one or a list of paths, PIL images, or prepared tensors) as the pixels
    (B, C, H, W) the model reads."""
    if torch.is_tensor(images):
        return images[None] if images.dim() == 3 else images
    items = [images] if isinstance(images, (str, os.PathLike)) or hasattr(images, "size") \
        and not isinstance(images, (list, tuple)) else list(images)
    if not items:
        raise RecipeError("images is empty: give one image or more")
    if all(torch.is_tensor(i) for i in items):
        return torch.stack(items)
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
    prepared = image_processor(model)(images=opened, return_tensors="pt")
    return prepared["pixel_values"]


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
