"""zoo-plugin-nllb: transformers' M2M100 and NLLB-200 folders read into zoo.

Two components, registered by string so that importing the plugin imports no torch:

- the format ``nllb`` (family ``format``) for ``model_type: m2m_100`` folders
  (facebook/m2m100_*, facebook/nllb-200-*): docs/from-the-hub.md, "Writing a format
  plugin";
- the positional ``fairseq-sinusoidal`` (family ``positional``, kind ``absolute``):
  fairseq's sinusoid table as M2M100 uses it, which zoo's ``sinusoidal`` does not give
  (other frequencies, and positions that start after the pad id).
"""

from zoo import hookimpl


@hookimpl
def register_formats(register):
    register(
        "nllb",
        "zoo_plugin_nllb.nllb:NLLBFormat",
        description="transformers' M2M100ForConditionalGeneration: M2M100 and NLLB-200 "
                    "(Fan et al. 2020; NLLB Team 2022)",
        capabilities={"model_types": ("m2m_100",)},
    )


@hookimpl
def register_positionals(register):
    register(
        "fairseq-sinusoidal",
        "zoo_plugin_nllb.positions:FairseqSinusoidalPositions",
        description="fairseq's sinusoids ([sin | cos], frequencies over half_dim - 1), "
                    "positions counted from padding_idx + 1 (M2M100, NLLB-200)",
        capabilities={"kind": "absolute"},
    )
