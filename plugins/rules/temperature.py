"""Temperature (Ackley, Hinton and Sejnowski 1985, "A Learning Algorithm for Boltzmann
Machines"): the logits divided by it before sampling, below 1 sharper, above 1 flatter
(transformers' ``TemperatureLogitsWarper``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class Temperature(Rule):
    """The scores over ``temperature``."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        temperature: float = Field(1.0, gt=0)

    example = {"temperature": 0.7}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores / self.settings.temperature
