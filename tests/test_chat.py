"""Chat: an instruct model's folder (Qwen2.5-Instruct's ChatML template, TinyLlama-Chat's
Zephyr template, on a Qwen2 made by transformers with a tokenizer trained here) gives
apply_chat_template's prompt ids and transformers' reply, ending at the template's end of
a turn, through zoo.chat, zoo.stream_chat and zoo chat."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import torch

import zoo
from zoo.decoding.chat import chat_ids, end_of_turn
from zoo.errors import FormatError, RecipeError

from .conftest import run_zoo
from .language_models import CHATML, FIRST, ZEPHYR, chat_model

tf = pytest.importorskip("transformers")

STOP_AFTER = 4
"""The reply to :data:`FIRST` ends at <|im_end|> after this many tokens."""
CONVERSATION = [
    {"role": "system", "content": "You sell sea shells."},
    {"role": "user", "content": "The cat sat on the mat."},
    {"role": "assistant", "content": "A dog ran into the garden."},
    {"role": "user", "content": "Über den Fluss führt eine Brücke."},
]


@pytest.fixture(scope="module")
def chatml(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat") / "chatml"
    model, tokenizer = chat_model(folder, CHATML, stop_after=STOP_AFTER)
    return folder, model, tokenizer, zoo.build(f"local-dir:{folder}")


def _reference(model, tokenizer, messages, **settings):
    """transformers' reply: generate on apply_chat_template's ids, ending at the end
    token or <|im_end|>, decoded without special tokens."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                        return_dict=False)
    ends = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    out = model.generate(torch.tensor([ids]), eos_token_id=ends, pad_token_id=ends[0],
                         **settings)
    return tokenizer.decode(out[0, len(ids):], skip_special_tokens=True), out[0, len(ids):]


@pytest.mark.parametrize("template", [CHATML, ZEPHYR], ids=["chatml", "zephyr"])
def test_the_prompt_is_apply_chat_templates_ids(template, chatml, tmp_path):
    if template is CHATML:
        folder, _, tokenizer, ours = chatml
        turn = (tokenizer.convert_tokens_to_ids("<|im_end|>"),)
    else:
        folder = tmp_path / "zephyr"
        _, tokenizer = chat_model(folder, template)
        ours = zoo.build(f"local-dir:{folder}")
        turn = (tokenizer.eos_token_id,)
    for messages in (FIRST, CONVERSATION):
        expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 return_dict=False)
        assert chat_ids(ours, messages).tolist() == [expected]
    assert end_of_turn(ours.tokenizer) == turn


def test_a_reply_is_transformers_and_ends_at_the_end_of_the_turn(chatml):
    _, model, tokenizer, ours = chatml
    text, tokens = _reference(model, tokenizer, FIRST, max_new_tokens=20, do_sample=False)
    assert len(tokens) == STOP_AFTER + 1  # it ended at <|im_end|>, which the template put
    assert tokens[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert zoo.chat(ours, FIRST, max_new_tokens=20, do_sample=False) == text != ""
    assert "".join(zoo.stream_chat(ours, FIRST, max_new_tokens=20, do_sample=False)) == text
    # without the end of the turn, the model's own end token alone would go on
    longer = zoo.chat(ours, FIRST, max_new_tokens=20, do_sample=False,
                      eos_ids=[tokenizer.eos_token_id])
    assert longer.startswith(text) and len(longer) > len(text)
    text, _ = _reference(model, tokenizer, CONVERSATION, max_new_tokens=12, num_beams=3,
                         do_sample=False)
    assert zoo.chat(ours, CONVERSATION, max_new_tokens=12, num_beams=3, do_sample=False) == text
    assert list(zoo.stream_chat(ours, CONVERSATION, max_new_tokens=12, num_beams=3,
                                do_sample=False)) == [text]  # beam search: one piece
    sampled = [zoo.chat(ours, CONVERSATION, do_sample=True, temperature=0.9,
                        max_new_tokens=12, seed=3) for _ in range(2)]
    assert sampled[0] == sampled[1]  # a seed repeats


def test_what_cannot_chat_is_refused_by_name(chatml, with_tokenizer):
    *_, ours = chatml
    with pytest.raises(RecipeError, match="messages are a list"):
        zoo.chat(ours, "Hello")
    with pytest.raises(RecipeError, match="message 1 is"):
        zoo.chat(ours, [FIRST[0], {"role": "user"}])
    with pytest.raises(RecipeError, match="one or more messages"):
        zoo.chat(ours, [])
    _, _, folder = with_tokenizer  # a GPT-2 whose tokenizer has no chat template
    with pytest.raises(RecipeError, match="no chat template"):
        zoo.chat(zoo.build(f"local-dir:{folder}"), FIRST)
    with pytest.raises(RecipeError, match="does not chat"):
        zoo.chat(zoo.build("minilm-l6-h384"), FIRST)
    strict = "{{ raise_exception('Conversation roles must alternate') }}"
    with pytest.raises(RecipeError, match="refuses these messages.*must alternate"):
        zoo.chat(ours, FIRST, tokenizer=_with_template(ours.tokenizer, strict))


@pytest.mark.parametrize("broken,words", [
    (lambda p: os.mkfifo(p), "chat_template.jinja is a FIFO"),
    (lambda p: p.write_bytes(b"{{ '\xff' }}"), "chat_template.jinja is not UTF-8"),
], ids=["fifo", "latin-1"])
def test_a_broken_chat_template_file_is_one_error_naming_it(chatml, tmp_path, broken, words):
    folder = tmp_path / "copy"
    shutil.copytree(chatml[0], folder)
    (folder / "chat_template.jinja").unlink()
    broken(folder / "chat_template.jinja")
    with pytest.raises(FormatError, match=words):
        zoo.chat(zoo.build(f"local-dir:{folder}"), FIRST)


HOSTILE = {
    "nested ranges": "{% for i in range(99999) %}{% for j in range(99999) %}"
                     "{% for k in range(99999) %}{% endfor %}{% endfor %}{% endfor %}",
    "namespace counter": "{% set n = namespace(c=0) %}{% for i in range(99999) %}"
                         "{% for j in range(99999) %}{% set n.c = n.c + 1 %}{% endfor %}"
                         "{% endfor %}{{ n.c }}",
    "power": "{{ 9 ** ((messages|length) * 1000000000) }}",
    "lipsum": "{{ lipsum(n=1000000) }}",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_template_that_would_run_for_ever_is_stopped_within_seconds(chatml, monkeypatch,
                                                                      name):
    """The issue's four templates (each loop under the sandbox's range limit) hung zoo.chat
    for ever; each is one RecipeError within the deadline (made short here), and the same
    tokenizer then renders a real template as apply_chat_template does."""
    from zoo.decoding import template_bounds

    monkeypatch.setattr(template_bounds, "SECONDS", 0.5)
    ours = chatml[3]
    tokenizer = _with_template(ours.tokenizer, HOSTILE[name])
    start = time.monotonic()
    with pytest.raises(RecipeError, match="ran past 0.5 s|raises to a power"):
        zoo.chat(ours, FIRST, tokenizer=tokenizer)
    assert time.monotonic() - start < 10
    tokenizer.chat_template = CHATML
    assert chat_ids(ours, FIRST, tokenizer=tokenizer)[0].tolist() == (
        chatml[2].apply_chat_template(FIRST, add_generation_prompt=True, tokenize=True,
                                      return_dict=False))


def test_a_conversation_past_the_context_is_refused_within_seconds(chatml):
    """A Qwen2 decoded 250,000 words or 10,000 messages for minutes: its context is its
    config's max_position_embeddings, checked before the prompt is read."""
    ours, context = chatml[3], chatml[1].config.max_position_embeddings
    for messages in ([{"role": "user", "content": "cat " * 250_000}],
                     [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi"}]
                     * 5_000):
        start = time.monotonic()
        with pytest.raises(RecipeError, match=f"past the {context} positions this model reads"):
            zoo.chat(ours, messages)
        assert time.monotonic() - start < 20
    with pytest.raises(RecipeError, match=f"past the {context} this model reads"):
        zoo.chat(ours, FIRST, max_new_tokens=10_000)


def test_zoo_chat_of_a_folder_whose_template_loops_ends(chatml, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(chatml[0], folder)
    (folder / "chat_template.jinja").write_text(HOSTILE["namespace counter"])
    start = time.monotonic()
    done = run_zoo("chat", f"local-dir:{folder}", input="hi\n")
    assert done.returncode == 2 and "ran past 5 s" in done.stderr, done.stderr
    assert time.monotonic() - start < 60


def _with_template(tokenizer, template):
    import copy

    other = copy.deepcopy(tokenizer._imported.tokenizer())
    other.chat_template = template
    return other


def test_zoo_chat_streams_each_reply_and_keeps_the_conversation(chatml, with_tokenizer):
    folder, *_, ours = chatml
    done = run_zoo("chat", f"local-dir:{folder}", "--system", "You sell sea shells.",
                   "--greedy", "--max-new-tokens", "12",
                   input="The cat sat on the mat.\n\nÜber den Fluss führt eine Brücke.\n")
    assert done.returncode == 0, done.stderr
    replies = done.stdout.split("\n")[:2]
    messages = [CONVERSATION[0], CONVERSATION[1]]
    first = zoo.chat(ours, messages, do_sample=False, max_new_tokens=12)
    messages += [{"role": "assistant", "content": first}, CONVERSATION[3]]
    second = zoo.chat(ours, messages, do_sample=False, max_new_tokens=12)
    assert replies == [first, second]
    assert done.stdout == f"{first}\n{second}\n"
    done = run_zoo("chat", "minilm-l6-h384", input="Hello\n")
    assert done.returncode != 0 and "is not a language model" in done.stderr
    _, _, plain = with_tokenizer  # a GPT-2 without a chat template: refused before input
    done = run_zoo("chat", f"local-dir:{plain}", input="")
    assert done.returncode == 2 and "no chat template" in done.stderr
