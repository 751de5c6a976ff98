"""The clip format and zero-shot classification: a CLIP folder made by transformers from
openai/clip-vit-base-patch32's config (widths shrunk, every other key kept), with a CLIP
tokenizer and image processor of its own, gives CLIPModel's logits and transformers'
zero-shot image classification pipeline's probabilities, through zoo.classify_image and
zoo classify; a ViT classifier's probabilities through the same entrance."""

from __future__ import annotations

import json

import pytest
import torch

import zoo
from zoo.errors import FormatError, RecipeError

from .conftest import run_zoo

tf = pytest.importorskip("transformers")
Image = pytest.importorskip("PIL.Image")

TEXT = {"attention_dropout": 0.0, "bos_token_id": 0, "dropout": 0.0, "eos_token_id": 2,
        "hidden_act": "quick_gelu", "hidden_size": 512, "initializer_factor": 1.0,
        "initializer_range": 0.02, "intermediate_size": 2048, "layer_norm_eps": 1e-05,
        "max_position_embeddings": 77, "model_type": "clip_text_model",
        "num_attention_heads": 8, "num_hidden_layers": 12, "pad_token_id": 1,
        "projection_dim": 512, "vocab_size": 49408}
VISION = {"attention_dropout": 0.0, "dropout": 0.0, "hidden_act": "quick_gelu",
          "hidden_size": 768, "image_size": 224, "initializer_factor": 1.0,
          "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
          "model_type": "clip_vision_model", "num_attention_heads": 12, "num_channels": 3,
          "num_hidden_layers": 12, "patch_size": 32, "projection_dim": 512}
PUBLISHED = {"architectures": ["CLIPModel"], "initializer_factor": 1.0,
             "logit_scale_init_value": 2.6592, "model_type": "clip", "projection_dim": 512,
             "text_config": TEXT, "vision_config": VISION, "torch_dtype": "float32",
             "transformers_version": "4.21.3"}
"""openai/clip-vit-base-patch32's config.json (its towers' keys that the published file
repeats from transformers' defaults left out); its text eos_token_id of 2 reads each
text's vector at its highest id, the end token."""
LABELS = ["cat", "dog", "the photo", "hot dog"]


def _tokenizer(folder):
    """A CLIP tokenizer (byte-level BPE with CLIP's end-of-word marks) over 523 tokens,
    <|startoftext|> 521 and <|endoftext|> 522 (the highest id, as in CLIP's)."""
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = [chr(b) for b in bs] + [chr(256 + n) for n in range(256 - len(bs))]
    merges = [("t", "h"), ("th", "e</w>"), ("p", "h"), ("o", "t"), ("a", "t</w>"),
              ("c", "at</w>"), ("d", "o"), ("do", "g</w>"), ("i", "s</w>")]
    vocab = [*chars, *(c + "</w>" for c in chars), *(a + b for a, b in merges),
             "<|startoftext|>", "<|endoftext|>"]
    tf.CLIPTokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=merges) \
        .save_pretrained(folder)


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    """(transformers' CLIPModel, its folder): the published config shrunk, weights drawn
    wide, the tokenizer above and CLIP's image processor for 32-pixel images."""
    folder = tmp_path_factory.mktemp("clip")
    torch.manual_seed(0)
    small = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                 num_attention_heads=4)
    config = {**PUBLISHED, "projection_dim": 16,
              "text_config": {**TEXT, **small, "vocab_size": 523, "max_position_embeddings": 24,
                              "bos_token_id": 521, "projection_dim": 16},
              "vision_config": {**VISION, **small, "image_size": 32, "patch_size": 8,
                                "projection_dim": 16}}
    model = tf.CLIPModel(tf.CLIPConfig(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(config))
    _tokenizer(folder)
    tf.CLIPImageProcessor(size={"shortest_edge": 32},
                          crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return tf.CLIPModel.from_pretrained(folder).eval(), folder


def _images(tmp_path):
    """Three images of other sizes than the model's (resized and cropped), as files."""
    g = torch.Generator().manual_seed(2)
    paths = []
    for i, (w, h) in enumerate([(40, 30), (32, 48), (64, 64)]):
        pixels = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8)
        paths.append(tmp_path / f"image{i}.png")
        Image.fromarray(pixels.numpy()).save(paths[-1])
    return paths


def test_a_clip_folder_gives_transformers_logits(clip_folder):
    reference, folder = clip_folder
    ours = zoo.build(f"local-dir:{folder}")
    assert ours.kind == "image-text" and ours.settings.eos_id is None
    tokens = torch.randint(3, 500, (3, 9))
    tokens[:, -1] = 522
    tokens[1, 5:] = 522  # padded with the end token, as CLIP's tokenizer pads
    mask = torch.ones_like(tokens)
    mask[1, 6:] = 0
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=mask, pixel_values=images)
        got = ours(images, tokens, padding_mask=mask == 0)
    assert (got - expected.logits_per_image).abs().max() < 1e-5
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in reference.parameters())


def test_zero_shot_probabilities_are_transformers_pipelines(clip_folder, tmp_path):
    reference, folder = clip_folder
    pipe = tf.pipeline("zero-shot-image-classification", model=str(folder), device="cpu")
    paths = _images(tmp_path)
    ours = zoo.build(f"local-dir:{folder}")
    got = zoo.classify_image(ours, paths, LABELS)
    assert got.shape == (3, len(LABELS))
    for path, row in zip(paths, got):
        expected = {r["label"]: r["score"] for r in pipe(str(path), candidate_labels=LABELS)}
        assert max(abs(expected[label] - p) for label, p in zip(LABELS, row.tolist())) < 1e-5
    # a PIL image and the CLI give the same
    with Image.open(paths[0]) as image:
        assert torch.allclose(zoo.classify_image(ours, image, LABELS), got[:1], atol=1e-6)
    said = run_zoo("classify", f"local-dir:{folder}", str(paths[0]), "--labels", *LABELS)
    assert said.returncode == 0, said.stderr
    line = json.loads(said.stdout.splitlines()[0])
    assert line["image"] == str(paths[0])
    best = max(range(len(LABELS)), key=lambda i: got[0, i].item())
    assert line["labels"][0] == {"label": LABELS[best], "score": round(got[0, best].item(), 6)}


def test_a_clip_whose_end_token_is_named_reads_its_first_place(clip_folder, tmp_path):
    """Later CLIP configs name the end token: the text's vector is read at its first
    place, not at the highest id (which a token after the end may exceed)."""
    _, folder = clip_folder
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["eos_token_id"] = 300
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors",):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    reference = tf.CLIPModel.from_pretrained(tmp_path).eval()
    ours = zoo.build(f"local-dir:{tmp_path}")
    tokens = torch.tensor([[5, 300, 510, 400], [7, 8, 300, 3]])
    with torch.no_grad():
        expected = reference.get_text_features(input_ids=tokens).pooler_output
        assert (ours.text_features(tokens) - expected).abs().max() < 1e-5


def test_a_vit_classifier_classifies_through_the_same_entrance(tmp_path):
    torch.manual_seed(0)
    config = tf.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=40,
                          id2label={0: "plane", 1: "car", 2: "bird"})
    reference = tf.ViTForImageClassification(config).eval()
    reference.save_pretrained(tmp_path)
    tf.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    paths = _images(tmp_path)
    ours = zoo.build(f"local-dir:{tmp_path}")
    pipe = tf.pipeline("image-classification", model=str(tmp_path), device="cpu")
    got = zoo.classify_image(ours, paths)
    for path, row in zip(paths, got):
        expected = {r["label"]: r["score"] for r in pipe(str(path), top_k=3)}
        names = zoo.classifying.class_names(ours)
        assert max(abs(expected[n] - p) for n, p in zip(names, row.tolist())) < 1e-5
    with pytest.raises(RecipeError, match="leave labels out"):
        zoo.classify_image(ours, paths, ["plane"])


def test_what_classify_image_refuses(clip_folder, tmp_path):
    _, folder = clip_folder
    ours = zoo.build(f"local-dir:{folder}")
    (tmp_path / "not.png").write_text("not an image")
    for images, labels, says in [
        ([tmp_path / "not.png"], LABELS, "could not be read as an image"),
        ([tmp_path / "absent.png"], LABELS, "is not a file"),
        ([3], LABELS, "not int"),
        (torch.zeros(1, 3, 32, 32), [], "labels is empty"),
        (torch.zeros(1, 3, 32, 32), "cat", "not one str"),
    ]:
        with pytest.raises(RecipeError, match=says):
            zoo.classify_image(ours, images, labels)
    with pytest.raises(RecipeError, match="needs an image model"):
        zoo.classify_image(zoo.build("llama-tiny"), torch.zeros(1, 3, 32, 32), LABELS)


def test_pixels_of_another_shape_than_the_models_images_are_refused(clip_folder):
    _, folder = clip_folder
    ours = zoo.build(f"local-dir:{folder}")
    for images in [torch.zeros(1, 3, 17, 23), torch.zeros(1, 1, 32, 32), torch.zeros(32, 32),
                   [torch.zeros(3, 32, 32), torch.zeros(3, 16, 16)],
                   torch.zeros(1, 3, 32, 32, dtype=torch.uint8)]:
        with pytest.raises(RecipeError, match=r"pixels of shape .*this model reads floats "
                                              r"\(N, 3, 32, 32\)"):
            zoo.classify_image(ours, images, LABELS)
    assert zoo.classify_image(ours, [torch.zeros(3, 32, 32)] * 2, LABELS).shape == (2, 4)


@pytest.mark.parametrize("change, key, right", [
    ({"image_std": [0, 0, 0]}, "image_std", "3 numbers above 0"),
    ({"image_std": 0.0}, "image_std", "3 numbers above 0"),
    ({"image_mean": [0.5, 0.5]}, "image_mean", "3 numbers, one per channel"),
    ({"crop_size": {"height": 72, "width": 72}}, "crop_size", "32×32 pixels"),
    ({"crop_size": 224, "size": 224}, "crop_size", "32×32 pixels"),
    ({"size": {"shortest_edge": 0}}, "size", "a positive number of pixels"),
], ids=["zero-std", "zero-std-number", "two-means", "larger-crop", "crop-number", "zero-size"])
def test_a_processor_that_cannot_prepare_the_models_images_is_refused_by_name(
        clip_folder, tmp_path, change, key, right):
    """Each value makes transformers' own processor fail (or give pixels that are not
    finite, or not the model's size); zoo names the file, the key and what is right."""
    _, folder = clip_folder
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    _tokenizer(tmp_path)
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({**processor, **change}))
    image = Image.new("RGB", (40, 30), (10, 200, 30))
    try:
        theirs = tf.CLIPImageProcessor.from_pretrained(tmp_path)(image, return_tensors="pt")
        pixels = theirs["pixel_values"]
        assert not pixels.isfinite().all() or pixels.shape[-2:] != (32, 32)
    except (ValueError, RuntimeError):
        pass
    ours = zoo.build(f"local-dir:{tmp_path}")
    with pytest.raises(RecipeError, match=rf"preprocessor_config.json has {key}=.*{right}"):
        zoo.classify_image(ours, image, LABELS)


def test_what_zoo_cannot_express_is_refused_by_name(clip_folder, tmp_path):
    _, folder = clip_folder
    config = json.loads((folder / "config.json").read_text())
    for change, says in [
        ({"vision_config": {**config["vision_config"], "hidden_act": "gelu"}},
         "clip config option vision_config="),
        ({"text_config": {**config["text_config"], "hidden_act": "relu"}},
         "clip text_config config option hidden_act='relu'"),
        ({"architectures": ["CLIPVisionModel"]}, "architectures="),
        ({"text_config": {**config["text_config"], "rope_theta": 1.0}},
         r"clip text_config config options zoo does not know: \['rope_theta'\]"),
    ]:
        (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(FormatError, match=says):
            zoo.build(f"local-dir:{tmp_path}", pretrained=False)


def test_zoo_export_writes_a_clip_folder_with_the_same_zero_shot_probabilities(clip_folder,
                                                                               tmp_path):
    """CLIPModel's config and weights, the tokenizer's and image processor's files beside
    them: transformers' pipeline over the written folder gives zoo's probabilities."""
    from zoo.export import export

    _, folder = clip_folder
    ours = zoo.build(f"local-dir:{folder}")
    export(ours, tmp_path / "out", "transformers")
    assert (tmp_path / "out" / "preprocessor_config.json").is_file()
    back, info = tf.CLIPModel.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    pipe = tf.pipeline("zero-shot-image-classification", model=str(tmp_path / "out"),
                       device="cpu")
    paths = _images(tmp_path)
    got = zoo.classify_image(ours, paths, LABELS)
    for path, row in zip(paths, got):
        expected = {r["label"]: r["score"] for r in pipe(str(path), candidate_labels=LABELS)}
        assert max(abs(expected[label] - p) for label, p in zip(LABELS, row.tolist())) < 1e-5


def test_the_onnx_export_gives_transformers_embeddings_and_logits(clip_folder, tmp_path):
    """image.onnx and text.onnx in ONNX Runtime, at other batch sizes and lengths than the
    export's: CLIPModel's unit-length image_embeds and text_embeds, and with the recorded
    logit_scale its logits_per_image."""
    ort = pytest.importorskip("onnxruntime")
    from zoo.export import export

    reference, folder = clip_folder
    export(zoo.build(f"local-dir:{folder}"), tmp_path / "onnx", "onnx")
    info = json.loads((tmp_path / "onnx" / "zoo-export.json").read_text())
    images = torch.randn(3, 3, 32, 32)
    tokens = torch.randint(3, 500, (4, 11))
    tokens[:, -1] = 522
    tokens[2, 6:] = 522
    mask = torch.ones_like(tokens)
    mask[2, 7:] = 0
    image = ort.InferenceSession(str(tmp_path / "onnx" / "image.onnx"))
    text = ort.InferenceSession(str(tmp_path / "onnx" / "text.onnx"))
    image_embeds = torch.from_numpy(image.run(None, {"pixel_values": images.numpy()})[0])
    text_embeds = torch.from_numpy(text.run(None, {"tokens": tokens.numpy(),
                                                  "padding_mask": (mask == 0).numpy()})[0])
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=mask, pixel_values=images)
    assert (image_embeds - expected.image_embeds).abs().max() < 1e-5
    assert (text_embeds - expected.text_embeds).abs().max() < 1e-5
    logits = image_embeds @ text_embeds.T * info["logit_scale"]
    assert (logits - expected.logits_per_image).abs().max() < 1e-4
