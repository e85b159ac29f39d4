"""A scripted OpenAI-compatible server on loopback, for tests and benchmarks that need a real model endpoint.

It speaks real HTTP/1.1 (keep-alive, ``Content-Length`` bodies) on ``127.0.0.1`` and answers
``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models`` in the OpenAI wire format,
including ``n`` choices and ``usage``. What it answers is scripted per prompt; faults can be injected.

Usage::

    from tests.helpers.openai_server import OpenAIServer

    with OpenAIServer(answers={"What is 2+2?": "4", "Name a colour": ["red", "blue"]}, default="?") as server:
        server.base_url                       # "http://127.0.0.1:<port>/v1"
        server.inject(status=429, times=2)    # the next two requests get 429 (with Retry-After: 0)
        server.inject(status=500, prompt="What is 2+2?")   # only requests for this prompt
        server.inject(delay=5.0)              # the next request stalls 5 s (to trigger client timeouts)
        server.delay = 0.01                   # every request takes at least 10 ms
        server.requests                       # every JSON body received, in order
        server.headers                        # and each request's headers (lower-case names)
        server.reset_peak("Narrow")           # count open requests for prompts starting "Narrow" from now on
        server.peak_in_flight                 # the most of them held open at once
        server.connections                    # TCP connections accepted so far (keep-alive reuses them)

The prompt is the ``prompt`` of a completions request, or the content of the last user message of a chat
request. An answer is a string, a list (successive samples for that prompt cycle through it, across requests),
or a callable ``f(prompt, body) -> str``. Unknown prompts get ``default``. For chat, a callable may also return
a mapping: the assistant message itself (e.g. with ``tool_calls``). A request with ``"stream": true`` is answered
with server-sent events, one per word of each answer (``chat.completion.chunk`` deltas, or completions ``text``),
then ``data: [DONE]``.

As a process (for benchmarks): ``python -m tests.helpers.openai_server --default 'ok'`` prints its base URL on
stdout and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Answer = str | list[str] | Callable[[str, dict[str, Any]], "str | dict[str, Any]"]


@dataclass
class Fault:
    """One injected fault: an HTTP status, a stall, or both, for ``times`` matching requests."""

    status: int | None = None
    delay: float = 0.0
    times: int = 1
    prompt: str | None = None
    retry_after: float | None = 0.0


class OpenAIServer:
    """A scripted OpenAI-compatible HTTP server running on its own thread (a context manager)."""

    def __init__(self, answers: Mapping[str, Answer] | None = None, default: Answer = "", delay: float = 0.0) -> None:
        self.answers: dict[str, Answer] = dict(answers or {})
        self.default = default
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.statuses: list[int] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.connections = 0
        self._watched = ""
        self._faults: list[Fault] = []
        self._cursor: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def inject(
        self,
        *,
        status: int | None = None,
        delay: float = 0.0,
        times: int = 1,
        prompt: str | None = None,
        retry_after: float | None = 0.0,
    ) -> None:
        """Make the next ``times`` requests (for ``prompt``, when given) fail with ``status`` and/or stall."""
        with self._lock:
            self._faults.append(Fault(status, delay, times, prompt, retry_after))

    def reset_peak(self, prefix: str = "") -> None:
        """Count ``in_flight`` and ``peak_in_flight`` again, from now, over the prompts starting with ``prefix``."""
        with self._lock:
            self._watched = prefix
            self.in_flight = self.peak_in_flight = 0

    def request_count(self, prompt: str | None = None) -> int:
        """How many requests arrived (for one prompt, when given), faults included."""
        with self._lock:
            return sum(1 for body in self.requests if prompt is None or _prompt_of(body) == prompt)

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> OpenAIServer:
        """Start serving on a free loopback port; returns when the port is bound."""
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=serve, name="openai-test-server", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the test server did not start within 10 s")
        return self

    async def _shutdown(self) -> None:
        """Close the listener and every open connection, so nothing outlives the loop."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        """Stop serving (open connections are dropped) and join the thread; stopping again does nothing."""
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(10)

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP ------------------------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        with self._lock:
            self.connections += 1
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, headers_in, body = request
                with self._lock:
                    self.headers.append(headers_in)
                status, payload, headers = await self._respond(method, path, body)
                if isinstance(payload, _Stream):
                    _write_stream(writer, payload)
                else:
                    _write_response(writer, status, payload, headers)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _respond(self, method: str, path: str, raw: bytes) -> tuple[int, Any, dict[str, str]]:
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return 200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]}, {}
        kind = "chat" if path.endswith("/chat/completions") else "completions" if path.endswith("/completions") else ""
        if method != "POST" or not kind:
            return 404, {"error": {"message": f"no route {method} {path}"}}, {}
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {"error": {"message": "body is not JSON"}}, {}
        prompt = _prompt_of(body)
        fault = self._take_fault(body, prompt)
        wait = self.delay + (fault.delay if fault else 0.0)
        with self._lock:
            watched = self._watched
            counted = prompt.startswith(watched)
            if counted:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if wait:
                await asyncio.sleep(wait)
        finally:
            with self._lock:
                if counted and self._watched == watched:
                    self.in_flight -= 1
        if fault is not None and fault.status is not None:
            headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            with self._lock:
                self.statuses.append(fault.status)
            return fault.status, {"error": {"message": f"injected {fault.status}"}}, headers
        n = int(body.get("n") or 1)
        texts = [self._answer(prompt, body) for _ in range(n)]
        with self._lock:
            self.statuses.append(200)
        if body.get("stream") is True:
            return (
                200,
                _Stream(kind, body, [t if isinstance(t, str) else str(t.get("content") or "") for t in texts]),
                {},
            )
        return 200, _completion_payload(kind, body, texts), {}

    def _take_fault(self, body: dict[str, Any], prompt: str) -> Fault | None:
        with self._lock:
            self.requests.append(body)
            for fault in self._faults:
                if fault.times > 0 and (fault.prompt is None or fault.prompt == prompt):
                    fault.times -= 1
                    return fault
        return None

    def _answer(self, prompt: str, body: dict[str, Any]) -> str | dict[str, Any]:
        answer = self.answers.get(prompt, self.default)
        if callable(answer):
            return answer(prompt, body)
        if isinstance(answer, list):
            with self._lock:
                position = next(self._cursor.setdefault(prompt, itertools.count()))
            return answer[position % len(answer)]
        return answer


def _prompt_of(body: Mapping[str, Any]) -> str:
    if "messages" in body:
        users = [m for m in body["messages"] if m.get("role") == "user"]
        content = users[-1].get("content", "") if users else ""
        return content if isinstance(content, str) else json.dumps(content)
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def _completion_payload(kind: str, body: Mapping[str, Any], answers: list[str | dict[str, Any]]) -> dict[str, Any]:
    if kind == "chat":
        choices: list[dict[str, Any]] = [
            {"index": i, "message": {"role": "assistant", **a} if isinstance(a, dict) else
             {"role": "assistant", "content": a}, "finish_reason": "tool_calls" if isinstance(a, dict) else "stop"}
            for i, a in enumerate(answers)
        ]  # fmt: skip
    else:
        choices = [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(answers)]
    texts = [a if isinstance(a, str) else str(a.get("content") or "") for a in answers]
    tokens = sum(len(t.split()) for t in texts)
    return {
        "id": f"cmpl-{time.monotonic_ns()}",
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": choices,
        "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
    }


@dataclass
class _Stream:
    """A streamed answer: each text sent as one event per word (its spaces kept), then the finish."""

    kind: str
    body: Mapping[str, Any]
    texts: list[str]


def _stream_events(stream: _Stream) -> list[bytes]:
    events: list[bytes] = []
    obj = "chat.completion.chunk" if stream.kind == "chat" else "text_completion"
    model = stream.body.get("model", "test-model")
    for index, text in enumerate(stream.texts):
        words = text.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        for piece in pieces:
            choice: dict[str, Any] = (
                {"index": index, "delta": {"content": piece}, "finish_reason": None}
                if stream.kind == "chat"
                else {"index": index, "text": piece, "finish_reason": None}
            )
            events.append(json.dumps({"id": "s", "object": obj, "model": model, "choices": [choice]}).encode())
        end: dict[str, Any] = {"index": index, "finish_reason": "stop"}
        if stream.kind == "chat":
            end["delta"] = {}
        else:
            end["text"] = ""
        events.append(json.dumps({"id": "s", "object": obj, "model": model, "choices": [end]}).encode())
    tokens = sum(len(t.split()) for t in stream.texts)
    usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
    events.append(json.dumps({"id": "s", "object": obj, "model": model, "choices": [], "usage": usage}).encode())
    return [b"data: " + e + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _write_stream(writer: asyncio.StreamWriter, stream: _Stream) -> None:
    """Server-sent events in chunked transfer encoding, one chunk per event."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    for event in _stream_events(stream):
        writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
    writer.write(b"0\r\n\r\n")


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return method, path, headers, body


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def _write_response(writer: asyncio.StreamWriter, status: int, payload: Any, headers: dict[str, str]) -> None:
    data = json.dumps(payload).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{extra}\r\n"
    )
    writer.write(head.encode() + data)


def main() -> None:
    """Serve until killed; print the base URL first (for benchmarks that run the server as a process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--default", default="", help="The answer to every prompt.")
    parser.add_argument("--delay", type=float, default=0.0, help="Seconds every request takes.")
    args = parser.parse_args()
    server = OpenAIServer(default=args.default, delay=args.delay).start()
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
