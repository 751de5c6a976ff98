"""The static decoder's whole decoding step in C++ (``csrc/decoder_layers.cpp``, with
its small operators as loops in ``csrc/step_ops.cpp``): a library of this plugin's own,
linked against zoo's products (:data:`zoo.native.PRODUCTS`), built by
``zoo native build`` and called by :mod:`zoo.plugins.architectures.static_decoder`."""

from __future__ import annotations

from pathlib import Path

from zoo.native import PRODUCTS, NativeLibrary  # zoo.plugin_api has them too; this one imports no torch

CSRC = Path(__file__).with_name("csrc")

STEP = NativeLibrary(
    "zoo_decoder_step", [CSRC / "decoder_layers.cpp", CSRC / "encoder_layers.cpp",
                         CSRC / "step_ops.cpp", CSRC / "packed_attention.cpp"],
    [CSRC / "step_ops.h", CSRC / "layer_parts.h"], needs=[PRODUCTS])
"""``torch.classes.zoo_decoder.Plan`` and ``Layer``: the step (and an encoder's pass,
``Plan.encode``), in the plugin's own namespace."""
