"""Continuous batching (zoo.decoding.batch): prompts that arrive apart, joining a running
batch between steps (shorter ones padded to the running rows, longer ones reading the
running rows again) and leaving when done, each give the tokens zoo.generate gives that
prompt alone, greedy and seeded sampling, on published decoder variants (learned,
rotary and sliding-window positions) and on a model whose cache cannot join."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.cache import LanguageModelCache
from zoo.decoding import settings_for
from zoo.decoding.batch import Reply, RunningBatch

pytest.importorskip("transformers")


class Tokens:
    """A reply's text that ends at an end token: its tokens are what is compared."""

    def __init__(self, settings) -> None:
        self.eos, self.done = set(settings.eos_ids), False

    def add(self, token: int) -> str:
        self.done = self.done or token in self.eos
        return ""

    def rest(self) -> str:
        return ""


PROMPTS = (5, 9, 3, 12, 7, 20, 4)
"""Prompt lengths: arrivals shorter and longer than the running rows."""


def _arrivals(model, settings) -> tuple[list[Reply], RunningBatch]:
    """Seven prompts arriving in four groups while the others decode."""
    g = torch.Generator().manual_seed(1)
    replies = [Reply(torch.randint(3, 60, (1, n), generator=g), settings, Tokens(settings))
               for n in PROMPTS]
    batch = RunningBatch(model, waste=0.3)
    with torch.no_grad():
        batch.add(replies[:2])
        batch.step(), batch.step()
        batch.add(replies[2:4])
        batch.step()
        batch.add(replies[4:6])
        for _ in range(5):
            batch.step()
        batch.add(replies[6:])
        while len(batch):
            batch.step()
    return replies, batch


@pytest.mark.parametrize("variant", ["gpt2", "qwen2.5", "mistral", "gemma"])
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("longer", ["shifted", "read-again"])
def test_replies_joining_and_leaving_are_each_generates_alone(variant, sample, longer,
                                                              lm_folders, monkeypatch):
    """A longer prompt joins by the running rows' keys shifted (rotary ones turned), or,
    where an attention cannot say how its keys move, by the rows read again."""
    from zoo.attention import MultiHeadAttention

    if longer == "read-again":
        monkeypatch.setattr(MultiHeadAttention, "SHIFTABLE", ())
    model = zoo.build(f"local-dir:{lm_folders[variant][1]}").eval()
    settings = settings_for(model, None, max_new_tokens=12, do_sample=sample, seed=3)
    replies, batch = _arrivals(model, settings)
    assert (batch.shifts >= 2 and batch.reads == 0) if longer == "shifted" else \
        (batch.shifts == 0 and batch.reads >= 2)
    for reply in replies:
        alone = zoo.generate(model, reply.ids, settings)[0].tolist()
        got = reply.tokens[0, reply.ids.shape[1]:].tolist()
        assert got == alone[:len(got)] and reply.finish is not None


@pytest.mark.parametrize("recipe, attention", [("gpt2-tiny", "performer"), ("gpt2-tiny", "lsh"),
                                               ("llama-tiny", "performer"),
                                               ("llama-tiny", "linear")])
def test_a_model_whose_cache_cannot_join_decodes_a_group_at_a_time(recipe, attention):
    """A recurrent state (Performer, linear attention; llama-tiny's grouped key/value
    heads each serving its group of query heads, which failed with a RuntimeError), or
    no cache at all (LSH re-reads the prefix)."""
    torch.manual_seed(0)
    model = zoo.build(recipe, attention=attention).eval()
    settings = settings_for(model, None, max_new_tokens=6, do_sample=False)
    batch = RunningBatch(model)
    first, later = (Reply(torch.tensor([[5, 6, 7]]), settings, Tokens(settings)),
                    Reply(torch.tensor([[8, 9]]), settings, Tokens(settings)))
    with torch.no_grad():
        batch.add([first])
        assert not batch.joins and not batch.admits()
        with pytest.raises(ValueError, match="one group at a time"):
            batch.add([later])
        while len(batch):
            batch.step()
        batch.add([later])
        while len(batch):
            batch.step()
    for reply in (first, later):
        assert reply.tokens[0, reply.ids.shape[1]:].tolist() == \
            zoo.generate(model, reply.ids, settings)[0].tolist()


def test_caches_join_only_at_one_length():
    a, b = LanguageModelCache(1), LanguageModelCache(1)
    a[0].append(torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8))
    b[0].append(torch.ones(2, 2, 3, 8), torch.ones(2, 2, 3, 8))
    with pytest.raises(ValueError, match="pad the shorter prompts on the left"):
        a.join(b)
    b[0].append(torch.ones(2, 2, 1, 8), torch.ones(2, 2, 1, 8))
    b.padding = torch.tensor([[True, False, False, False], [False] * 4])
    a.join(b)
    assert a.rows == 3 and a[0].k.shape == (3, 2, 4, 8)
    assert a.padding.tolist() == [[False] * 4, [True, False, False, False], [False] * 4]
    assert a.real_counts(3, "cpu").tolist() == [4, 3, 4]
