"""Loopback servers that speak served-model protocols for real (HTTP/1.1 on 127.0.0.1), for tests and benchmarks.

- :class:`OpenRLHFRewardServer`: OpenRLHF's remote reward model, ``POST <any path>``
  ``{"query","prompts","labels"}`` → ``{"rewards","scores","extra_logs"}`` (as ``openrlhf/cli/serve_rm.py``).
- :class:`PoolingServer`: vLLM's ``POST /pooling``, ``{"model","input"}`` or ``{"model","messages"}`` →
  ``{"id","object":"list","created","model","data":[{"index","object":"pooling","data":[float]}],"usage"}``.
- :class:`ChatJudgeServer`: an OpenAI-compatible ``POST /v1/chat/completions`` with scripted verdicts.
- :class:`LoopbackServer`: the base, answering with any ``handler(path, body) -> (status, payload)``.

Every server records each request body (``requests``) and headers, the most calls it handled at once
(``max_in_flight``), can take a fixed per-call latency (``delay``), can serve
one call at a time like a single GPU (``serial=True``), and takes injected faults::

    server.inject(status=429, times=2)      # next two calls: 429 with Retry-After: 0
    server.inject(delay=5.0)                # next call stalls 5 s (client timeouts)
    server.inject(raw=b"not json")          # next call: 200 with this body
    server.inject(payload={"rewards": []})  # next call: 200 with this JSON
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Handler = Callable[[str, dict[str, Any]], tuple[int, Any]]


@dataclass
class Fault:
    """One injected fault for the next ``times`` calls: a status, a stall, or a replacement body."""

    status: int | None = None
    delay: float = 0.0
    times: int = 1
    raw: bytes | None = None
    payload: Any = None
    retry_after: float | None = 0.0
    headers: dict[str, str] | None = None


class LoopbackServer:
    """An HTTP server on its own thread and loop; subclasses (or ``handler``) decide the replies."""

    def __init__(self, handler: Handler | None = None, *, delay: float = 0.0, serial: bool = False) -> None:
        self.handler = handler
        self.delay = delay
        self.serial = serial
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        """Each request's headers, lower-cased names."""
        self.statuses: list[int] = []
        self._faults: list[Fault] = []
        self._in_flight = 0
        self.max_in_flight = 0
        """The most calls this server was handling at once."""
        self._lock = threading.Lock()
        self._serial_lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def calls(self) -> int:
        """Requests received so far, faults included."""
        with self._lock:
            return len(self.requests)

    def inject(
        self,
        *,
        status: int | None = None,
        delay: float = 0.0,
        times: int = 1,
        raw: bytes | None = None,
        payload: Any = None,
        retry_after: float | None = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Make the next ``times`` calls fail with ``status`` (and ``headers``), stall ``delay`` s, or answer
        ``raw``/``payload``."""
        with self._lock:
            self._faults.append(Fault(status, delay, times, raw, payload, retry_after, headers))

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """The normal reply to a call; the base delegates to ``handler``."""
        if self.handler is None:
            return 404, {"error": {"message": f"no handler for {path}"}}
        return self.handler(path, body)

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> LoopbackServer:
        """Bind a free loopback port and serve on a daemon thread."""
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            self._serial_lock = asyncio.Lock()
            server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            server.close()
            # Open keep-alive connections still have handler tasks: end them before the loop closes.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"{type(self).__name__}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the loopback server did not start within 10 s")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP --------------------------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                path, request_headers, raw = request
                with self._lock:
                    self.headers.append(request_headers)
                status, data, headers = await self._respond(path, raw)
                _write_response(writer, status, data, headers)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _respond(self, path: str, raw: bytes) -> tuple[int, bytes, dict[str, str]]:
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, b'{"error": {"message": "body is not JSON"}}', {}
        fault = self._take_fault(path, body)
        assert self._serial_lock is not None
        if self.serial:
            async with self._serial_lock:
                return await self._answer(path, body, fault)
        return await self._answer(path, body, fault)

    async def _answer(self, path: str, body: dict[str, Any], fault: Fault | None) -> tuple[int, bytes, dict[str, str]]:
        wait = self.delay + (fault.delay if fault else 0.0)
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if wait:
                await asyncio.sleep(wait)
        finally:
            with self._lock:
                self._in_flight -= 1
        headers: dict[str, str] = {}
        if fault is not None and fault.status is not None:
            status, data = fault.status, json.dumps({"error": {"message": f"injected {fault.status}"}}).encode()
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            headers.update(fault.headers or {})
        elif fault is not None and fault.raw is not None:
            status, data = 200, fault.raw
        elif fault is not None and fault.payload is not None:
            status, data = 200, json.dumps(fault.payload).encode()
        else:
            status, payload = self.reply(path, body)
            data = json.dumps(payload).encode()
        with self._lock:
            self.statuses.append(status)
        return status, data, headers

    def _take_fault(self, path: str, body: dict[str, Any]) -> Fault | None:
        with self._lock:
            self.requests.append(body)
            self.paths.append(path)
            for fault in self._faults:
                if fault.times > 0:
                    fault.times -= 1
                    return fault
        return None


ScoreFn = Callable[[str, str, str], float]


def default_rm_score(query: str, prompt: str, label: str) -> float:
    """A deterministic stand-in reward: the completion's length / 10, plus 1 when it contains the label."""
    completion = query[len(prompt) :] if query.startswith(prompt) else query
    return len(completion) / 10 + (1.0 if label and label in completion else 0.0)


class OpenRLHFRewardServer(LoopbackServer):
    """OpenRLHF's remote reward-model protocol; ``score(query, prompt, label)`` gives each reward."""

    def __init__(self, score: ScoreFn = default_rm_score, *, delay: float = 0.0, serial: bool = False) -> None:
        super().__init__(delay=delay, serial=serial)
        self.score = score

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """``{"rewards","scores","extra_logs"}`` for ``{"query","prompts","labels"}`` (empty lists allowed)."""
        queries, prompts, labels = body.get("query"), body.get("prompts"), body.get("labels")
        if not (isinstance(queries, list) and isinstance(prompts, list) and isinstance(labels, list)):
            return 400, {"error": "expected query, prompts and labels lists"}
        if not len(queries) == len(prompts) == len(labels):
            return 400, {"error": "query, prompts and labels differ in length"}
        rewards = [self.score(q, p, lb) for q, p, lb in zip(queries, prompts, labels, strict=True)]
        return 200, {"rewards": rewards, "scores": rewards, "extra_logs": {"dummy_scores": rewards}}

    @property
    def batch_sizes(self) -> list[int]:
        """The number of queries each call carried."""
        with self._lock:
            return [len(b.get("query", [])) for b in self.requests]


PoolFn = Callable[[str | list[dict[str, Any]]], Any]


def default_pool(item: str | list[dict[str, Any]]) -> list[float]:
    """A sequence-classification output (one value): the text length / 10 (messages: joined contents)."""
    text = item if isinstance(item, str) else "".join(str(m.get("content", "")) for m in item)
    return [len(text) / 10]


class PoolingServer(LoopbackServer):
    """vLLM's ``/pooling`` endpoint; ``pool(input_text_or_messages)`` gives each item's ``data``."""

    def __init__(
        self, pool: PoolFn = default_pool, *, model: str = "rm", delay: float = 0.0, serial: bool = False
    ) -> None:
        super().__init__(delay=delay, serial=serial)
        self.pool = pool
        self.model = model

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """The pooling response for ``input`` (a string or a list of strings) or ``messages``."""
        if path != "/pooling":
            return 404, {"error": {"message": f"no route {path}"}}
        if body.get("model", self.model) != self.model:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
        if "messages" in body:
            items: list[Any] = [body["messages"]]
        elif isinstance(body.get("input"), str):
            items = [body["input"]]
        elif isinstance(body.get("input"), list):
            items = list(body["input"])
        else:
            return 400, {"error": {"message": "expected input or messages"}}
        data = [{"index": i, "object": "pooling", "data": self.pool(x)} for i, x in enumerate(items)]
        return 200, {
            "id": f"pool-{time.monotonic_ns()}",
            "object": "list",
            "created": int(time.time()),
            "model": self.model,
            "data": data,
            "usage": {"prompt_tokens": len(items), "total_tokens": len(items)},
        }

    @property
    def batch_sizes(self) -> list[int]:
        """The number of inputs each call carried (a ``messages`` call counts 1)."""
        with self._lock:
            return [len(b["input"]) if isinstance(b.get("input"), list) else 1 for b in self.requests]


VerdictFn = Callable[[str, dict[str, Any]], str]


class ChatJudgeServer(LoopbackServer):
    """An OpenAI-compatible ``POST /v1/chat/completions``; ``verdict(user_text, body)`` scripts each reply."""

    def __init__(self, verdict: VerdictFn | str = "Score: 5", *, delay: float = 0.0) -> None:
        super().__init__(delay=delay)
        self.verdict = verdict

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return self.url + "/v1"

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """A chat completion whose message is the scripted verdict for the last user message."""
        if path != "/v1/chat/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if not users or not body.get("model"):
            return 400, {"error": {"message": "model and a user message are required"}}
        text = self.verdict if isinstance(self.verdict, str) else self.verdict(users[-1]["content"], body)
        return 200, chat_reply(text, body["model"])

    def user_messages(self) -> list[str]:
        """The last user message of every request, in order."""
        with self._lock:
            return [[m for m in b["messages"] if m["role"] == "user"][-1]["content"] for b in self.requests]


def chat_reply(text: str, model: str = "judge") -> dict[str, Any]:
    """An OpenAI chat-completion body whose one choice says ``text``."""
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes] | None:
    if reader.at_eof():
        return None
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    _method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip():
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    return path, headers, await reader.readexactly(length) if length else b""


_REASONS: Mapping[int, str] = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _write_response(writer: asyncio.StreamWriter, status: int, data: bytes, headers: Mapping[str, str]) -> None:
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{extra}\r\n"
    )
    writer.write(head.encode() + data)
