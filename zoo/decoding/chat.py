"""Chat: a conversation (a list of messages, each a ``role`` and its ``content``) in, the
assistant's reply out, through the model's own chat template.

An instruct model's folder carries a chat template (``chat_template.jinja``, or
``tokenizer_config.json``'s ``chat_template``): Jinja that writes a conversation as the
text the model was tuned on, its turns marked by special tokens (``<|im_start|>``,
``<|user|>``, ``<|eot_id|>``). transformers' ``apply_chat_template`` renders it in a
sandboxed Jinja environment: nothing from the folder runs but the template. The prompt is
the ids it gives with the assistant's turn opened (``add_generation_prompt``), and the
reply ends at the model's end tokens or at the template's end of a turn
(:func:`end_of_turn`), whichever comes first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from .._text import short_repr, with_article
from ..errors import RecipeError
from ..kinds import Kind, kind_of, said
from . import settings_for
from .template_bounds import TemplateTimeout, bounded, check_template
from .text import (check_characters, complete_rows, model_tokenizer, stream_rows,
                   text_rows)

MARK = "\u2063zoo-reply\u2063"
"""A reply no template alters, whose place in a rendered turn shows what ends a turn."""


def messages_of(messages: Any) -> list[dict[str, str]]:
    """``messages`` as a list of ``{"role": ..., "content": ...}`` (texts both), or one
    RecipeError naming the first that is not."""
    if isinstance(messages, (str, bytes, Mapping)):
        raise RecipeError("messages are a list of {'role': ..., 'content': ...}, not one "
                          f"{type(messages).__name__}: give [{{'role': 'user', 'content': "
                          "text}]")
    try:
        items = list(messages)
    except TypeError:
        raise RecipeError("messages are a list, not "
                          f"{with_article(type(messages).__name__)}") from None
    if not items:
        raise RecipeError("messages are a list of one or more messages")
    for i, message in enumerate(items):
        if not isinstance(message, Mapping) or not all(
                isinstance(message.get(key), str) for key in ("role", "content")):
            raise RecipeError(f"message {i} is {short_repr(message, 80)}; each message is "
                              "{'role': 'system'|'user'|'assistant', 'content': text}")
        check_characters(message["content"], f"message {i}'s content")
    return [dict(message) for message in items]


def chat_tokenizer(model, tokenizer: Any = None) -> Any:
    """``tokenizer``, else the model's own, ready for prompts; one RecipeError for a model
    that is no language model or a tokenizer with no chat template."""
    kind = kind_of(model)
    if kind is not Kind.LANGUAGE_MODEL:
        raise RecipeError(f"{with_article(type(model).__name__)} does not chat: zoo.chat "
                          f"decodes a language model, and this one is {said(kind)}")
    tokenizer = model_tokenizer(model, tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        raise RecipeError("this model's tokenizer has no chat template (chat_template.jinja, "
                          "or tokenizer_config.json's chat_template): it is not a chat model. "
                          "zoo.complete continues plain text")
    return tokenizer


def _render(tokenizer, messages: list[dict[str, str]], **kwargs: Any) -> Any:
    """``apply_chat_template``; a template that refuses the conversation (roles out of
    order, a role it does not know) is one RecipeError in its own words, and one that
    renders for longer than :data:`~zoo.decoding.template_bounds.SECONDS` is stopped."""
    check_template(tokenizer)
    try:
        with bounded():
            return tokenizer.apply_chat_template(messages, **kwargs)
    except TemplateTimeout:
        raise
    except MemoryError:
        raise RecipeError("the model's chat template ran out of memory rendering these "
                          "messages: fix the template") from None
    except Exception as exc:  # noqa: BLE001 - jinja2's TemplateError, or what a template raises
        raise RecipeError(f"the model's chat template refuses these messages: "
                          f"{short_repr(exc, 300)}") from None


def chat_ids(model, messages: Sequence[Mapping[str, str]], *, tokenizer: Any = None
             ) -> torch.Tensor:
    """The prompt (1, L) of ``messages``: the chat template's ids with the assistant's
    turn opened, as ``apply_chat_template(messages, add_generation_prompt=True)`` gives."""
    return _prompt_ids(chat_tokenizer(model, tokenizer), messages)


def _prompt_ids(tokenizer, messages: Sequence[Mapping[str, str]]) -> torch.Tensor:
    ids = _render(tokenizer, messages_of(messages), add_generation_prompt=True,
                  tokenize=True, return_dict=False)
    return torch.tensor([list(ids)], dtype=torch.long)


def end_of_turn(tokenizer) -> tuple[int, ...]:
    """The token that ends an assistant's turn in ``tokenizer``'s chat template (``<|im_end|>``,
    ``<|eot_id|>``, ``<end_of_turn>``, or the end token itself): the first token after a
    reply in a rendered conversation, when it is a special token; () when the template
    marks the end of a turn with plain text (the model's end tokens end the reply)."""
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": MARK}]
    try:
        text = _render(tokenizer, conversation, tokenize=False)
    except TemplateTimeout:
        raise
    except Exception:  # noqa: BLE001 - a template that wants another conversation
        return ()
    if MARK not in text:
        return ()
    after = text[text.index(MARK) + len(MARK):]
    ids = tokenizer(after, add_special_tokens=False)["input_ids"] if after.strip() else []
    special = set(getattr(tokenizer, "all_special_ids", ())) | {
        i for i, token in getattr(tokenizer, "added_tokens_decoder", {}).items()
        if getattr(token, "special", False)}
    return (ids[0],) if ids and ids[0] in special else ()


def prepare_chat(model, messages: Any, tokenizer: Any, stop: Any, changes: dict[str, Any]):
    """What a reply to ``messages`` needs, each checked: the prompt's ids (1, L), the
    settings (the model's with ``changes``, ending also at the template's end of a turn)
    and the reply's :class:`~zoo.decoding.text.TextPieces`, ending at a ``stop`` string.
    :func:`chat`, :func:`stream_chat` and ``zoo serve`` start here."""
    tokenizer = chat_tokenizer(model, tokenizer)
    ids = _prompt_ids(tokenizer, messages).to(next(model.parameters()).device)
    settings = settings_for(model, None, **changes)
    if not any(key in changes for key in ("eos_ids", "eos_id", "eos_token_id")):
        ends = tuple(dict.fromkeys((*settings.eos_ids, *end_of_turn(tokenizer))))
        settings = settings_for(model, settings, eos_ids=ends)
    return ids, settings, text_rows(model, tokenizer, ids, settings, stop)


@torch.no_grad()
def stream_chat(model, messages: Sequence[Mapping[str, str]], *, tokenizer: Any = None,
                stop: Sequence[str] = (), **changes: Any) -> Iterator[str]:
    """The assistant's reply to ``messages`` in pieces as it comes (never half a
    character); ``changes`` are generation settings, as for :func:`zoo.stream_text`."""
    ids, settings, rows = prepare_chat(model, messages, tokenizer, stop, changes)
    if settings.num_beams > 1:  # beam search chooses at its end: one piece
        yield complete_rows(model, ids, None, settings, rows)[0]
        return
    for pieces in stream_rows(model, ids, None, settings, rows):
        if pieces[0]:
            yield pieces[0]


@torch.no_grad()
def chat(model, messages: Sequence[Mapping[str, str]], *, tokenizer: Any = None,
         stop: Sequence[str] = (), **changes: Any) -> str:
    """The assistant's reply to ``messages`` (``[{"role": "user", "content": "Hi"}]``),
    through the model's chat template, decoded by its generation settings with
    ``changes`` (greedy, sampled or beam search); it ends at the model's end tokens, the
    template's end of a turn, or right after a ``stop`` string."""
    ids, settings, rows = prepare_chat(model, messages, tokenizer, stop, changes)
    return complete_rows(model, ids, None, settings, rows)[0]
