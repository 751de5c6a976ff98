"""``zoo serve``'s HTTP routes: OpenAI's API as its client libraries speak it
(``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/models``),
``/v1/rerank``, ``/v1/translations``, ``/v1/images/classifications``, ``/health`` and
``/metrics``, over one :class:`~zoo.serve.engine.Engine`.

Built on Starlette (the ASGI toolkit FastAPI is made of) and run by uvicorn: the bodies
are validated by zoo's own pydantic models (:mod:`zoo.serve.schemas`), so every bad
request is one OpenAI error object with a 4xx status, its message zoo's. A request's
work, its tokenizing and template too, runs in the engine's thread (one thread reads a
model's tokenizer: a fast tokenizer's padding is state, which two threads' calls would
fight over); the route waits for it without holding the event loop, and a client that
goes away cancels it. Every route but ``/health`` asks for the
API key when one is set, compared in constant time; bodies past the limit are refused
before they are read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import io
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .._text import short_repr
from ..errors import ZooError
from .engine import Engine, QueueFull, Ticket, TimedOut
from .metrics import Metrics
from .replies import (Prepared, chat_chunk, chat_logprobs, chat_object, completion_chunk,
                      completion_logprobs, completion_object, new_id, prepare_chat_request,
                      prepare_completion, usage)
from .schemas import (ChatCompletion, Completion, Embeddings, ImageClassification, Limits,
                      Rerank, Translation, generation_changes)

log = logging.getLogger("zoo.serve")


class Refused(Exception):
    """A request refused: its HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.headers = status, kind, code, headers or {}

    def response(self) -> JSONResponse:
        """OpenAI's error object, with the status and headers."""
        return JSONResponse({"error": {"message": str(self), "type": self.kind,
                                       "param": None, "code": self.code}},
                            status_code=self.status, headers=self.headers)


def refusal(exc: BaseException) -> Refused:
    """The HTTP answer to what a request's work raised."""
    if isinstance(exc, Refused):
        return exc
    if isinstance(exc, ZooError):
        return Refused(400, str(exc))
    if isinstance(exc, QueueFull):
        return Refused(429, str(exc), "rate_limit_error", "queue_full",
                       {"Retry-After": str(exc.retry_after)})
    if isinstance(exc, TimedOut):
        return Refused(408, f"{exc}: zoo serve --max-seconds bounds a request's time",
                       "timeout_error", "timeout")
    log.error("a request failed", exc_info=exc)
    return Refused(500, f"the server failed on this request: {short_repr(exc, 300)}",
                   "server_error")


class Guard:
    """ASGI middleware in front of every route: the API key (``Authorization: Bearer``,
    compared in constant time; ``/health`` is open) and the body's size, checked by its
    ``Content-Length`` and again as it arrives."""

    def __init__(self, app, *, api_key: str | None, body_bytes: int) -> None:
        self.app, self.key, self.limit = app, api_key, body_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", ())}
        refused = self._refused(scope, headers)
        if refused is not None:
            return await refused.response()(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise Refused(413, f"the body is more than {self.limit} bytes "
                                       "(zoo serve --max-body-bytes)")
            return message

        await self.app(scope, counted, send)

    def _refused(self, scope, headers: dict[str, str]) -> Refused | None:
        if self.key is not None and scope["path"] != "/health":
            given = headers.get("authorization", "")
            token = given[7:] if given.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), self.key.encode()):
                return Refused(401, "a valid API key is needed: Authorization: Bearer KEY",
                               code="invalid_api_key")
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.limit:
            return Refused(413, f"the body is {length} bytes, more than {self.limit} "
                                "(zoo serve --max-body-bytes)")
        return None


class Server:
    """The routes over ``models`` (name -> model), their engine and metrics."""

    def __init__(self, models: dict[str, Any], limits: Limits) -> None:
        self.models, self.limits = models, limits
        self.metrics = Metrics()
        self.engine = Engine(models, limits, self.metrics)

    # -- plumbing --------------------------------------------------------------------------------
    async def body(self, request: Request, schema: type[BaseModel]) -> Any:
        """The request's body, validated; one 400 naming what is wrong."""
        raw = await request.body()
        try:
            return schema.model_validate_json(raw)
        except ValidationError as exc:
            raise Refused(400, _said(exc)) from None

    def model(self, name: str) -> Any:
        """The model served as ``name``; 404 naming those that are."""
        if name not in self.models:
            raise Refused(404, f"model {name!r} is not served here; these are: "
                               f"{sorted(self.models)}", code="model_not_found")
        return self.models[name]

    def ticket(self, name: str, kind: str, **fields: Any) -> tuple[Ticket, asyncio.Queue]:
        """A ticket whose events arrive in the returned queue, submitted."""
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()
        ticket = Ticket(name, kind, lambda event: loop.call_soon_threadsafe(
            queue.put_nowait, event), seconds=self.limits.seconds, **fields)
        self.engine.submit(ticket)
        return ticket, queue

    async def until_done(self, request: Request, ticket: Ticket, queue: asyncio.Queue,
                         last: tuple[str, ...] = ("done", "result")
                         ) -> list[tuple[str, Any]]:
        """The events of ``ticket`` up to the first of kind ``last`` (an error is raised
        as its refusal); a client that goes away first cancels it (and nothing is
        answered)."""
        gone = asyncio.ensure_future(_disconnected(request))
        events = []
        try:
            while True:
                item = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
                if item not in done:
                    item.cancel()
                    ticket.cancelled = True
                    raise Refused(499, "the client went away")
                events.append(item.result())
                if events[-1][0] == "error":
                    raise refusal(events[-1][1])
                if events[-1][0] in last:
                    return events
        finally:
            gone.cancel()

    async def result(self, request: Request, name: str, work) -> Any:
        """What ``work(model)`` returns, run in the engine's thread between steps."""
        ticket, queue = self.ticket(name, "call", work=work)
        return (await self.until_done(request, ticket, queue))[-1][1]

    # -- the routes ------------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        body = await self.body(request, ChatCompletion)
        self.model(body.model)
        return await self.generation(request, body, lambda model: prepare_chat_request(
            model, body, self.limits), chat=True)

    async def completions(self, request: Request) -> Response:
        body = await self.body(request, Completion)
        self.model(body.model)
        return await self.generation(request, body, lambda model: prepare_completion(
            model, body, self.limits), chat=False)

    async def generation(self, request: Request, body, prepare, *, chat: bool) -> Response:
        """A chat or completion: the engine prepares the replies (the template, the
        tokens, the checks) in its thread, then decodes them, whole or streamed."""
        ident = new_id("chatcmpl" if chat else "cmpl")
        ticket, queue = self.ticket(body.model, "generate", prepare=prepare)
        prepared: Prepared = (await self.until_done(request, ticket, queue,
                                                    ("prepared",)))[-1][1]
        self.metrics.add("zoo_prompt_tokens_total", prepared.prompt_tokens, model=body.model)
        if prepared.beams:
            choices = (await self.until_done(request, ticket, queue))[-1][1]
        elif body.stream:
            return StreamingResponse(self.stream(ticket, queue, body, prepared, ident, chat),
                                     media_type="text/event-stream")
        else:
            choices = [[] for _ in prepared.replies]
            for kind, given in await self.until_done(request, ticket, queue):
                for choice, piece in given if kind == "pieces" else ():
                    choices[choice].append(piece)
        if chat:
            return JSONResponse(chat_object(ident, body.model, choices, prepared))
        return JSONResponse(completion_object(ident, body.model, choices, prepared,
                                              body.echo, body.n))

    async def stream(self, ticket: Ticket, queue: asyncio.Queue, body, prepared: Prepared,
                     ident: str, chat: bool) -> AsyncIterator[str]:
        """Server-sent events: a chunk per choice's piece as it comes, each choice's
        finish, the usage when asked (``stream_options.include_usage``), ``[DONE]``."""
        made = 0
        try:
            if chat:
                for i in range(len(prepared.replies)):
                    yield _event(chat_chunk(ident, body.model, i,
                                            {"role": "assistant", "content": ""}))
            elif body.echo:
                for i in range(len(prepared.replies)):
                    yield _event(completion_chunk(ident, body.model, i,
                                                  prepared.prompts[i // body.n]))
            while True:
                kind, given = await queue.get()
                if kind == "error":
                    yield _event({"error": _error_body(refusal(given))})
                    break
                if kind == "done":
                    break
                for choice, piece in given:
                    made += 1
                    if chat:
                        logprobs = chat_logprobs([piece], prepared.tokenizer)
                        if piece.text or logprobs:
                            yield _event(chat_chunk(ident, body.model, choice,
                                                    {"content": piece.text}, None, logprobs))
                        if piece.finish:
                            yield _event(chat_chunk(ident, body.model, choice, {},
                                                    piece.finish))
                    else:
                        yield _event(completion_chunk(
                            ident, body.model, choice, piece.text, piece.finish,
                            completion_logprobs([piece], prepared.tokenizer)))
            if body.stream_options and body.stream_options.include_usage:
                yield _event({"id": ident, "object": "chat.completion.chunk" if chat else
                              "text_completion", "created": int(time.time()),
                              "model": body.model, "choices": [],
                              "usage": usage(prepared.prompt_tokens, made)})
            yield "data: [DONE]\n\n"
        finally:
            ticket.cancelled = ticket.cancelled or not ticket.ended

    async def embeddings(self, request: Request) -> Response:
        body = await self.body(request, Embeddings)
        self.model(body.model)
        texts = [body.input] if isinstance(body.input, str) else list(body.input)
        self._count(texts)
        ticket, queue = self.ticket(body.model, "embed", texts=texts)
        vectors, tokens = (await self.until_done(request, ticket, queue))[-1][1]
        if body.dimensions is not None and body.dimensions != vectors.shape[1]:
            raise Refused(400, f"dimensions={body.dimensions}: this model's vectors have "
                               f"{vectors.shape[1]} (leave dimensions out)")
        data = []
        for i, vector in enumerate(vectors.float()):
            value = (base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode()
                     if body.encoding_format == "base64" else vector.tolist())
            data.append({"object": "embedding", "index": i, "embedding": value})
        self.metrics.add("zoo_prompt_tokens_total", tokens, model=body.model)
        return JSONResponse({"object": "list", "data": data, "model": body.model,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def rerank(self, request: Request) -> Response:
        from ..reranking import rerank

        body = await self.body(request, Rerank)
        self.model(body.model)
        self._count(body.documents)
        scores = await self.result(request, body.model, lambda model: rerank(
            model, body.query, body.documents))
        if scores.dim() != 1:
            raise Refused(400, f"model {body.model!r} scores {scores.shape[1]} labels; a "
                               "reranker scores one")
        order = scores.argsort(descending=True).tolist()[:body.top_n]
        results = [{"index": i, "relevance_score": float(scores[i]),
                    **({"document": {"text": body.documents[i]}} if body.return_documents
                       else {})} for i in order]
        return JSONResponse({"id": new_id("rerank"), "model": body.model,
                             "results": results})

    async def translations(self, request: Request) -> Response:
        from ..decoding.text import translate

        body = await self.body(request, Translation)
        self.model(body.model)
        texts = [body.input] if isinstance(body.input, str) else list(body.input)
        self._count(texts)
        if body.stream or body.n != 1:
            raise Refused(400, "a translation neither streams nor gives n > 1 choices")
        changes = generation_changes(body, max_tokens=body.max_tokens)
        out = await self.result(request, body.model, lambda model: translate(
            model, texts, **changes))
        return JSONResponse({"object": "list", "model": body.model,
                             "data": [{"index": i, "translation": text}
                                      for i, text in enumerate(out)]})

    async def classify(self, request: Request) -> Response:
        from ..classifying import TEMPLATE, class_names, classify_image

        body = await self.body(request, ImageClassification)
        model = self.model(body.model)
        images = [body.image] if isinstance(body.image, str) else list(body.image)
        self._count(images)
        import anyio

        images = await anyio.to_thread.run_sync(_images, images)  # the bytes, decoded
        template = body.template or TEMPLATE
        probs = await self.result(request, body.model, lambda m: classify_image(
            m, images, body.labels, template=template))
        labels = body.labels or class_names(model)
        data = []
        for i, row in enumerate(probs.tolist()):
            ranked = sorted(zip(labels, row), key=lambda pair: -pair[1])
            data.append({"index": i, "labels": [{"label": label, "score": score}
                                                for label, score in ranked]})
        return JSONResponse({"object": "list", "model": body.model, "data": data})

    async def list_models(self, request: Request) -> Response:
        from ..record import record_of

        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "zoo",
             "kind": str(record_of(model).kind or "")}
            for name, model in self.models.items()]})

    async def health(self, request: Request) -> Response:
        if not self.engine.alive:
            return JSONResponse({"status": "the engine's thread has stopped"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.render(),
                                 media_type="text/plain; version=0.0.4")

    def _count(self, items: list) -> None:
        if len(items) > self.limits.inputs:
            raise Refused(400, f"the request holds {len(items)} inputs, more than this "
                               f"server reads at once ({self.limits.inputs})")

    def routes(self) -> list[Route]:
        """Every route, each answering an error object for what its handler raised and
        counted in the metrics."""
        def route(path, handler, methods=("POST",)):
            async def endpoint(request: Request) -> Response:
                started = time.monotonic()
                try:
                    response = await handler(request)
                except Exception as exc:  # noqa: BLE001 - every failure is an error object
                    response = refusal(exc).response()
                self.metrics.add("zoo_requests_total", route=path,
                                 status=str(response.status_code))
                if not isinstance(response, StreamingResponse):
                    self.metrics.observe("zoo_request_seconds", time.monotonic() - started,
                                         route=path)
                return response
            return Route(path, endpoint, methods=list(methods))

        return [route("/v1/chat/completions", self.chat),
                route("/v1/completions", self.completions),
                route("/v1/embeddings", self.embeddings),
                route("/v1/rerank", self.rerank),
                route("/v1/translations", self.translations),
                route("/v1/images/classifications", self.classify),
                route("/v1/models", self.list_models, ("GET",)),
                route("/health", self.health, ("GET",)),
                route("/metrics", self.metrics_text, ("GET",))]


def make_app(models: dict[str, Any], *, limits: Limits | None = None,
             api_key: str | None = None) -> Any:
    """The ASGI app serving ``models`` (name -> a model ``zoo.load`` gave): its engine
    starts with the app and finishes the work in flight when the app stops."""
    server = Server(models, limits or Limits())

    @contextlib.asynccontextmanager
    async def lifespan(app):
        server.engine.start()
        try:
            yield
        finally:
            server.engine.stop(timeout=server.limits.seconds)

    app = Starlette(routes=server.routes(), lifespan=lifespan)

    async def not_found(request, exc):
        status = getattr(exc, "status_code", 404)
        return Refused(status, f"{request.method} {request.url.path}: no such route "
                               "(zoo serve's routes are under /v1, and /health, /metrics)"
                       if status in (404, 405) else str(exc)).response()

    app.add_exception_handler(404, not_found)
    app.add_exception_handler(405, not_found)
    app.state.server = server
    return Guard(app, api_key=api_key, body_bytes=server.limits.body_bytes)


# -- helpers ---------------------------------------------------------------------------------------
def _said(exc: ValidationError) -> str:
    """A pydantic error in one line per problem."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        if err["type"] == "json_invalid":
            return f"the body is not JSON: {err.get('ctx', {}).get('error', err['msg'])}"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _error_body(refused: Refused) -> dict[str, Any]:
    return {"message": str(refused), "type": refused.kind, "param": None,
            "code": refused.code}


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone away."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _images(items: list[str]) -> list[Any]:
    """Base64 images (or ``data:`` URLs) as PIL images; one 400 naming a bad one."""
    from PIL import Image, UnidentifiedImageError

    opened = []
    for i, item in enumerate(items):
        data = item.split(",", 1)[1] if item.startswith("data:") and "," in item else item
        try:
            raw = base64.b64decode(data, validate=True)
            with Image.open(io.BytesIO(raw)) as image:
                opened.append(image.convert("RGB"))
        except (binascii.Error, ValueError) as exc:
            raise Refused(400, f"image {i} is not base64: {exc}") from None
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
            raise Refused(400, f"image {i} could not be read as an image: {exc}") from None
    return opened
