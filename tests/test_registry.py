"""The registry: register, get, list, build; duplicates and unknown names."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import DuplicateComponentError, UnknownNameError
from zoo.families import FAMILIES
from zoo.registry import Registry, natural_key


def test_every_family_has_members_or_is_task():
    for family in FAMILIES:
        if family != "task":
            assert zoo.list_components(family), family


def test_list_is_fnmatch_and_naturally_sorted():
    reg = Registry()
    for name in ["b-10", "b-2", "a-1", "c"]:
        reg.register("norm", name, "zoo.plugins.norm.rmsnorm:RMSNorm")
    reg._ensure_loaded = lambda: None
    assert [c.name for c in reg.list("norm")] == ["a-1", "b-2", "b-10", "c"]
    assert [c.name for c in reg.list("norm", "b-*")] == ["b-2", "b-10"]
    assert sorted(["x10", "x9", "x1"], key=natural_key) == ["x1", "x9", "x10"]


def test_duplicate_raises_naming_the_first_registration(fresh_registry):
    with pytest.raises(DuplicateComponentError) as err:
        zoo.register_component("norm", "rmsnorm", "zoo.plugins.norm.layernorm:LayerNorm")
    message = str(err.value)
    assert "plugin 'norm'" in message and "plugins/norm/__init__.py" in message.replace("\\", "/")
    assert "override=True" in message
    # explicit override replaces it
    zoo.register_component("norm", "rmsnorm", "zoo.plugins.norm.layernorm:LayerNorm", override=True)
    assert type(zoo.get_component("norm", "rmsnorm").build(None, dim=4)).__name__ == "LayerNorm"


def test_unknown_name_lists_closest_names_and_plugins():
    with pytest.raises(UnknownNameError) as err:
        zoo.get_component("norm", "rms-norm")
    message = str(err.value)
    assert "Unknown norm 'rms-norm'" in message
    assert "Did you mean 'rmsnorm'" in message
    assert "'layernorm'" in message and "Installed plugins:" in message and "'attention'" in message


def test_unknown_family():
    with pytest.raises(UnknownNameError, match="Did you mean 'attention'"):
        zoo.list_components("atention")


@pytest.mark.parametrize("bad", ["RMSNorm", "zoo.plugins.norm:X", "has space", ""])
def test_names_are_lower_case_with_dashes(bad):
    with pytest.raises(ValueError, match="lower-case"):
        Registry().register("norm", bad, "zoo.plugins.norm.rmsnorm:RMSNorm")


def test_capabilities_are_validated_data():
    with pytest.raises(ValueError, match="unknown key 'casual'.*Did you mean 'causal'"):
        Registry().register("attention", "x", "m:X", capabilities={"casual": True})


def test_string_targets_load_lazily_and_report_failures(fresh_registry):
    comp = zoo.register_component("norm", "missing", "no_such_module_anywhere:Thing")
    with pytest.raises(zoo.PluginError, match="no_such_module_anywhere"):
        comp.load()


def test_build_validates_settings_with_valid_keys():
    comp = zoo.get_component("norm", "layernorm")
    norm = comp.build({"eps": 1e-3}, dim=8)
    assert norm.eps == 1e-3 and norm.weight.shape == (8,)
    with pytest.raises(zoo.RecipeError, match="unknown key 'epsilon'.*Valid keys: 'eps', 'bias'"):
        comp.build({"epsilon": 1e-3}, dim=8)
    with pytest.raises(zoo.RecipeError, match="eps"):
        comp.build({"eps": -1.0}, dim=8)


def test_list_components_shows_plugin_capabilities_description():
    (vanilla,) = zoo.list_components("attention", "vanilla")
    assert vanilla.plugin == "attention"
    assert vanilla.capabilities.causal and vanilla.capabilities.cross_attention
    assert "Vaswani" in vanilla.description
    assert isinstance(vanilla.build(None, d_model=8, n_heads=2,
                                    kernel=zoo.get_component("kernel", "eager").load()),
                      torch.nn.Module)


def test_a_fresh_registry_is_empty_and_loads_no_plugin_by_itself():
    import types

    reg = Registry()
    assert reg.list("norm") == [] and reg.plugin_names() == []
    plugin = types.SimpleNamespace(register_norms=zoo.hookimpl(
        lambda register: register("mine", "zoo.plugins.norm.rmsnorm:RMSNorm")))
    info = reg.plugins.register_plugin(plugin, name="mine")
    assert info.registered == [("norm", "mine")]
    assert [c.name for c in reg.list("norm")] == ["mine"]
    assert reg.get("norm", "mine").plugin == "mine"
    assert "mine" not in zoo.registry.registry.names("norm")  # the process-wide one is apart
