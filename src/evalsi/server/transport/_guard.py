"""What every HTTP scoring request (JSON and Connect) passes before its route sees it.

In order: the token is checked from the headers (no byte of the body is read for an unknown caller); a declared
``Content-Length`` over ``rewards.max_request_bytes`` is refused at once (413 on HTTP JSON, ``resource_exhausted``
on Connect); room for the body is taken in ``rewards.max_inflight_bytes`` within the project's share (bodies past
it wait unread, and TCP pushes back on their senders); the body is read within ``rewards.body_timeout`` (an idle
socket gets 408 and gives its room back) and counted as it arrives (a chunked body past the maximum gets 413).
Refusals close the connection, so an unread body is never drained either.

The route then runs with the body replayed; if the client disconnects before the answer is sent, the route is
cancelled, and with it the call's queued scoring work.

Every other HTTP request (the ``/ui`` login form, any route given a body) must deliver its body within the same
``rewards.body_timeout`` of its headers: past it the client gets 408 and the connection closes, and the route
reads a disconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from evalsi.server._errors import ServiceError
from evalsi.server._status import status_of
from evalsi.server._tokens import Principal

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PRINCIPAL_KEY = "evalsi.principal"
"""Where the guard leaves the authenticated principal in the ASGI scope."""


class Disconnected(Exception):
    """The client went away while its body was being read."""


def too_large(size: int | None, limit: int) -> ServiceError:
    """The refusal of a body over ``rewards.max_request_bytes``."""
    got = f"{size} bytes" if size is not None else "more"
    return ServiceError(
        "resource_exhausted",
        f"the request body ({got}) exceeds rewards.max_request_bytes={limit}; split the batch",
        "request_too_large",
        limit=limit,
    )


async def read_body(receive: Receive, limit: int, timeout: float) -> bytes:
    """The whole body, refused past ``limit`` bytes or ``timeout`` seconds.

    Raises:
        ServiceError: ``resource_exhausted`` (too large) or ``deadline_exceeded`` (too slow).
        Disconnected: The client went away.

    """
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):  # one deadline for the whole body, however it is chunked
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise Disconnected
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise too_large(None, limit)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        raise _body_late(timeout) from None


async def refuse(send: Send, error: ServiceError, connect: bool) -> None:
    """Answer ``error`` in the route's protocol and close the connection (its body stays unread)."""
    if connect:
        status = status_of(error.status).connect_http
        body = orjson.dumps({"code": error.status, "message": error.message})
    else:
        status = error.http_status
        body = orjson.dumps(error.payload())
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _body_late(timeout: float) -> ServiceError:
    return ServiceError(
        "deadline_exceeded", f"the request body did not arrive within rewards.body_timeout={timeout:g}s", "body_timeout"
    )


async def run_with_body_deadline(app: ASGIApp, scope: Scope, receive: Receive, send: Send, timeout: float) -> None:
    """Run ``app`` with its request body due within ``timeout`` seconds of now.

    Past the deadline the client is answered 408 (unless an answer has started) and the connection closes; the app
    reads ``http.disconnect`` and whatever it sends then is dropped. Once the body is whole, ``app`` waits for the
    client's disconnect as long as it likes (an answer may take long).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    whole = False
    late = False
    answering = False

    async def timed_receive() -> Message:
        nonlocal whole, late
        if late:
            return {"type": "http.disconnect"}
        if whole:
            return await receive()
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            late = True
            if not answering:
                await refuse(send, _body_late(timeout), connect=False)
            return {"type": "http.disconnect"}
        if message["type"] != "http.request" or not message.get("more_body", False):
            whole = True
        return message

    async def sending(message: Message) -> None:
        nonlocal answering
        if late:
            return
        if message["type"] == "http.response.start":
            answering = True
        await send(message)

    await app(scope, timed_receive, sending)


async def run_cancellable(app: ASGIApp, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
    """Run ``app`` with ``body`` replayed; cancel it if the client disconnects before the answer is sent."""
    replayed = False
    disconnect: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    answered = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await asyncio.shield(disconnect)

    async def sending(message: Message) -> None:
        nonlocal answered
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            answered = True
        await send(message)

    task = asyncio.ensure_future(app(scope, replay, sending))

    async def watch() -> None:
        message = await receive()  # after the whole body, the next message is the disconnect
        if not disconnect.done():
            disconnect.set_result(message)
        if message["type"] == "http.disconnect" and not answered:
            task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        await task
    except asyncio.CancelledError:
        if not (disconnect.done() and task.cancelled()):
            raise  # our own caller cancelled us, not the client's disconnect
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if not task.done():
            task.cancel()


Authenticator = Callable[[str | None], Awaitable[Principal]]
BodyGate = Callable[[str, int], contextlib.AbstractAsyncContextManager[None]]


class Guard:
    """ASGI middleware: authenticate, bound and time the body, then run the scoring route cancellably.

    Any other HTTP request gets the same body deadline (:func:`run_with_body_deadline`).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        is_scoring: Callable[[str], str | None],
        authenticate: Authenticator,
        gate: BodyGate,
        max_bytes: Callable[[], int],
        body_timeout: Callable[[], float],
    ) -> None:
        self.app = app
        self.is_scoring = is_scoring
        self.authenticate = authenticate
        self.gate = gate
        self.max_bytes = max_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Guard a scoring request; pass anything else through."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        protocol = self.is_scoring(scope["path"]) if scope["method"] == "POST" else None
        if protocol is None:
            await run_with_body_deadline(self.app, scope, receive, send, self.body_timeout())
            return
        connect = protocol == "connect"
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        limit = self.max_bytes()
        try:
            raw_auth = headers.get(b"authorization")
            principal = await self.authenticate(raw_auth.decode("latin-1") if raw_auth is not None else None)
            length = _content_length(headers.get(b"content-length"))
            if length is not None and length > limit:
                raise too_large(length, limit)
        except ServiceError as error:
            await refuse(send, error, connect)
            return
        async with self.gate(principal.project, length if length is not None else limit):
            try:
                body = await read_body(receive, limit, self.body_timeout())
            except ServiceError as error:
                await refuse(send, error, connect)
                return
            except Disconnected:
                return
            scope[PRINCIPAL_KEY] = principal
            await run_cancellable(self.app, scope, body, receive, send)


def _content_length(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    text = raw.decode("latin-1").strip()
    if not text.isdigit():
        raise ServiceError("invalid_argument", f"malformed Content-Length {text[:40]!r}")
    return int(text)
