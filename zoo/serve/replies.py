"""What a generation request becomes before it reaches the engine, and what its pieces
become on the way back: the replies of a chat or a completion (each checked as
:func:`zoo.chat` and :func:`zoo.complete` check theirs, so that a request decodes
exactly as they do), and OpenAI's objects for them, whole or streamed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch

from ..decoding import check_prompts, settings_for
from ..decoding.batch import Piece, Reply
from ..decoding.budget import context_of
from ..decoding.chat import chat_tokenizer, prepare_chat
from ..decoding.text import complete_rows, model_tokenizer, prepare_prompts, text_rows
from ..errors import RecipeError
from ..kinds import Kind, kind_of, said
from .schemas import ChatCompletion, Completion, Generation, Limits, generation_changes


@dataclass
class Prepared:
    """A generation request, ready for the engine: one reply per choice (``n`` per
    prompt), the prompts' token counts, and what the answer is made of."""

    replies: list[Reply]
    prompt_tokens: int
    tokenizer: Any
    prompts: list[str] = field(default_factory=list)
    beams: list[tuple[torch.Tensor, Any, Any]] = field(default_factory=list)
    """For beam search, which the engine runs as one call: each prompt's ids, settings
    and text (no ``replies``)."""

    def beam_search(self, model) -> list[list[Piece]]:
        """Run the beam searches (in the engine's thread); each choice's one piece."""
        out = []
        for ids, settings, text in self.beams:
            complete_rows(model, ids, None, settings, [text])
            tokens = text.ids or [-1]
            finish = "stop" if text.done else "length"
            out.append([Piece(None, text.text if i == 0 else "", token,
                              finish=finish if i == len(tokens) - 1 else None)
                        for i, token in enumerate(tokens)])
        return out


def _checked(model, ids: torch.Tensor, settings, limits: Limits) -> None:
    """Refuse a prompt and settings past the server's limits or the model's context."""
    limit = settings.length_limit(ids.shape[1])
    new = limit - ids.shape[1]
    if new > limits.max_tokens:
        raise RecipeError(f"max_tokens={new} is more than this server gives one request "
                          f"({limits.max_tokens}, zoo serve --max-tokens): ask for fewer")
    context = context_of(model)
    context = None if context is None else context[0]
    if context is not None and ids.shape[1] >= context:
        raise RecipeError(f"the prompt holds {ids.shape[1]} tokens, and this model reads "
                          f"{context} positions (its context) in all: give a shorter prompt")
    if context is not None and limit - 1 > context:
        raise RecipeError(f"the prompt's {ids.shape[1]} tokens and max_tokens={new} need "
                          f"{limit - 1} positions, past the {context} this model reads (its "
                          f"context): ask for max_tokens={context + 1 - ids.shape[1]} at most")
    check_prompts(model, ids, settings)


def _replies(model, ids, settings, first, tokenizer, stops, n, logprobs) -> list[Reply]:
    """``n`` replies to one prompt: ``first`` its text, then new ones; a seeded sampler
    draws choice ``i`` with ``seed + i``."""
    replies = []
    for i in range(n):
        mine = settings
        if i and settings.do_sample and settings.seed is not None:
            mine = settings_for(model, settings, seed=(settings.seed + i) % 2**32)
        text = first if i == 0 else text_rows(model, tokenizer, ids, settings, stops)[0]
        replies.append(Reply(ids, mine, text, logprobs=logprobs))
    return replies


def _common(request: Generation, limits: Limits, max_tokens: int | None) -> dict[str, Any]:
    if request.n > limits.choices:
        raise RecipeError(f"n={request.n} is more choices than this server gives one "
                          f"request ({limits.choices})")
    return generation_changes(request, max_tokens=max_tokens)


def prepare_chat_request(model, request: ChatCompletion, limits: Limits) -> Prepared:
    """The replies to a chat request, through the model's chat template."""
    if len(request.messages) > limits.messages:
        raise RecipeError(f"the conversation holds {len(request.messages)} messages, more "
                          f"than this server reads ({limits.messages})")
    changes = _common(request, limits, request.max_completion_tokens or request.max_tokens)
    messages = [m.as_dict() for m in request.messages]
    stops = request.stops()
    ids, settings, rows = prepare_chat(model, messages, None, stops, changes)
    _checked(model, ids, settings, limits)
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    return _prepared(model, [(ids, settings, rows[0])], chat_tokenizer(model), stops,
                     request, logprobs)


def prepare_completion(model, request: Completion, limits: Limits) -> Prepared:
    """The replies to a completion request, ``n`` for each prompt."""
    if kind_of(model) is not Kind.LANGUAGE_MODEL:
        raise RecipeError(f"model {request.model!r} does not complete prompts: it is "
                          f"{said(kind_of(model))}, and /v1/completions serves language "
                          "models (a sequence-to-sequence model translates: "
                          "/v1/translations)")
    prompts = [request.prompt] if isinstance(request.prompt, str) else list(request.prompt)
    if len(prompts) > limits.inputs:
        raise RecipeError(f"the request holds {len(prompts)} prompts, more than this server "
                          f"reads at once ({limits.inputs})")
    changes = _common(request, limits, request.max_tokens)
    stops = request.stops()
    read = []
    for prompt in prompts:
        ids, _, settings, rows = prepare_prompts(model, None, [prompt], stops, changes)
        _checked(model, ids, settings, limits)
        read.append((ids, settings, rows[0]))
    prepared = _prepared(model, read, model_tokenizer(model), stops, request,
                         request.logprobs)
    prepared.prompts = prompts
    return prepared


def _prepared(model, read, tokenizer, stops, request: Generation, logprobs) -> Prepared:
    settings = read[0][1]
    if settings.num_beams > 1:
        if request.stream or request.n > 1 or logprobs is not None:
            raise RecipeError(f"beam search (num_beams={settings.num_beams}) chooses one "
                              "reply at its end: it neither streams nor gives n > 1 choices "
                              "or logprobs")
        return Prepared([], sum(r[0].shape[1] for r in read), tokenizer, beams=list(read))
    replies = [r for ids, mine, text in read
               for r in _replies(model, ids, mine, text, tokenizer, stops, request.n,
                                 logprobs)]
    return Prepared(replies, sum(r[0].shape[1] for r in read), tokenizer)


# -- OpenAI's objects ------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    """A fresh object id, ``prefix-`` and 24 hex digits."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt: int, completion: int) -> dict[str, int]:
    """OpenAI's ``usage`` object."""
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def chat_logprobs(pieces: list[Piece], tokenizer) -> dict[str, Any] | None:
    """OpenAI's ``logprobs`` of a chat choice: each token's, with the most likely."""
    if not pieces or pieces[0].logprob is None:
        return None

    def entry(token: int, logprob: float) -> dict[str, Any]:
        text = tokenizer.decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return {"content": [{**entry(p.token, p.logprob),
                         "top_logprobs": [entry(t, lp) for t, lp in p.top]} for p in pieces]}


def completion_logprobs(pieces: list[Piece], tokenizer, offset: int = 0
                        ) -> dict[str, Any] | None:
    """OpenAI's legacy ``logprobs`` of a completion choice."""
    if not pieces or pieces[0].logprob is None:
        return None
    tokens = [tokenizer.decode([p.token]) for p in pieces]
    offsets, at = [], offset
    for text in tokens:
        offsets.append(at)
        at += len(text)
    return {"tokens": tokens, "token_logprobs": [p.logprob for p in pieces],
            "top_logprobs": [{tokenizer.decode([t]): lp for t, lp in p.top} for p in pieces],
            "text_offset": offsets}


def chat_object(ident: str, model: str, choices: list[list[Piece]], prepared: Prepared
                ) -> dict[str, Any]:
    """``chat.completion``: every choice's whole reply."""
    return {"id": ident, "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": i, "message": {"role": "assistant",
                                                 "content": "".join(p.text for p in pieces)},
                         "logprobs": chat_logprobs(pieces, prepared.tokenizer),
                         "finish_reason": pieces[-1].finish if pieces else "length"}
                        for i, pieces in enumerate(choices)],
            "usage": usage(prepared.prompt_tokens, sum(len(c) for c in choices))}


def completion_object(ident: str, model: str, choices: list[list[Piece]], prepared: Prepared,
                      echo: bool, n: int) -> dict[str, Any]:
    """``text_completion``: every choice's whole text (after its prompt, with ``echo``)."""
    out = []
    for i, pieces in enumerate(choices):
        prompt = prepared.prompts[i // n] if echo else ""
        out.append({"index": i, "text": prompt + "".join(p.text for p in pieces),
                    "logprobs": completion_logprobs(pieces, prepared.tokenizer, len(prompt)),
                    "finish_reason": pieces[-1].finish if pieces else "length"})
    return {"id": ident, "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": out,
            "usage": usage(prepared.prompt_tokens, sum(len(c) for c in choices))}


def chat_chunk(ident: str, model: str, choice: int, delta: dict[str, Any],
               finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a stream."""
    return {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model, "choices": [{"index": choice, "delta": delta,
                                         "logprobs": logprobs, "finish_reason": finish}]}


def completion_chunk(ident: str, model: str, choice: int, text: str,
                     finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
    """One ``text_completion`` chunk of a stream."""
    return {"id": ident, "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": [{"index": choice, "text": text,
                                         "logprobs": logprobs, "finish_reason": finish}]}
