"""The bodies ``zoo serve`` takes, validated by pydantic: OpenAI's chat completions,
completions and embeddings as its client libraries send them, the rerank body llama.cpp
and Jina share, a translation body and a zero-shot image classification body.

A generation request takes OpenAI's names where OpenAI has one (``max_tokens``,
``temperature``, ``top_p``, ``stop``, ``seed``, ``n``, ``logprobs``) and every other
generation setting of zoo's engine by its own name (``top_k``, ``min_p``,
``repetition_penalty``, ``num_beams``, a plugin rule's setting): those are checked by
the engine itself (:func:`zoo.decoding.settings_for`), so a bad one is the same error
``zoo.generate`` gives. :func:`generation_changes` turns a request into those settings.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..errors import RecipeError

Text = Annotated[str, StringConstraints(max_length=1_000_000)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class Limits(BaseModel):
    """What one request may ask of the server (``zoo serve --max-...``)."""

    model_config = ConfigDict(extra="forbid")

    body_bytes: int = Field(4 * 2**20, ge=1024)
    """The largest request body."""
    messages: int = Field(1024, ge=1)
    """The most messages in a conversation."""
    inputs: int = Field(2048, ge=1)
    """The most texts (prompts, inputs, documents, images) in one request."""
    max_tokens: int = Field(4096, ge=1)
    """The most new tokens a request may ask for (the model's context bounds it too)."""
    choices: int = Field(8, ge=1)
    """The most choices (``n``) of one request."""
    queue: int = Field(256, ge=1)
    """The most requests waiting for each model; past it, 429 with Retry-After."""
    rows: int = Field(64, ge=1)
    """The most sequences one model decodes at once."""
    seconds: float = Field(300.0, gt=0)
    """The longest a request may take, from its arrival to its last token."""


class TextPart(BaseModel):
    """A part of a message's content: text (images are not read)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: Text


class Message(BaseModel):
    """A message of a conversation."""

    model_config = ConfigDict(extra="forbid")
    role: Name
    content: Text | list[TextPart] | None = None
    name: Name | None = None

    def as_dict(self) -> dict[str, str]:
        """``{"role": ..., "content": ...}``, the content's parts joined."""
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        return {"role": self.role, "content": content or ""}


class StreamOptions(BaseModel):
    """``stream_options``: a final chunk with the usage, when asked."""

    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


Stop = Annotated[str, StringConstraints(min_length=1, max_length=1000)]


class Generation(BaseModel):
    """What every generation request takes; settings of zoo's engine by their names
    come as extra fields."""

    model_config = ConfigDict(extra="allow")

    model: Name
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Stop | Annotated[list[Stop], Field(max_length=16)] | None = None
    seed: int | None = Field(None, ge=0, lt=2**32)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    def stops(self) -> list[str]:
        """The stop strings."""
        return [] if self.stop is None else [self.stop] if isinstance(self.stop, str) \
            else list(self.stop)


class ChatCompletion(Generation):
    """``POST /v1/chat/completions``."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class Completion(Generation):
    """``POST /v1/completions``."""

    prompt: Text | list[Text] = Field(min_length=1)
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False


class Embeddings(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="forbid")
    model: Name
    input: Text | list[Text] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None


class Rerank(BaseModel):
    """``POST /v1/rerank``: the documents most relevant to a query first."""

    model_config = ConfigDict(extra="forbid")
    model: Name
    query: Text
    documents: list[Text] = Field(min_length=1)
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False


class Translation(Generation):
    """``POST /v1/translations``: each input's translation by a sequence-to-sequence
    model."""

    input: Text | list[Text] = Field(min_length=1)


class ImageClassification(BaseModel):
    """``POST /v1/images/classifications``: each image's probability of each label (a
    CLIP model, zero-shot), or of the model's own classes (an image classifier)."""

    model_config = ConfigDict(extra="forbid")
    model: Name
    image: str | list[str] = Field(min_length=1)
    """An image as base64 (its file's bytes), or a ``data:image/...;base64,`` URL."""
    labels: list[Name] | None = None
    template: str | None = None


OPENAI_ONLY = {"frequency_penalty": 0.0, "presence_penalty": 0.0}


def generation_changes(request: Generation, *, max_tokens: int | None) -> dict[str, Any]:
    """The generation settings (zoo's names) a request asks for: ``max_tokens`` as
    ``max_new_tokens``, ``temperature`` 0 as greedy and above as sampling at it,
    ``top_p`` (sampling), ``seed``, and every extra field as it is (checked by the
    engine). What zoo does not do is refused by name."""
    for name, default in OPENAI_ONLY.items():
        if getattr(request, name) != default:
            raise RecipeError(f"{name} is not a setting zoo follows (give 0, or leave it "
                              "out); zoo's repetition_penalty divides a repeated token's "
                              "logit instead")
    if request.logit_bias:
        raise RecipeError("logit_bias is not a setting zoo follows; forbidden_ids keeps "
                          "tokens out")
    changes: dict[str, Any] = dict(request.model_extra or {})
    for own in ("max_new_tokens", "max_length"):
        if own in changes and max_tokens is not None:
            raise RecipeError(f"give max_tokens or {own}, not both")
    if max_tokens is not None:
        changes["max_new_tokens"] = max_tokens
    if request.temperature == 0:
        changes["do_sample"] = False
    elif request.temperature is not None:
        changes.update(do_sample=True, temperature=request.temperature)
    if request.top_p is not None:
        changes["top_p"] = request.top_p
        if request.temperature is None:
            changes.setdefault("do_sample", True)
    if request.seed is not None:
        changes["seed"] = request.seed
    return changes
