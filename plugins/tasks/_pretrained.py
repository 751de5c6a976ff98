"""A pretrained model's own tokenizer in a task that fine-tunes it (``zoo train
translate-de-en --set model=hf-hub:Helsinki-NLP/opus-mt-de-en``, ``zoo train lm-english
--set model=hf-hub:openai-community/gpt2``): transformers' tokenizer and the model's
start, end and pad ids and generation settings, saved in the run folder (``tokenizer/``)
so that the run decodes without the model it started from."""

from __future__ import annotations

from pathlib import Path

FOLDER = "tokenizer"
"""The run folder's subfolder that holds a fine-tuned model's tokenizer."""


class PretrainedTokenizer:
    """A transformers tokenizer behind the ``tokenizers`` calls the task makes (``encode``
    with ``.ids``, ``decode``, ``get_vocab_size``, ``id_to_token``), with the model's
    start, end and pad ids. Sources are encoded as the model was trained (Marian's end
    its source with the end token); targets without the end token, which ``collate``
    adds."""

    class _Ids:
        def __init__(self, ids: list[int]) -> None:
            self.ids = ids

    @classmethod
    def of(cls, model, task: str) -> "PretrainedTokenizer":
        """The tokenizer and ids of ``model``, imported from a transformers folder with its
        tokenizer and generation settings (task ``task`` fine-tunes it)."""
        imported = model.imported
        if imported is None or imported.generation is None:
            raise ValueError(f"{task} fine-tunes a model imported with its tokenizer and "
                             "generation settings (a transformers folder)")
        g = imported.generation
        return cls(imported.tokenizer(), pad=g.pad_id, start=g.start_id, eos=g.eos_ids[0],
                   generation=g.model_dump(mode="json"),
                   context=getattr(model.settings, "max_len", None))

    def __init__(self, tokenizer, *, pad: int, start: int, eos: int,
                 generation: dict | None = None, context: int | None = None) -> None:
        self.tokenizer, self.pad, self.start, self.eos = tokenizer, pad, start, eos
        self.generation = generation
        """The imported model's generation settings, as data (None in runs saved before
        zoo kept them: the ids alone then)."""
        self.context = context
        """The positions the model reads (its max_len), None where not known."""

    def encode(self, text: str) -> "PretrainedTokenizer._Ids":
        return self._Ids(self.tokenizer(text)["input_ids"])

    def text_ids(self, text: str) -> list[int]:
        """The ids of ``text`` alone, without the tokens the tokenizer adds around it."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_target(self, text: str) -> list[int]:
        ids = self.tokenizer(text_target=text)["input_ids"]
        return ids[:-1] if ids and ids[-1] == self.eos else ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def get_vocab_size(self) -> int:
        return len(self.tokenizer)

    def id_to_token(self, i: int) -> str:
        return self.tokenizer.convert_ids_to_tokens(int(i))

    def save(self, folder: Path) -> None:
        import json

        self.tokenizer.save_pretrained(str(folder))
        (folder / "zoo-ids.json").write_text(json.dumps(
            {"pad": self.pad, "start": self.start, "eos": self.eos,
             "generation": self.generation, "context": self.context}))

    @classmethod
    def load(cls, folder: Path) -> "PretrainedTokenizer":
        import json

        from transformers import AutoTokenizer

        ids = json.loads((folder / "zoo-ids.json").read_text())
        return cls(AutoTokenizer.from_pretrained(str(folder)), **ids)
