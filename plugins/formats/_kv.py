"""What every weight mapping of the format plugins does: transformers keeps an attention's
keys and values in two projections, zoo in one, ``kv_proj`` (keys then values, stacked
along the output dimension); a tensor with no place in zoo is refused by name; an
untied output projection that a file leaves out is the embeddings, as transformers
ties it then."""

from __future__ import annotations

import torch

from zoo.plugin_api import FormatError


class KeysValues:
    """Collects each attention's key and value tensors under zoo's ``kv_proj`` name, then
    stacks them."""

    def __init__(self, family: str, parts: tuple[str, str]) -> None:
        self.family, self.parts = family, parts
        self.found: dict[str, dict[str, torch.Tensor]] = {}

    def add(self, name: str, part: str, value: torch.Tensor) -> None:
        """``value`` is the ``part`` (one of ``parts``: keys first) of ``name``'s kv_proj."""
        self.found.setdefault(name, {})[part] = value

    def stacked(self) -> dict[str, torch.Tensor]:
        """Each kv_proj, keys then values; one that lacks either is refused by name."""
        out = {}
        for name, pair in self.found.items():
            missing = [p for p in self.parts if p not in pair]
            if missing:
                raise FormatError(f"{self.family} weights: {name} lacks its {missing[0]} part.")
            out[name] = torch.cat([pair[p] for p in self.parts], dim=0)
        return out


def unstacked(value: torch.Tensor, key_name: str, value_name: str) -> dict[str, torch.Tensor]:
    """A ``kv_proj`` (keys then values) as transformers' two projections under
    ``key_name`` and ``value_name``, each a tensor of its own: :meth:`KeysValues.stacked`
    backwards, for the formats that write."""
    keys, values = value.chunk(2, 0)
    return {key_name: keys.clone(), value_name: values.clone()}


def finish(out: dict[str, torch.Tensor], keys_values: KeysValues, unknown: list[str], *,
           untied: bool = False, what: str = "zoo's seq2seq") -> dict[str, torch.Tensor]:
    """``out`` with the stacked keys and values; refused when ``unknown`` names tensors;
    with ``untied``, an absent ``lm_head.weight`` filled with the target embeddings."""
    out.update(keys_values.stacked())
    if unknown:
        raise FormatError(f"{keys_values.family} weights hold tensors {what} has no place "
                          f"for: {sorted(unknown)[:8]}. Nothing was loaded.")
    if untied and "lm_head.weight" not in out and "tgt_embed.weight" in out:
        out["lm_head.weight"] = out["tgt_embed.weight"].clone()
    return out
