"""Plugins: entry points, run-time registration, failures, allow-lists, and a real
third-party package installed by pip."""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import zoo
from zoo import hookspecs
from zoo.families import FAMILIES
from zoo.registry import PluginNameWarning, RenamedComponentWarning, registry

from .conftest import plugins_from, run_zoo

ROOT = Path(__file__).parents[1]
BUILTIN = {"architectures", "attention", "blocks", "ffn", "kernels", "norm", "positional", "tasks",
           "recipes", "losses", "formats", "rules"}


def test_builtin_plugins_come_from_entry_points():
    infos = {i.name: i for i in zoo.list_plugins()}
    assert BUILTIN <= set(infos)
    for name in BUILTIN:
        assert infos[name].ok and infos[name].distribution == "zoo-transformers"
        assert infos[name].module == f"zoo.plugins.{name}"
    assert ("attention", "vanilla") in infos["attention"].registered


def test_core_never_imports_a_plugin_by_name():
    for path in (ROOT / "zoo").glob("*.py"):
        assert "zoo.plugins" not in path.read_text(), path


def test_every_hook_is_a_family_hook_or_recipes_and_documented():
    specs = {n for n, f in inspect.getmembers(hookspecs, inspect.isfunction)
             if hasattr(f, "zoo_spec")}
    current = {f.hook for f in FAMILIES.values()} | {"register_recipes"}
    assert specs == current | set(hookspecs.DEPRECATED)
    assert set(hookspecs.DEPRECATED.values()) <= current
    # one rule for every name: register_ and the plural of what it registers
    assert all(h.endswith("s") for h in current), sorted(current)
    docs = (ROOT / "docs" / "plugins.md").read_text()
    for hook in specs:
        assert f"`{hook}`" in docs, f"{hook} undocumented in docs/plugins.md"


def test_a_deprecated_hook_name_still_registers_and_warns_at_the_plugin(fresh_registry):
    from zoo.plugin_api import MultiHeadAttention

    class Old(MultiHeadAttention):
        """An attention registered through the former hook name."""

    def register_attention(register):
        register("old-hook", Old)

    plugin = types.SimpleNamespace(register_attention=zoo.hookimpl(register_attention))
    with pytest.warns(DeprecationWarning, match="register_attentions") as caught:
        zoo.register_plugin(plugin, name="old")
    assert caught[0].filename == __file__
    assert caught[0].lineno == register_attention.__code__.co_firstlineno
    assert zoo.get_component("attention", "old-hook").load() is Old


def test_the_plugin_apis_former_module_name_still_imports_and_warns():
    import zoo.plugin_api

    with pytest.warns(DeprecationWarning, match="zoo.plugin is now zoo.plugin_api") as caught:
        from zoo.plugin import MultiHeadAttention
    assert MultiHeadAttention is zoo.plugin_api.MultiHeadAttention
    assert caught[0].filename == __file__
    import zoo.plugin
    assert zoo.plugin.__all__ == zoo.plugin_api.__all__
    with pytest.raises(AttributeError, match="now 'zoo.plugin_api'"):
        zoo.plugin.nothing_of_the_kind


REQUIRED_CAPABILITIES = {"block": {"role": "encoder"}, "positional": {"kind": "absolute"},
                         "architecture": {"inputs": "tokens", "outputs": "tokens"}}


def test_every_hook_registers_into_its_own_family(fresh_registry):
    def impl(family):
        def hook(register):
            register(f"probe-{family}", "zoo.plugins.norm.rmsnorm:RMSNorm",
                     capabilities=REQUIRED_CAPABILITIES.get(family))
        return zoo.hookimpl(hook)

    plugin = types.SimpleNamespace(**{f.hook: impl(f.name) for f in FAMILIES.values()})
    info = zoo.register_plugin(plugin, name="probe")
    assert sorted(info.registered) == sorted((f, f"probe-{f}") for f in FAMILIES)
    for family in FAMILIES:
        assert zoo.get_component(family, f"probe-{family}").plugin == "probe"


def test_register_plugin_object_at_run_time(fresh_registry):
    class Doubler(torch.nn.Module):
        """Doubles its input (a deliberately simple norm)."""

        def __init__(self, settings, *, dim):
            super().__init__()

        def forward(self, x):
            return 2 * x

    plugin = types.SimpleNamespace(
        register_norms=zoo.hookimpl(lambda register: register("doubler", Doubler)),
        register_tasks=zoo.hookimpl(lambda register: None),
    )
    info = zoo.register_plugin(plugin, name="mine")
    assert info.registered == [("norm", "doubler")]
    model = zoo.build("transformer-tiny", norm="doubler", dropout=0.0)
    assert isinstance(model.encoder.layers[0].norm1, Doubler)
    assert zoo.get_component("norm", "doubler").description.startswith("Doubles")


def test_plugin_failing_in_registration_is_rolled_back_and_reported(fresh_registry):
    def register_norms(register):
        register("half-done", "zoo.plugins.norm.rmsnorm:RMSNorm")
        raise RuntimeError("boom")

    plugin = types.SimpleNamespace(register_norms=zoo.hookimpl(register_norms))
    with pytest.raises(zoo.PluginError, match="RuntimeError while register_norms\\(\\): boom"):
        zoo.register_plugin(plugin, name="flaky")
    assert "half-done" not in [c.name for c in zoo.list_components("norm")]
    info = {i.name: i for i in zoo.list_plugins()}["flaky"]
    assert "boom" in info.error
    assert zoo.build("transformer-tiny").__class__.__name__ == "Seq2Seq"


def test_misspelled_hook_is_reported_at_the_plugins_own_line(fresh_registry):
    def register_norm(register):
        pass

    plugin = types.SimpleNamespace(register_norm=zoo.hookimpl(register_norm))
    with pytest.raises(zoo.PluginError, match="register_norm.*Did you mean 'register_norms'"
                       ) as raised:
        zoo.register_plugin(plugin, name="typo")
    assert f"{__file__}:{register_norm.__code__.co_firstlineno}" in str(raised.value)
    assert "pluggy" not in str(raised.value)


def test_an_error_inside_zoo_called_by_a_plugin_points_at_the_plugins_line(fresh_registry):
    def register_norms(register):
        register("typo-caps", "a.b:C", capabilities={"centerd": True})

    plugin = types.SimpleNamespace(register_norms=zoo.hookimpl(register_norms))
    with pytest.raises(zoo.PluginError, match="Did you mean 'centered'") as raised:
        zoo.register_plugin(plugin, name="caps")
    assert f"{__file__}:{register_norms.__code__.co_firstlineno + 1}" in str(raised.value)


def test_the_unknown_name_error_keeps_a_failed_plugins_whole_hint(fresh_registry):
    def register_ffns(register):
        register("wide-ffn", "a.b:C", capabilities={"gatd": True, "x" * 200: 1})

    plugin = types.SimpleNamespace(register_ffns=zoo.hookimpl(register_ffns))
    with pytest.raises(zoo.PluginError):
        zoo.register_plugin(plugin, name="long")
    with pytest.raises(zoo.UnknownNameError) as raised:
        zoo.get_component("ffn", "wide-ffn")
    message = str(raised.value)
    assert "Did you mean 'gated'" in message and "\u2026" not in message and "..." not in message


def test_a_plugin_ships_recipes_that_zoo_list_names(with_plugins, plugin_site):
    assert "transformer-mqa-tiny" in zoo.list_recipes("transformer-*")
    model = zoo.build("transformer-mqa-tiny")
    assert type(model.decoder.layers[0].cross_attn).__name__ == "MultiQueryAttention"
    listed = run_zoo("list", "transformer-*", pythonpath=plugin_site)
    rows = {line.split()[0]: line.split()[2] for line in listed.stdout.splitlines()[2:]}
    assert rows["transformer-mqa-tiny"] == "example" and rows["transformer-tiny"] == "recipes"


def test_a_recipe_requiring_a_missing_package_says_pip_install(fresh_registry):
    data = zoo.get_recipe("transformer-tiny").to_dict()
    data["requires"] = ["zoo-transformers", "zoo-plugin-not-installed"]
    data["components"]["attention"] = "flash-of-genius"
    with pytest.raises(zoo.MissingPluginError, match="pip install zoo-plugin-not-installed"):
        zoo.build(zoo.Recipe.from_dict(data))


def test_a_plugin_recipe_clashing_with_another_is_refused(fresh_registry):
    plugin = types.SimpleNamespace(register_recipes=zoo.hookimpl(
        lambda register: register("transformer-tiny", {"name": "transformer-tiny"})))
    with pytest.raises(zoo.PluginError, match="recipe 'transformer-tiny' is already "
                                              "registered by plugin 'recipes'"):
        zoo.register_plugin(plugin, name="clash")


def test_asking_for_a_component_of_a_plugin_that_failed_names_it(with_plugins):
    with pytest.raises(zoo.UnknownNameError, match="1 plugin failed to load.*'broken' "
                                                   "\\(ImportError"):
        zoo.get_component("attention", "only-in-broken")


def test_third_party_package_adds_attention_and_norm(with_plugins):
    infos = {i.name: i for i in zoo.list_plugins()}
    example = infos["example"]
    assert example.ok and example.distribution == "zoo-plugin-example" and example.version == "1.2.3"
    assert set(example.registered) == {("attention", "multi-query"), ("norm", "scalenorm"),
                                       ("recipe", "transformer-mqa-tiny")}
    model = zoo.build("transformer-tiny", attention="multi-query", norm="scalenorm", dropout=0.0)
    layer = model.encoder.layers[0]
    assert type(layer.attn).__name__ == "MultiQueryAttention"
    assert type(layer.norm1).__name__ == "ScaleNorm"
    # the plugin's norm behaves as its formula says, inside a zoo model
    x = torch.randn(2, 5, 64)
    expected = layer.norm1.g * x / x.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(layer.norm1(x), expected)
    src, tgt = torch.randint(1, 1000, (2, 7)), torch.randint(1, 1000, (2, 6))
    assert model(src, tgt).shape == (2, 6, 1000)
    # its declared capabilities are checked like anyone's: no KV cache is fine for training
    assert not zoo.get_component("attention", "multi-query").capabilities.kv_cache


def test_broken_plugin_is_reported_and_the_rest_work(with_plugins):
    infos = {i.name: i for i in zoo.list_plugins()}
    broken = infos["broken"]
    assert not broken.ok
    assert "ImportError while importing zoo_plugin_broken" in broken.error
    assert "not-installed-anywhere" in broken.error
    assert all(infos[n].ok for n in BUILTIN | {"example"})
    assert zoo.build("transformer-tiny") is not None


def test_zoo_plugins_command_shows_versions_and_errors(plugin_site):
    result = run_zoo("plugins", pythonpath=plugin_site)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[2:]}
    assert "zoo-plugin-example" in lines["example"] and "1.2.3" in lines["example"]
    assert "attention:multi-query" in lines["example"]
    assert "FAILED: ImportError" in lines["broken"]
    as_json = json.loads(run_zoo("plugins", "--json", pythonpath=plugin_site).stdout)
    assert {p["name"] for p in as_json} >= BUILTIN | {"example", "broken"}


def test_disable_autoload_and_allow_list(plugin_site):
    code = "import zoo; print(sorted(i.name for i in zoo.list_plugins()))"
    def plugins_with(env):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**env, "PYTHONPATH": str(plugin_site),
                                  "PATH": "/usr/bin:/bin"})
        assert out.returncode == 0, out.stderr
        return eval(out.stdout)

    assert plugins_with({"ZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}) == []
    assert plugins_with({"ZOO_PLUGINS": "example,norm"}) == ["example", "norm"]
    assert plugins_with({"ZOO_PLUGINS": "zoo-transformers"}) == sorted(BUILTIN)
    assert plugins_with({"ZOO_PLUGINS": ""}) == []
    assert set(plugins_with({})) == BUILTIN | {"example", "broken"}


def test_disabled_autoload_then_register_plugin_explicitly(monkeypatch, fresh_registry):
    monkeypatch.setenv("ZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    registry.reset()
    with pytest.raises(zoo.UnknownNameError, match="Installed plugins: \\(none\\)"):
        zoo.get_component("norm", "rmsnorm")
    import zoo.plugins.norm as builtin_norms

    zoo.register_plugin(builtin_norms)
    assert zoo.get_component("norm", "rmsnorm").plugin == "zoo.plugins.norm"


def test_same_entry_point_name_in_two_distributions_loads_both(tmp_path, monkeypatch):
    package = tmp_path / "src"
    (package / "clashing").mkdir(parents=True)
    (package / "clashing" / "__init__.py").write_text("")
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "zoo-plugin-clash"\nversion = "0.1"\n'
        '[project.entry-points.zoo]\nnorm = "clashing"\n'
        '[tool.setuptools]\npackages = ["clashing"]\n'
    )
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(site), str(package)],
                   check=True)
    monkeypatch.syspath_prepend(str(site))
    registry.reset()
    try:
        by_dist = {(i.distribution, i.name) for i in zoo.list_plugins() if "norm" in i.name}
        assert by_dist in (
            {("zoo-transformers", "norm"), ("zoo-plugin-clash", "zoo-plugin-clash:norm")},
            {("zoo-plugin-clash", "norm"), ("zoo-transformers", "zoo-transformers:norm")},
        )
        assert all(i.ok for i in zoo.list_plugins())
        assert zoo.get_component("norm", "rmsnorm") is not None
    finally:
        monkeypatch.undo()
        registry.reset()


def test_an_installed_plugin_keeps_a_name_a_later_built_in_took(old_plugin_site, monkeypatch,
                                                                capsys, caplog):
    # zoo-plugin-old registers its own ffn 'geglu' (and a cosine attention) from before
    # zoo had one: the user installed it for that name, so the plain name stays its own;
    # zoo's is one qualified name away, and zoo's own recipes and formats still mean zoo's
    import warnings

    import zoo.registry

    monkeypatch.setattr(zoo.registry, "NOTICED", set())  # as in a new process
    with plugins_from(old_plugin_site, monkeypatch), warnings.catch_warnings():
        warnings.simplefilter("error", PluginNameWarning)
        with caplog.at_level("INFO", logger="zoo.plugin_names"):
            infos = {i.name: i for i in zoo.list_plugins()}
            zoo.get_component("ffn", "geglu")
        notices = [r.getMessage() for r in caplog.records if r.name == "zoo.plugin_names"]
        # one line, naming the name, its holder, the built-in's qualified name and the fix
        assert len(notices) == 1 and "\n" not in notices[0]
        assert ("ffn 'geglu' means plugin cosine's (also: ffn:geglu)" in notices[0]
                and "ZOO_PREFER_BUILTIN" in notices[0])
        assert infos["cosine"].ok and infos["ffn"].ok
        assert infos["cosine"].registered == [("attention", "cosine"), ("ffn", "geglu"),
                                              ("recipe", "cosine-tiny")]
        theirs = zoo.get_component("ffn", "geglu")
        assert theirs.plugin == "cosine" and theirs.load().__name__ == "PlainGEGLU"
        assert zoo.get_component("ffn", "cosine:geglu") is theirs
        assert zoo.get_component("ffn", "ffn:geglu").load().__name__ == "GEGLUFFN"
        model = zoo.build("transformer-tiny", attention="cosine", ffn="geglu",
                          dropout=0.0).eval()
        layer = model.encoder.layers[0]
        assert type(layer.attn).__name__ == "CosineAttention"
        assert type(layer.ffn).__name__ == "PlainGEGLU"
        src = torch.randint(3, 100, (2, 5))
        assert model(src, src).shape == (2, 5, model.settings.vocab_size)
        built_in = zoo.build("transformer-tiny", ffn="ffn:geglu")
        assert type(built_in.encoder.layers[0].ffn).__name__ == "GEGLUFFN"
        with pytest.raises(zoo.UnknownNameError, match="qualified name is PLUGIN:NAME"):
            zoo.get_component("ffn", "nobody:geglu")
        # zoo components lists the built-in by the name that reaches it
        from zoo.cli import cmd_components
        capsys.readouterr()
        cmd_components(argparse.Namespace(family="ffn", pattern="*geglu"))
        rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[2:]]
        assert rows == [["ffn", "geglu", "cosine"], ["ffn", "ffn:geglu", "ffn"]]
        # the notice is once a process: loading the plugins again says nothing new
        caplog.clear()
        registry.reset()
        with caplog.at_level("INFO", logger="zoo.plugin_names"):
            zoo.list_plugins()
        assert not [r for r in caplog.records if r.name == "zoo.plugin_names"]
    # a setting gives the plain name back to zoo's built-in
    monkeypatch.setenv("ZOO_PREFER_BUILTIN", "geglu")
    with plugins_from(old_plugin_site, monkeypatch):
        assert zoo.get_component("ffn", "geglu").plugin == "ffn"
        assert zoo.get_component("ffn", "cosine:geglu").plugin == "cosine"
        assert _ffn_of(zoo.build("cosine-tiny")) == "PlainGEGLU"
    monkeypatch.setenv("ZOO_PREFER_BUILTIN", "all")
    with plugins_from(old_plugin_site, monkeypatch):
        assert zoo.get_component("ffn", "geglu").plugin == "ffn"


def test_two_installed_plugins_of_one_name_are_refused_with_the_fix(fresh_registry):
    def first(register):
        register("twin", "zoo.plugins.ffn.relu:ReLUFFN")

    def second(register):
        register("twin", "zoo.plugins.ffn.gelu:GELUFFN")

    zoo.register_plugin(types.SimpleNamespace(register_ffns=zoo.hookimpl(first)), name="one")
    assert zoo.get_component("ffn", "twin").plugin == "one"
    zoo.register_plugin(types.SimpleNamespace(register_ffns=zoo.hookimpl(second)), name="two")
    with pytest.raises(zoo.UnknownNameError,
                       match=r"registered by 2 installed plugins: 'one:twin', 'two:twin'.*"
                             r"Write that name"):
        zoo.build("transformer-tiny", ffn="twin")
    assert zoo.get_component("ffn", "two:twin").load().__name__ == "GELUFFN"
    # one of them gone, the other has the plain name again
    registry.unregister("ffn", "twin", "one")
    assert zoo.get_component("ffn", "twin").plugin == "two"


def test_a_plugin_that_fails_gives_a_shared_name_back(fresh_registry):
    # a plugin registers 'relu' (taken by the built-in), then fails: the built-in keeps it
    def hook(register):
        register("relu", "zoo.plugins.ffn.relu:ReLUFFN")
        raise RuntimeError("half-way")

    plugin = types.SimpleNamespace(register_ffns=zoo.hookimpl(hook))
    with pytest.raises(zoo.PluginError, match="half-way"):
        zoo.register_plugin(plugin, name="halfway")
    assert zoo.get_component("ffn", "relu").plugin == "ffn"
    assert "halfway:relu" not in [c.qualified_name for c in registry.qualified("ffn")]


def test_a_renamed_component_keeps_its_old_name_with_a_warning(fresh_registry, tmp_path,
                                                               capsys, monkeypatch):
    # a plugin release renames its attention 'cosy' to 'cosine-sim'; a model saved
    # under the old name, and recipes that write it, still build the same component
    from zoo.plugin_api import MultiHeadAttention

    class CosineSim(MultiHeadAttention):
        """An attention renamed in the plugin's second release."""

    def first(register):
        register("cosy", CosineSim, capabilities={"causal": True, "cross_attention": True,
                                                   "padding_mask": True, "kv_cache": True})

    def second(register):
        register("cosine-sim", CosineSim, former_names=["cosy"],
                 capabilities={"causal": True, "cross_attention": True,
                               "padding_mask": True, "kv_cache": True})

    zoo.register_plugin(types.SimpleNamespace(register_attentions=zoo.hookimpl(first)),
                        name="renaming")
    saved = tmp_path / "saved"
    zoo.save_pretrained(zoo.build("transformer-tiny", attention="cosy", dropout=0.0), saved)
    registry.reset()
    zoo.register_plugin(types.SimpleNamespace(register_attentions=zoo.hookimpl(second)),
                        name="renaming")
    with pytest.warns(RenamedComponentWarning, match="'cosy' is now named 'cosine-sim'"):
        assert zoo.get_component("attention", "cosy").name == "cosine-sim"
    with pytest.warns(RenamedComponentWarning, match="'renaming:cosine-sim'"):
        assert zoo.get_component("attention", "renaming:cosy").name == "cosine-sim"
    with pytest.warns(RenamedComponentWarning):
        model = zoo.build(f"local-dir:{saved}", pretrained=True)
    assert type(model.encoder.layers[0].attn) is CosineSim
    assert ("attention", "cosy") in registry and "cosy" not in registry.names("attention")
    # a current name always wins over a former one, and the rename is listed
    assert zoo.get_component("attention", "vanilla").plugin == "attention"
    assert "cosy" in zoo.get_component("attention", "cosine-sim").former_names
    from zoo.cli import cmd_components
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal cuts descriptions, never names
    cmd_components(argparse.Namespace(family="attention", pattern="cosine-sim"))
    assert "cosine-sim (formerly cosy)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="former_names lists the name itself"):
        registry.register("attention", "same", CosineSim, former_names=["same"])
    registry.unregister("attention", "cosine-sim", "renaming")
    with pytest.raises(zoo.UnknownNameError):
        zoo.get_component("attention", "cosy")


# -- old plugins never break (docs/compatibility.md, "What is deprecated") -----------------------
def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_every_deprecation_says_when_it_goes_and_has_not_outlived_it():
    # fails once zoo's version reaches a removal: remove the old way then, on purpose
    from zoo.deprecations import DEPRECATIONS

    docs = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    code = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "zoo").rglob("*.py"))
    for key, d in DEPRECATIONS.items():
        assert _version(d.since) <= _version(zoo.__version__) < _version(d.removed_in), key
        assert f"| `{d.old}` |" in docs or f"| {d.old} |" in docs, f"{key} not in the table"
        used = code.replace(f'"{key}": Deprecation', "")
        assert f'"{key}"' in used or f"'{key}'" in used, f"{key} warns nowhere"


def test_a_plugin_of_the_first_api_loads_and_works(firsts_site, monkeypatch):
    # one module per API change since: the register_attention hook, zoo.plugin,
    # zoo.generation, the first decoding functions, generate's first keywords
    removed = r"removed in zoo \d+\.\d+\.\d+"
    with plugins_from(firsts_site, monkeypatch):
        with pytest.warns(DeprecationWarning, match=f"register_attentions.*{removed}"):
            infos = {i.name: i for i in zoo.list_plugins()}
        assert infos["firsts"].ok
        assert infos["firsts"].registered == [("attention", "mixed-queries")]
        with pytest.warns(DeprecationWarning, match=f"zoo.plugin is now zoo.plugin_api.*{removed}"):
            zoo.get_component("attention", "mixed-queries").load()
        from zoo.testing import check_component

        outcome = check_component("attention", "mixed-queries")
        assert "passed" in outcome.values()
        torch.manual_seed(0)
        model = zoo.build("transformer-tiny", attention="mixed-queries", vocab_size=16,
                          dropout=0.0).eval()
        src = torch.randint(3, 16, (2, 5), generator=torch.Generator().manual_seed(0))
        with pytest.warns(DeprecationWarning, match=f"zoo.generation.*{removed}"):
            from zoo_plugin_firsts import decode
        with pytest.warns(DeprecationWarning, match=f"generate_with.*{removed}"):
            beams = decode.with_settings(model, src, 1, 2)
        assert torch.equal(beams, zoo.generate(model, src, num_beams=2, max_new_tokens=6,
                                               start_id=1, eos_ids=(2,), pad_id=0))
        with pytest.warns(DeprecationWarning, match=f"greedy is deprecated.*{removed}"):
            greedy = decode.first_functions(model, src, 1, 2)
        assert torch.equal(greedy, zoo.generate(model, src, max_new_tokens=6, start_id=1,
                                                eos_ids=(2,)))
        with pytest.warns(DeprecationWarning, match=f"old names.*{removed}"):
            old = decode.first_keywords(model, src, 1, 2)
        assert torch.equal(old, zoo.generate(model, src, num_beams=2, max_new_tokens=6,
                                             start_id=1, eos_ids=(2,)))
    registry.reset()


def _ffn_of(model) -> str:
    return type(model.encoder.layers[0].ffn).__name__


def test_a_shared_name_keeps_the_meaning_it_was_written_with(old_plugin_site, monkeypatch,
                                                              tmp_path):
    # zoo-plugin-old's geglu came before zoo's: its own recipe, and the models saved
    # with it, still mean its geglu; the built-in's models, and zoo's own recipes and
    # formats, keep the built-in
    src = torch.randint(3, 100, (2, 5))
    with plugins_from(old_plugin_site, monkeypatch):
        assert _ffn_of(zoo.build("cosine-tiny")) == "PlainGEGLU"
        theirs = zoo.build("transformer-tiny", ffn="geglu", dropout=0.0).eval()
        zoo.save_pretrained(theirs, tmp_path / "now")
        saved = json.loads((tmp_path / "now" / "config.json").read_text())
        assert saved["recipe"]["components"]["ffn"]["name"] == "cosine:geglu"
        # as an older zoo saved it: the plain name, and the plugin it came from
        import shutil
        shutil.copytree(tmp_path / "now", tmp_path / "older")
        saved["recipe"]["components"]["ffn"]["name"] = "geglu"
        assert saved["components"]["ffn"]["plugin"] == "cosine"
        (tmp_path / "older" / "config.json").write_text(json.dumps(saved))
        for folder in ("now", "older"):
            loaded = zoo.build(f"local-dir:{tmp_path / folder}").eval()
            assert _ffn_of(loaded) == "PlainGEGLU"
            with torch.no_grad():
                torch.testing.assert_close(loaded(src, src), theirs(src, src))
        ours = zoo.build("transformer-tiny", ffn="ffn:geglu")
        zoo.save_pretrained(ours, tmp_path / "ours")
        saved = json.loads((tmp_path / "ours" / "config.json").read_text())
        assert saved["recipe"]["components"]["ffn"]["name"] == "ffn:geglu"
        assert _ffn_of(zoo.build(f"local-dir:{tmp_path / 'ours'}")) == "GEGLUFFN"
        # a model the built-in's user saved before the plugin was installed (the plain
        # name, the plugin 'ffn') keeps the built-in
        shutil.copytree(tmp_path / "ours", tmp_path / "ours-older")
        saved["recipe"]["components"]["ffn"]["name"] = "geglu"
        (tmp_path / "ours-older" / "config.json").write_text(json.dumps(saved))
        assert _ffn_of(zoo.build(f"local-dir:{tmp_path / 'ours-older'}")) == "GEGLUFFN"
        # zoo's own formats mean zoo's components: T5's feed-forward stays zoo's geglu
        from zoo.foreign import foreign_recipe

        t5 = foreign_recipe({"model_type": "t5", "feed_forward_proj": "gated-gelu",
                             "vocab_size": 32, "d_model": 8, "d_kv": 4, "d_ff": 16,
                             "num_layers": 1, "num_heads": 2, "is_encoder_decoder": True,
                             "tie_word_embeddings": False}, "a T5 folder")
        assert t5.components["ffn"].name == "ffn:geglu"
    registry.reset()
    # without the plugin the plain name means only the built-in: refused by name, before
    # a weight is read (it was a list of tensor names)
    with pytest.raises(zoo.MissingPluginError, match="pip install zoo-plugin-old.*ffn 'geglu'"):
        zoo.build(f"local-dir:{tmp_path / 'older'}")
    assert _ffn_of(zoo.build(f"local-dir:{tmp_path / 'ours'}")) == "GEGLUFFN"
    assert _ffn_of(zoo.build(f"local-dir:{tmp_path / 'ours-older'}")) == "GEGLUFFN"


def test_same_named_formats_are_chosen_by_one_documented_rule(fresh_registry, monkeypatch):
    from zoo.foreign import format_for

    builtin = zoo.get_component("format", "llama").load()

    class TheirLlama(builtin):
        """A plugin's own reader of Llama folders, under the built-in's name."""

    class OtherLlama(builtin):
        """A second plugin's reader of Llama folders."""

    def formats(register):
        register("llama", TheirLlama, capabilities={"model_types": ("llama",)})

    zoo.register_plugin(types.SimpleNamespace(register_formats=zoo.hookimpl(formats)),
                        name="their")
    config = {"model_type": "llama"}
    # the installed plugin reads the type it was installed for; zoo's stays one setting away
    assert format_for(config, "a folder").load() is TheirLlama
    monkeypatch.setenv("ZOO_PREFER_BUILTIN", "llama")
    assert format_for(config, "a folder").load() is builtin
    monkeypatch.delenv("ZOO_PREFER_BUILTIN")
    monkeypatch.setenv("ZOO_FORMAT_FOR", "llama=formats:llama")
    assert format_for(config, "a folder").load() is builtin
    monkeypatch.setenv("ZOO_FORMAT_FOR", "llama=nobody:llama")
    with pytest.raises(zoo.FormatError, match="none of the formats that read it"):
        format_for(config, "a folder")
    monkeypatch.delenv("ZOO_FORMAT_FOR")
    # a second installed plugin claiming the type: the user chooses, and is told how
    def other(register):
        register("other-llama", OtherLlama, capabilities={"model_types": ("llama",)})

    zoo.register_plugin(types.SimpleNamespace(register_formats=zoo.hookimpl(other)),
                        name="other")
    with pytest.raises(zoo.FormatError, match="2 installed plugins, 'other:other-llama', "
                       "'their:llama'.*Choose one: ZOO_FORMAT_FOR="):
        format_for(config, "a folder")
    monkeypatch.setenv("ZOO_FORMAT_FOR", "llama=their:llama")
    assert format_for(config, "a folder").load() is TheirLlama
    monkeypatch.setenv("ZOO_FORMAT_FOR", "llama=their:llama")
    assert format_for(config, "a folder").load() is TheirLlama
    monkeypatch.setenv("ZOO_FORMAT_FOR", "llama=formats:llama")
    assert format_for(config, "a folder").load() is builtin
    monkeypatch.setenv("ZOO_FORMAT_FOR", "llama=nobody:llama")
    with pytest.raises(zoo.FormatError, match="none of the formats that read it"):
        format_for(config, "a folder")


def test_filled_gives_every_setting_a_built_model_has():
    # what a format's export reads without knowing zoo's defaults: the built model's own
    from zoo.plugin_api import filled

    recipe = zoo.get_recipe("llama-tiny")
    data = filled(recipe.to_dict())
    model = zoo.build(recipe)
    assert data["architecture"]["settings"] == model.settings.model_dump(mode="json")
    assert set(data["components"]) == {"attention", "kernel", "positional", "norm", "ffn",
                                       "block"}
    assert data["components"]["ffn"]["settings"] == type(
        model.layers[0].ffn).Settings().model_dump(mode="json") | {
            k: v for k, v in recipe.components["ffn"].settings.items()}
    assert "final_norm" not in recipe.to_dict()["architecture"]["settings"]  # left out,
    assert "final_norm" in data["architecture"]["settings"]  # filled in
    with pytest.raises(zoo.RecipeError, match="no slot"):
        filled({**recipe.to_dict(), "components": {"nonsense": "relu"}})
