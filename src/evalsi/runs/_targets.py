"""Targets: what generates completions. An OpenAI-compatible endpoint over HTTP, or an in-process callable.

Both are async and bounded: at most ``max_concurrency`` requests are in flight. The endpoint target sends them
through the shared client of :mod:`evalsi._util.transport` (aiohttp, keep-alive, as many connections as requests
in flight), which retries as :mod:`evalsi._util.retry` says (its status set, timeouts and dropped connections,
``maxRetries`` further attempts, ``retryBackoff`` doubling, a ``Retry-After`` header wins; an answer saying
``x-should-retry: false`` is final), tells ``on_retry`` before each wait, and spreads requests over the replicas
of ``baseUrls``. It asks for a record's ``n`` samples in as few requests as the server allows, and reads a
streamed answer (``stream: true`` among the sampling fields) as its events arrive.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from evalsi._util.http import status_text, transport_failure
from evalsi._util.modules import import_file
from evalsi._util.retry import RetryNotice, RetryPolicy, attempts_phrase, retryable
from evalsi._util.transport import HttpClient, Reply, TransportFailure
from evalsi.errors import EvalsiError
from evalsi.records import Content
from evalsi.runs._streaming import StreamedCompletion, StreamError, read_stream
from evalsi.specs import SamplingSpec, TargetSpec

if TYPE_CHECKING:
    import aiohttp

RetryListener = Callable[[RetryNotice], None]


class GenerationError(EvalsiError, RuntimeError):
    """A target could not produce completions for a record (after retries); the record stays unfinished.

    ``public`` says what failed without the endpoint's address or anything it answered (its status and standard
    phrase, a timeout, a failed connection): what a server may tell a tenant. It defaults to the message, for
    errors holding nothing the upstream sent.

    Args:
        message: What failed, in full (logged and kept in the results file).
        public: What failed, safe to show a tenant; the message when empty.

    """

    def __init__(self, message: str, public: str = "") -> None:
        super().__init__(message)
        self.public = public or message


@dataclass(frozen=True, slots=True)
class Generation:
    """One completion: its text, why it stopped, its token count when known, and the request's latency."""

    text: str
    finish_reason: str | None = None
    tokens: int | None = None
    latency: float = 0.0


class Target(Protocol):
    """Anything that turns a prompt into ``n`` completions."""

    def describe(self) -> dict[str, Any]:
        """What the results file records about the target (never secrets)."""
        ...

    async def generate(self, prompt: Content, n: int) -> list[Generation]:
        """``n`` completions of ``prompt``; raises :class:`GenerationError` when it cannot.

        Args:
            prompt: The prompt: text, or chat messages.
            n: How many completions.

        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class OpenAITarget:
    """An OpenAI-compatible endpoint (vLLM, SGLang, OpenAI...) through ``/chat/completions`` or ``/completions``.

    ``baseUrls`` spreads requests over replicas (fewest in flight first); a failed replica's requests go to another.

    Args:
        spec: The run's ``target``: endpoints, model, API, timeouts, retries.
        sampling: The run's ``sampling`` parameters, sent with every request.
        system_prompt: A system message put before each chat prompt, if any.
        on_retry: Told of each retried request, if given.

    Raises:
        ValueError: ``spec`` has no endpoint or no model.

    """

    def __init__(
        self,
        spec: TargetSpec,
        sampling: SamplingSpec,
        system_prompt: str | None = None,
        on_retry: RetryListener | None = None,
    ) -> None:
        endpoints = spec.endpoints()
        if not endpoints or spec.model is None:
            raise ValueError("an endpoint target needs baseUrl (or baseUrls) and model")
        self.spec = spec
        self.system_prompt = system_prompt
        self._fields = sampling.request_fields()
        self._stream = self._fields.get("stream") is True
        headers = {"Content-Type": "application/json", **spec.headers}
        if spec.api_key_env is not None:
            key = os.environ.get(spec.api_key_env)
            if not key:
                raise GenerationError(f"target.apiKeyEnv names {spec.api_key_env!r}, which is not set")
            headers["Authorization"] = f"Bearer {key}"
        self._path = "chat/completions" if spec.api == "chat" else "completions"
        self._client = HttpClient(
            [url.rstrip("/") + "/" + self._path for url in endpoints],
            policy=RetryPolicy(spec.max_retries, spec.retry_backoff, on_retry),
            timeout=spec.timeout,
            max_connections=spec.max_concurrency,
            headers=headers,
        )
        self.url = endpoints[0].rstrip("/") + "/" + self._path
        """Where requests go (the first replica's, with several); errors name the replica that failed."""
        self._slots = asyncio.Semaphore(spec.max_concurrency)

    @property
    def client(self) -> HttpClient:
        """The HTTP client (its attempts, replicas, and requests in flight to each)."""
        return self._client

    def describe(self) -> dict[str, Any]:
        """Kind, base URL (or the replicas' URLs), model and API (the key's variable name, never the key)."""
        where: dict[str, Any] = (
            {"baseUrls": list(self.spec.base_urls)}
            if self.spec.base_urls is not None
            else {"baseUrl": self.spec.base_url}
        )
        return {
            "kind": "openai",
            **where,
            "model": self.spec.model,
            "api": self.spec.api,
            "apiKeyEnv": self.spec.api_key_env,
        }

    async def generate(self, prompt: Content, n: int) -> list[Generation]:
        """``n`` completions, in requests of at most ``samplesPerRequest`` each.

        Args:
            prompt: The prompt: text, or chat messages.
            n: How many completions.

        Raises:
            GenerationError: The endpoint failed after its retries.

        """
        out: list[Generation] = []
        per_request = self.spec.samples_per_request or n
        while len(out) < n:
            want = min(per_request, n - len(out))
            got = await self._request(prompt, want)
            if not got:
                raise GenerationError("the endpoint returned no choices")
            out.extend(got[:want])
        return out

    async def _request(self, prompt: Content, n: int) -> list[Generation]:
        body = orjson.dumps(self._body(prompt, n))
        async with self._slots:
            started = time.perf_counter()
            try:
                reply = await self._client.post("", body, read=self._read if self._stream else None)
            except TransportFailure as exc:
                gave_up = f"gave up after {attempts_phrase(exc.attempts)}; last: "
                public = f"{gave_up}{transport_failure(exc, self.spec.timeout)}"
                cause = exc.__cause__ or exc
                raise GenerationError(f"{exc.url}: {gave_up}{type(cause).__name__}: {cause}", public) from None
            except StreamError as exc:
                raise GenerationError(f"{self.url}: {exc}", str(exc)) from None
        latency = time.perf_counter() - started
        if reply.status_code == 200:
            if isinstance(reply.data, StreamedCompletion):
                return _streamed(reply.data, latency, n)
            return _parse(reply, self.spec.api, latency, n)
        failure = f"HTTP {reply.status_code}: {reply.text[:200]}"
        # A server that says not to retry (x-should-retry: false, or a final status) was not given up on.
        retried = f"gave up after {attempts_phrase(reply.attempts)}; last: " if retryable(reply) else ""
        raise GenerationError(f"{reply.url}: {retried}{failure}", f"{retried}{status_text(reply.status_code)}")

    async def _read(self, body: aiohttp.StreamReader) -> StreamedCompletion:
        return await read_stream(self.spec.api, body)

    def _body(self, prompt: Content, n: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.spec.model, **self._fields}
        if n != 1:
            body["n"] = n
        if self.spec.api == "chat":
            body["messages"] = chat_messages(prompt, self.system_prompt)
        else:
            if not isinstance(prompt, str):
                raise GenerationError("a completions target needs text prompts; use api: chat for chat messages")
            body["prompt"] = prompt
        return body

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.aclose()


def chat_messages(prompt: Content, system_prompt: str | None) -> list[dict[str, Any]]:
    """A prompt as chat messages: text becomes a user message, after the system prompt when there is one."""
    if isinstance(prompt, str):
        head = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return [*head, {"role": "user", "content": prompt}]
    return list(prompt)


def _streamed(stream: StreamedCompletion, latency: float, n: int) -> list[Generation]:
    tokens = stream.completion_tokens if n == 1 else None
    return [Generation(text, finish, tokens, latency) for text, finish in stream.texts()]


def _parse(response: Reply, api: str, latency: float, n: int) -> list[Generation]:
    try:
        payload = response.json()
        choices = sorted(payload["choices"], key=lambda c: c.get("index", 0))
    except (ValueError, KeyError, TypeError) as exc:
        public = "not an OpenAI completion response"
        raise GenerationError(f"{public}: {exc}", public) from None
    usage = payload.get("usage") or {}
    tokens = usage.get("completion_tokens") if n == 1 else None
    out: list[Generation] = []
    for choice in choices:
        source = (choice.get("message") or {}).get("content") if api == "chat" else choice.get("text")
        text = source or ""
        out.append(Generation(text, choice.get("finish_reason"), tokens, latency))
    return out


ModelFn = Callable[..., Any]


class CallableTarget:
    """An in-process model: ``fn(prompt)`` returns one completion, or ``fn(prompt, n=...)`` a list of ``n``.

    ``fn`` may be ``async``; a sync ``fn`` runs on a worker thread so the event loop keeps generating. When it
    accepts ``sampling``, it gets the sampling params as a dict.

    Args:
        fn: The model function.
        sampling: The run's ``sampling`` parameters, passed to ``fn`` when it takes ``sampling``.
        max_concurrency: The most calls of ``fn`` running at once.
        name: What the results file calls the target; ``fn``'s qualified name when None.

    """

    def __init__(
        self, fn: ModelFn, sampling: SamplingSpec | None = None, max_concurrency: int = 8, name: str | None = None
    ) -> None:
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__qualname__", type(fn).__name__))
        self._sampling = sampling.request_fields() if sampling is not None else {}
        parameters = inspect.signature(fn).parameters
        self._takes_n = "n" in parameters
        self._takes_sampling = "sampling" in parameters
        # A callable object's coroutine ``__call__`` counts as async too.
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
        self._slots = asyncio.Semaphore(max_concurrency)

    def describe(self) -> dict[str, Any]:
        """Kind and the callable's name."""
        return {"kind": "callable", "callable": self.name}

    async def generate(self, prompt: Content, n: int) -> list[Generation]:
        """``n`` completions: one call with ``n`` when the callable takes it, else ``n`` calls.

        Args:
            prompt: The prompt: text, or chat messages.
            n: How many completions.

        Raises:
            GenerationError: ``fn`` raised, or did not return ``n`` completions (texts, generations or mappings).

        """
        calls = 1 if self._takes_n else n
        out: list[Generation] = []
        for _ in range(calls):
            started = time.perf_counter()
            async with self._slots:
                try:
                    result = await self._call(prompt, n)
                except Exception as exc:  # the model failed: this record is unfinished, not the run
                    raise GenerationError(f"{self.name} raised {type(exc).__name__}: {exc}") from exc
            out.extend(_generations(result, time.perf_counter() - started, self.name))
        if len(out) != n:
            raise GenerationError(f"{self.name} returned {len(out)} completions, expected {n}")
        return out

    async def _call(self, prompt: Content, n: int) -> Any:
        kwargs: dict[str, Any] = {}
        if self._takes_n:
            kwargs["n"] = n
        if self._takes_sampling:
            kwargs["sampling"] = dict(self._sampling)
        if self._is_async:
            return await self.fn(prompt, **kwargs)
        result = await asyncio.to_thread(self.fn, prompt, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    async def aclose(self) -> None:
        """Nothing to release."""


def _generations(result: Any, latency: float, name: str) -> list[Generation]:
    items: Sequence[Any] = result if isinstance(result, list | tuple) else [result]
    out: list[Generation] = []
    for item in items:
        if isinstance(item, Generation):
            out.append(item)
        elif isinstance(item, str):
            out.append(Generation(item, "stop", None, latency))
        elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
            out.append(Generation(item["text"], item.get("finish_reason"), item.get("tokens"), latency))
        else:
            raise GenerationError(f"{name} returned {type(item).__name__}; return a string or a list of strings")
    return out


def load_callable(reference: str, base_dir: Path | None = None) -> ModelFn:
    """Import ``module:attribute`` or ``path/to/file.py:attribute`` and check it is callable.

    A file path is relative to ``base_dir`` (the spec file's folder) when given. Dots are allowed in the attribute.

    Raises:
        GenerationError: The module, file or attribute does not exist, or is not callable.

    """
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = (
            _import_file(module_name, base_dir)
            if module_name.endswith(".py")
            else (importlib.import_module(module_name))
        )
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise GenerationError(f"cannot load target.callable {reference!r}: {exc}") from None
    if not callable(target):
        raise GenerationError(f"target.callable {reference!r} is a {type(target).__name__}, not callable")
    fn: ModelFn = target
    return fn


def _import_file(path_text: str, base_dir: Path | None) -> Any:
    path = Path(path_text)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return import_file(path, "evalsi_target")


def make_target(
    spec: TargetSpec,
    sampling: SamplingSpec,
    system_prompt: str | None = None,
    fn: ModelFn | None = None,
    base_dir: Path | None = None,
    on_retry: RetryListener | None = None,
) -> Target:
    """The target a spec names (``fn`` overrides ``callable`` for models built in the same process).

    ``base_dir`` (the spec file's folder) resolves a ``callable`` given as a relative ``file.py:function``;
    ``on_retry`` hears about an endpoint's retries while they happen.
    """
    if fn is not None or spec.callable is not None:
        model = fn if fn is not None else load_callable(spec.callable or "", base_dir)
        return CallableTarget(model, sampling, spec.max_concurrency, None if fn is not None else spec.callable)
    return OpenAITarget(spec, sampling, system_prompt, on_retry)
