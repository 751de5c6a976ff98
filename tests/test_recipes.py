"""Recipes: files, round trips, overrides, and one clear error for each bad input."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import CapabilityError, MemoryBudgetError, RecipeError, UnknownNameError

RECIPES = zoo.list_recipes()

PAPER = {  # Vaswani et al. 2017, Table 3; ViT and DeiT papers
    "transformer-base": dict(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, dropout=0.1),
    "transformer-big": dict(d_model=1024, n_heads=16, d_ff=4096, encoder_layers=6, dropout=0.3),
    "vit-tiny-patch16-224": dict(d_model=192, n_heads=3, d_ff=768, depth=12, patch_size=16),
    "vit-small-patch16-224": dict(d_model=384, n_heads=6, d_ff=1536, depth=12, patch_size=16),
    "vit-base-patch16-224": dict(d_model=768, n_heads=12, d_ff=3072, depth=12, patch_size=16),
}


def test_the_named_recipes_exist_in_natural_order():
    assert set(RECIPES) >= {
        "transformer-base", "transformer-big", "transformer-tiny", "vit-tiny-patch16-224",
        "vit-small-patch16-224", "vit-base-patch16-224", "vit-tiny-patch4-28",
    }
    assert zoo.list_recipes("vit-tiny-*") == ["vit-tiny-patch4-28", "vit-tiny-patch16-224"]
    assert zoo.list_recipes("nothing-*") == []


@pytest.mark.parametrize("name", PAPER)
def test_recipes_hold_the_published_dimensions(name):
    settings = zoo.get_recipe(name).architecture.settings
    for key, value in PAPER[name].items():
        assert settings[key] == value, key


@pytest.mark.parametrize("name", RECIPES)
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(name, suffix, tmp_path):
    recipe = zoo.get_recipe(name)
    path = zoo.save_recipe(recipe, tmp_path / f"r{suffix}")
    assert zoo.load_recipe(path) == recipe
    assert zoo.get_recipe(str(path)) == recipe
    assert [p.name for p in tmp_path.iterdir()] == [f"r{suffix}"]  # no temporary left


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_names_only_registered_components(name):
    recipe = zoo.get_recipe(name)
    resolved = zoo.resolve(recipe)
    for slot, part in resolved.parts.items():
        assert part.component.name == recipe.components[slot].name
    assert recipe.requires == ["zoo-transformers"]


def test_build_from_a_recipe_file_and_object(tmp_path):
    recipe = zoo.get_recipe("transformer-tiny")
    recipe.architecture.settings["encoder_layers"] = 1
    path = zoo.save_recipe(recipe, tmp_path / "mine.yaml")
    assert len(zoo.build(str(path)).encoder.layers) == 1
    assert len(zoo.build(recipe).encoder.layers) == 1


# -- overrides ------------------------------------------------------------------------------------
def test_overrides_replace_components_and_settings():
    model = zoo.build("transformer-base", norm="rmsnorm", encoder_layers=3, device="meta")
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 6
    norm = model.encoder.layers[0].norm1
    assert type(norm).__name__ == "RMSNorm"
    assert norm.eps == 1e-6  # carried over from the recipe's layernorm settings
    model = zoo.build("transformer-tiny", **{"norm.eps": 1e-3, "ffn": "swiglu"})
    assert model.encoder.layers[0].norm1.eps == 1e-3
    assert type(model.encoder.layers[0].ffn).__name__ == "SwiGLUFFN"
    model = zoo.build("transformer-tiny", ffn={"name": "gelu", "settings": {"approximate": "tanh"}})
    assert model.encoder.layers[0].ffn.act.approximate == "tanh"
    # the named recipe itself is unchanged
    assert zoo.get_recipe("transformer-base").components["norm"].name == "layernorm"


def test_kinds_of_layer_change_their_components_and_nothing_else():
    """layer_types and layer_variants: each layer built with the recipe's components and
    its kind's changes (Gemma 2's local and global layers); each kind's positions are its
    own module, shared by the layers of that kind."""
    model = zoo.build("llama-tiny", layer_types=["local", "global"], layer_variants={
        "global": {}, "local": {"attention.window": 3, "positional.base": 500.0,
                                "norm.eps": 1e-3}})
    local, full = model.layers
    assert (local.attn.window, full.attn.window) == (3, None)
    assert (local.norm1.eps, full.norm1.eps, model.norm.eps) == (1e-3, 1e-6, 1e-6)
    assert torch.allclose(local.attn.positional.inv_freq[1], torch.tensor(500.0 ** -(2 / 16)))
    assert full.attn.positional.inv_freq[1] == zoo.build("llama-tiny").layers[0].attn \
        .positional.inv_freq[1]
    for settings, says in [
        (dict(layer_types=["local", "other"], layer_variants={"local": {}}),
         "layer_types names \\['other'\\], which layer_variants does not define"),
        (dict(layer_types=["local"], layer_variants={"local": {}}),
         "layer_types names 1 layers, and the model has 2"),
        (dict(layer_variants={"local": {}}), "layer_variants without layer_types"),
        (dict(layer_types=["a", "a"], layer_variants={"a": {"d_model": 8}}),
         "layer variant 'a' changes 'd_model'; a kind of layer changes its components only"),
        (dict(layer_types=["a", "a"], layer_variants={"a": {"attention.windw": 8}}),
         "layer variant 'a': .*unknown key 'windw'. Did you mean 'window'"),
    ]:
        with pytest.raises(RecipeError, match=says):
            zoo.build("llama-tiny", **settings)


def test_unknown_override_lists_valid_keys():
    with pytest.raises(RecipeError) as err:
        zoo.build("transformer-base", encoder_layer=3)
    message = str(err.value)
    assert "Unknown override 'encoder_layer'" in message
    assert "Did you mean 'encoder_layers'" in message and "'norm'" in message


def test_bad_override_value_names_the_key():
    with pytest.raises(RecipeError, match="encoder_layers.*greater than or equal to 0"):
        zoo.build("transformer-tiny", encoder_layers=-1)
    with pytest.raises(RecipeError, match="unknown key 'epsilon'.*Valid keys: 'eps'"):
        zoo.build("transformer-tiny", **{"norm.epsilon": 1e-3})


# -- bad input, one clear error each ------------------------------------------------------------------
def test_unknown_recipe_suggests():
    with pytest.raises(UnknownNameError, match="Unknown recipe 'transformer-bse'.*'transformer-base'"):
        zoo.build("transformer-bse")


def test_unknown_component_suggests():
    with pytest.raises(UnknownNameError, match="Unknown norm 'rms'.*Did you mean 'rmsnorm'"):
        zoo.build("transformer-tiny", norm="rms")


def test_heads_must_divide_d_model():
    with pytest.raises(RecipeError, match="d_model 100 is not divisible by n_heads 8"):
        zoo.build("transformer-base", d_model=100)


def test_yaml_with_a_python_tag_is_refused(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text(
        "name: evil\narchitecture: !!python/object/apply:os.system ['echo pwned']\n"
    )
    with pytest.raises(RecipeError, match="tags such as !!python/object are refused"):
        zoo.load_recipe(path)


def test_python_path_as_component_is_refused(tmp_path):
    recipe = zoo.get_recipe("transformer-tiny").to_dict()
    recipe["components"]["attention"] = "my_pkg.attn:Evil"
    with pytest.raises(RecipeError, match="never Python paths"):
        zoo.Recipe.from_dict(recipe)


def test_unknown_recipe_key_lists_valid_keys():
    recipe = zoo.get_recipe("transformer-tiny").to_dict()
    recipe["compnents"] = {}
    with pytest.raises(RecipeError, match="unknown key 'compnents'.*Did you mean 'components'"):
        zoo.Recipe.from_dict(recipe)


def test_unknown_slot_lists_slots():
    recipe = zoo.get_recipe("vit-tiny-patch4-28")
    recipe.components["encoder_block"] = zoo.ComponentRef(name="encoder")
    with pytest.raises(RecipeError, match="no slot 'encoder_block'.*Its slots:.*'block'"):
        zoo.build(recipe)


def test_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(RecipeError, match="a recipe is a mapping"):
        zoo.load_recipe(path)


def test_impossible_capabilities_rejected_before_building(fresh_registry):
    zoo.register_component(
        "attention", "bidirectional-only", "zoo.plugins.attention.vanilla:VanillaAttention",
        capabilities={"causal": False, "kv_cache": False},
    )
    with pytest.raises(CapabilityError) as err:
        zoo.build("transformer-tiny", attention="bidirectional-only")
    message = str(err.value)
    assert "cannot fill slot 'attention'" in message and "causal=True" in message
    assert "that can: " in message and "'vanilla'" in message
    assert "'bidirectional-only'" not in message.split("that can: ")[1]
    # the same mechanism is fine where nothing needs causality
    assert zoo.build("vit-tiny-patch4-28", attention="bidirectional-only") is not None


def test_cuda_only_kernel_on_cpu_is_rejected(fresh_registry):
    zoo.register_component("kernel", "cuda-only", "zoo.plugins.kernels.sdpa:sdpa_attention",
                           capabilities={"causal": True, "arbitrary_mask": True,
                                         "needs_cuda": True})
    with pytest.raises(CapabilityError, match="needs a CUDA device.*'eager', 'sdpa'"):
        zoo.build("transformer-tiny", kernel="cuda-only")


def test_an_undeclared_capability_is_not_claimed(fresh_registry):
    zoo.register_component("kernel", "quiet", "zoo.plugins.kernels.sdpa:sdpa_attention")
    with pytest.raises(CapabilityError, match="kernel 'quiet' cannot fill slot 'kernel'.*"
                                              "needs causal=True, arbitrary_mask=True"):
        zoo.build("transformer-tiny", kernel="quiet")


def test_missing_kernel_package_is_named(fresh_registry):
    zoo.register_component("kernel", "fancy", "zoo.plugins.kernels.sdpa:sdpa_attention",
                           capabilities={"causal": True, "arbitrary_mask": True,
                                         "requires_package": "surely_not_installed_pkg"})
    with pytest.raises(CapabilityError, match="pip install surely_not_installed_pkg"):
        zoo.build("transformer-tiny", kernel="fancy")


def test_in_attention_positions_need_an_attention_that_applies_them(fresh_registry):
    zoo.register_component("positional", "relative-probe", "zoo.plugins.positional.none:NoPositions",
                           capabilities={"kind": "relative"})
    with pytest.raises(CapabilityError, match="'linear' cannot apply relative positions.*'vanilla'"):
        zoo.build("transformer-tiny", attention="linear", positional="relative-probe")


def test_too_big_for_memory_is_refused_with_the_estimate(monkeypatch):
    allocated = []
    monkeypatch.setattr(torch.nn.Embedding, "reset_parameters",
                        lambda self: allocated.append(self.weight.device))
    with pytest.raises(MemoryBudgetError) as err:
        zoo.build("transformer-base", vocab_size=2_000_000_000)
    message = str(err.value)
    expected = 2_000_000_000 * 512 + (63_082_496 - 37000 * 512)  # the embedding grows, nothing else
    assert f"{expected:,} parameters" in message and "needs about 3.7 TiB" in message
    assert "parameters in torch.float32" in message and "Nothing was allocated" in message
    assert all(device.type == "meta" for device in allocated)


@pytest.mark.parametrize("value,expected", [
    (3, "takes a component name"),
    ("my.module:Cls", "never Python paths"),
    ({"name": "gelu", "setings": {}}, "unknown key 'setings'"),
])
def test_bad_slot_override_values(value, expected):
    with pytest.raises(RecipeError, match=expected):
        zoo.build("transformer-tiny", ffn=value)


# -- recipes that extend recipes ------------------------------------------------------------------
EXTENDS = """\
base: transformer-tiny
name: tiny-swiglu
architecture: {settings: {d_model: 128, encoder_layers: 3}}
components:
  ffn: swiglu
  norm: {settings: {eps: 1.0e-5}}
"""


def _by_hand() -> dict:
    """transformer-tiny with the changes of EXTENDS, written out in full."""
    data = zoo.get_recipe("transformer-tiny").to_dict()
    data["name"] = "tiny-swiglu"
    data["architecture"]["settings"].update(d_model=128, encoder_layers=3)
    data["components"]["ffn"] = {"name": "swiglu", "settings": {}}
    data["components"]["norm"] = {"name": "layernorm", "settings": {"eps": 1e-5}}
    return data


def test_a_recipe_with_a_base_is_the_base_with_its_changes(tmp_path):
    path = tmp_path / "tiny-swiglu.yaml"
    path.write_text(EXTENDS)
    recipe = zoo.load_recipe(path)
    expected = _by_hand()
    got = recipe.to_dict()
    assert got.pop("based_on") == "transformer-tiny"
    assert got.pop("description").startswith("transformer-tiny, changed: architecture.d_model")
    del expected["description"]
    assert got == expected
    model = zoo.build(recipe)
    assert type(model.encoder.layers[0].ffn).__name__ == "SwiGLUFFN"
    assert len(model.encoder.layers) == 3 and model.encoder.layers[0].norm1.eps == 1e-5
    # a file base, relative to the file that names it, and a base of a base
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "wider.yaml").write_text(
        "base: ../tiny-swiglu.yaml\nname: wider\ndescription: wider still\n"
        "architecture: {settings: {d_ff: 512}}\ncomponents: {positional: null}\n")
    wider = zoo.load_recipe(tmp_path / "sub" / "wider.yaml")
    assert wider.architecture.settings["d_ff"] == 512 and wider.description == "wider still"
    assert wider.architecture.settings["d_model"] == 128 and "positional" not in wider.components
    assert wider.components["ffn"].name == "swiglu"


def test_a_saved_model_of_a_based_recipe_round_trips(tmp_path):
    recipe = zoo.Recipe.from_dict({"base": "transformer-tiny", "name": "tiny-rms",
                                   "components": {"norm": "rmsnorm"}})
    assert recipe.components["norm"].settings == {}  # another component: its own settings
    model = zoo.build(recipe)
    loaded = zoo.build(f"local-dir:{zoo.save_pretrained(model, tmp_path / 'm')}")
    assert loaded.recipe == model.recipe and loaded.recipe.based_on == "transformer-tiny"
    assert zoo.load_recipe(zoo.save_recipe(recipe, tmp_path / "r.json")) == recipe


def test_zoo_info_shows_a_based_recipe_resolved(tmp_path):
    from .conftest import run_zoo

    path = tmp_path / "tiny-swiglu.yaml"
    path.write_text(EXTENDS)
    done = run_zoo("info", str(path))
    assert done.returncode == 0, done.stderr
    assert "written as base: transformer-tiny" in done.stdout
    assert "encoder_layers: 3" in done.stdout and "vocab_size: 1000" in done.stdout


@pytest.mark.parametrize("data,says", [
    ({"base": "transformer-tny", "name": "x"}, "base 'transformer-tny' is neither.*Did you "
                                               "mean 'transformer-tiny'"),
    ({"base": "transformer-tiny"}, "still names itself"),
    ({"base": 3, "name": "x"}, "base is the name of a recipe"),
    ({"base": "transformer-tiny", "name": "x", "components": {"norm": {"setings": {}}}},
     "components.norm: unknown key 'setings'"),
    ({"base": "transformer-tiny", "name": "x", "architecture": {"settings": {"d_modl": 8}}},
     "d_modl"),
])
def test_a_bad_base_or_change_is_named(data, says):
    with pytest.raises(RecipeError, match=says):
        zoo.resolve(zoo.Recipe.from_dict(data, "my recipe"))


def test_bases_that_go_round_are_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nname: b\n")
    with pytest.raises(RecipeError, match="go round or too deep"):
        zoo.load_recipe(tmp_path / "a.yaml")
