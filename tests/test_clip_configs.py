"""CLIP folders whose config.json is written as the Hub holds the first published CLIPs:
each tower's config carries every key of transformers' config base as transformers 4.16
wrote it (``tie_word_embeddings``, the generation settings, ...), and the later ones
(clip-vit-large-patch14, LAION's) a ``text_config_dict`` and ``vision_config_dict`` that
transformers reads instead of the towers' configs. zoo reads each as transformers'
CLIPModel does: the same logits from the same folder, and the same zero-shot
probabilities from openai's preprocessor_config.json of that time (a
``CLIPFeatureExtractor``, sizes as numbers)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import zoo
from zoo.errors import FormatError

from .test_clip import LABELS, _images, _tokenizer

tf = pytest.importorskip("transformers")

BASE = {  # transformers 4.16's config base, as it wrote it into each tower's config
    "_name_or_path": "", "add_cross_attention": False, "architectures": None,
    "bad_words_ids": None, "chunk_size_feed_forward": 0, "cross_attention_hidden_size": None,
    "decoder_start_token_id": None, "diversity_penalty": 0.0, "do_sample": False,
    "early_stopping": False, "encoder_no_repeat_ngram_size": 0, "finetuning_task": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None,
    "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "is_decoder": False,
    "is_encoder_decoder": False, "label2id": {"LABEL_0": 0, "LABEL_1": 1},
    "length_penalty": 1.0, "max_length": 20, "min_length": 0, "no_repeat_ngram_size": 0,
    "num_beam_groups": 1, "num_beams": 1, "num_return_sequences": 1,
    "output_attentions": False, "output_hidden_states": False, "output_scores": False,
    "prefix": None, "problem_type": None, "pruned_heads": {}, "remove_invalid_values": False,
    "repetition_penalty": 1.0, "return_dict": True, "return_dict_in_generate": False,
    "sep_token_id": None, "task_specific_params": None, "temperature": 1.0,
    "tie_encoder_decoder": False, "tie_word_embeddings": True, "tokenizer_class": None,
    "top_k": 50, "top_p": 1.0, "torch_dtype": None, "torchscript": False,
    "transformers_version": "4.16.0.dev0", "use_bfloat16": False,
}
LATER_BASE = {"exponential_decay_length_penalty": None, "tf_legacy_loss": False,
              "typical_p": 1.0}
"""Keys of the config base that later dumps (clip-vit-large-patch14's) add."""
BASE_PATCH32 = {
    "_name_or_path": "openai/clip-vit-base-patch32", "architectures": ["CLIPModel"],
    "initializer_factor": 1.0, "logit_scale_init_value": 2.6592, "model_type": "clip",
    "projection_dim": 512,
    "text_config": {**BASE, "attention_dropout": 0.0, "bos_token_id": 0, "dropout": 0.0,
                    "eos_token_id": 2, "hidden_act": "quick_gelu", "hidden_size": 512,
                    "initializer_factor": 1.0, "initializer_range": 0.02,
                    "intermediate_size": 2048, "layer_norm_eps": 1e-05,
                    "max_position_embeddings": 77, "model_type": "clip_text_model",
                    "num_attention_heads": 8, "num_hidden_layers": 12, "pad_token_id": 1,
                    "projection_dim": 512, "vocab_size": 49408},
    "text_config_dict": None, "transformers_version": None,
    "vision_config": {**BASE, "attention_dropout": 0.0, "bos_token_id": None,
                      "dropout": 0.0, "eos_token_id": None, "hidden_act": "quick_gelu",
                      "hidden_size": 768, "image_size": 224, "initializer_factor": 1.0,
                      "initializer_range": 0.02, "intermediate_size": 3072,
                      "layer_norm_eps": 1e-05, "model_type": "clip_vision_model",
                      "num_attention_heads": 12, "num_hidden_layers": 12,
                      "pad_token_id": None, "patch_size": 32, "projection_dim": 512},
    "vision_config_dict": None,
}
"""openai/clip-vit-base-patch32's config.json, key for key."""
PROCESSOR = {"crop_size": 224, "do_center_crop": True, "do_normalize": True,
             "do_resize": True, "feature_extractor_type": "CLIPFeatureExtractor",
             "image_mean": [0.48145466, 0.4578275, 0.40821073],
             "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224}
"""openai's preprocessor_config.json of the same time."""
SMALL = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
         "num_attention_heads": 4}


def _large(act: str = "quick_gelu") -> dict:
    """clip-vit-large-patch14's config.json (LAION's: GELU in each tower), the towers'
    sizes in the dicts that transformers reads shrunk; the towers' configs, which those
    replace, keep the published sizes."""
    config = copy.deepcopy(BASE_PATCH32)
    config.update(_name_or_path="clip-vit-large-patch14/", projection_dim=768,
                  torch_dtype="float32")
    config["text_config"].update(LATER_BASE, hidden_act=act, hidden_size=768,
                                 intermediate_size=3072, num_attention_heads=12,
                                 projection_dim=768)
    config["vision_config"].update(LATER_BASE, hidden_act=act, hidden_size=1024,
                                   intermediate_size=4096, num_attention_heads=16,
                                   num_hidden_layers=24, num_channels=3, patch_size=14,
                                   projection_dim=768)
    config["text_config_dict"] = {**SMALL, "projection_dim": 768}
    config["vision_config_dict"] = {**SMALL, "patch_size": 14, "projection_dim": 768}
    if act != "quick_gelu":
        for key in ("text_config_dict", "vision_config_dict"):
            config[key]["hidden_act"] = act
    return config


def _folder(path, config: dict, processor: dict | None = None):
    """transformers' CLIPModel of ``config`` (weights drawn wide) saved in ``path`` with
    ``config`` written as it is, and transformers' model read back from the folder."""
    torch.manual_seed(0)
    model = tf.CLIPModel(tf.CLIPConfig(**copy.deepcopy(config))).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(path)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    if processor is not None:
        (path / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
    return tf.CLIPModel.from_pretrained(path).eval()


def _same_logits(reference, ours, vocab: int, side: int) -> None:
    tokens = torch.randint(3, vocab - 2, (3, 9), generator=torch.Generator().manual_seed(1))
    tokens[:, -1] = vocab - 1
    tokens[1, 5:] = vocab - 1  # padded with the end token, as CLIP's tokenizer pads
    mask = torch.ones_like(tokens)
    mask[1, 6:] = 0
    images = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=mask, pixel_values=images)
        got = ours(images, tokens, padding_mask=mask == 0)
    assert (got - expected.logits_per_image).abs().max() < 1e-5


def test_the_published_base_patch32_folder_gives_transformers_logits_and_probabilities(
        tmp_path):
    """Its config.json key for key (widths shrunk, a vocabulary of 523, 32-pixel
    images), with openai's preprocessor_config.json of the time: transformers' logits,
    and transformers' zero-shot pipeline's probabilities over the same folder."""
    config = copy.deepcopy(BASE_PATCH32)
    config["projection_dim"] = 16
    config["text_config"].update(SMALL, vocab_size=523, max_position_embeddings=24,
                                 projection_dim=16)
    config["vision_config"].update(SMALL, image_size=32, patch_size=8, projection_dim=16)
    folder = tmp_path / "clip"
    reference = _folder(folder, config, {**PROCESSOR, "crop_size": 32, "size": 32})
    _tokenizer(folder)
    ours = zoo.build(f"local-dir:{folder}")
    _same_logits(reference, ours, 523, 32)
    pipe = tf.pipeline("zero-shot-image-classification", model=str(folder), device="cpu")
    paths = _images(tmp_path)
    got = zoo.classify_image(ours, paths, LABELS)
    for path, row in zip(paths, got):
        expected = {r["label"]: r["score"] for r in pipe(str(path), candidate_labels=LABELS)}
        assert max(abs(expected[label] - p) for label, p in zip(LABELS, row.tolist())) < 1e-5


@pytest.mark.parametrize("act", ["quick_gelu", "gelu"], ids=["openai-large", "laion"])
def test_a_config_with_tower_dicts_is_read_from_them_as_transformers_reads_it(tmp_path, act):
    """clip-vit-large-patch14's (and LAION's) config: both towers' configs dumped in full,
    and the dicts that replace them (sizes shrunk; 224-pixel images of 14-pixel
    patches): transformers' logits."""
    config = _large(act)
    reference = _folder(tmp_path, config)
    assert reference.config.text_config.hidden_size == 32  # the dict's, not the dump's
    _same_logits(reference, zoo.build(f"local-dir:{tmp_path}"), 49408, 224)


def test_the_recipe_of_each_config_has_transformers_sizes(tmp_path):
    """What transformers' CLIPConfig reads from each config (an empty tower dict too:
    transformers then takes CLIP's defaults, not the tower's config), zoo's recipe
    reads."""
    empty = {**_large(), "text_config_dict": {}}
    for config in (BASE_PATCH32, _large(), _large("gelu"), empty):
        (tmp_path / "config.json").write_text(json.dumps(config))
        settings = zoo.get_recipe(f"local-dir:{tmp_path}").architecture.settings
        theirs = tf.CLIPConfig(**copy.deepcopy(config))
        t, v = theirs.text_config, theirs.vision_config
        assert (settings["text"]["d_model"], settings["text"]["layers"],
                settings["text"]["n_heads"], settings["text"]["d_ff"],
                settings["text"]["vocab_size"], settings["text"]["max_len"]) == (
            t.hidden_size, t.num_hidden_layers, t.num_attention_heads, t.intermediate_size,
            t.vocab_size, t.max_position_embeddings)
        assert (settings["vision"]["d_model"], settings["vision"]["depth"],
                settings["vision"]["image_size"], settings["vision"]["patch_size"]) == (
            v.hidden_size, v.num_hidden_layers, v.image_size, v.patch_size)


def test_a_base_key_at_another_value_than_its_default_is_refused_by_name(tmp_path):
    config = copy.deepcopy(BASE_PATCH32)
    config["vision_config"]["tie_word_embeddings"] = False
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(FormatError, match=r"clip vision_config config option "
                                          r"tie_word_embeddings=False .*True"):
        zoo.get_recipe(f"local-dir:{tmp_path}")
