"""Targets: what generates completions. An OpenAI-compatible endpoint over HTTP, or an in-process callable.

Both are async and bounded: at most ``max_concurrency`` requests are in flight. The endpoint target retries
through the shared transport of :mod:`evalsi._util.retry` (its status set, timeouts and dropped connections,
``maxRetries`` further attempts, ``retryBackoff`` doubling, a ``Retry-After`` header wins; an answer saying
``x-should-retry: false`` is final), tells ``on_retry``
before each wait, and asks for a record's ``n`` samples in as few requests as the server allows.
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
from typing import Any, Protocol

import httpx

from evalsi._util.http import status_text, transport_failure
from evalsi._util.modules import import_file
from evalsi._util.retry import AsyncRetryTransport, RetryNotice, RetryPolicy, attempts_phrase, retryable
from evalsi.errors import EvalsiError
from evalsi.records import Content
from evalsi.specs import SamplingSpec, TargetSpec

RetryListener = Callable[[RetryNotice], None]


class GenerationError(EvalsiError, RuntimeError):
    """A target could not produce completions for a record (after retries); the record stays unfinished.

    ``public`` says what failed without the endpoint's address or anything it answered (its status and standard
    phrase, a timeout, a failed connection): what a server may tell a tenant. It defaults to the message, for
    errors holding nothing the upstream sent.
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
        """``n`` completions of ``prompt``; raises :class:`GenerationError` when it cannot."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class OpenAITarget:
    """An OpenAI-compatible endpoint (vLLM, SGLang, OpenAI...) through ``/chat/completions`` or ``/completions``."""

    def __init__(
        self,
        spec: TargetSpec,
        sampling: SamplingSpec,
        system_prompt: str | None = None,
        on_retry: RetryListener | None = None,
    ) -> None:
        if spec.base_url is None or spec.model is None:
            raise ValueError("an endpoint target needs baseUrl and model")
        self.spec = spec
        self.system_prompt = system_prompt
        self._fields = sampling.request_fields()
        headers = dict(spec.headers)
        if spec.api_key_env is not None:
            key = os.environ.get(spec.api_key_env)
            if not key:
                raise GenerationError(f"target.apiKeyEnv names {spec.api_key_env!r}, which is not set")
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(max_connections=spec.max_concurrency, max_keepalive_connections=spec.max_concurrency)
        policy = RetryPolicy(spec.max_retries, spec.retry_backoff, on_retry)
        self._client = httpx.AsyncClient(
            base_url=spec.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=spec.timeout,
            transport=AsyncRetryTransport(policy, httpx.AsyncHTTPTransport(limits=limits)),
        )
        self._path = "chat/completions" if spec.api == "chat" else "completions"
        self.url = spec.base_url.rstrip("/") + "/" + self._path
        """Where requests go (named in every generation error)."""
        self._slots = asyncio.Semaphore(spec.max_concurrency)

    def describe(self) -> dict[str, Any]:
        """Kind, base URL, model and API (the key's variable name, never the key)."""
        return {
            "kind": "openai",
            "baseUrl": self.spec.base_url,
            "model": self.spec.model,
            "api": self.spec.api,
            "apiKeyEnv": self.spec.api_key_env,
        }

    async def generate(self, prompt: Content, n: int) -> list[Generation]:
        """``n`` completions, in requests of at most ``samplesPerRequest`` each."""
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
        body = self._body(prompt, n)
        gave_up = f"gave up after {attempts_phrase(self.spec.max_retries + 1)}; last: "
        async with self._slots:
            started = time.perf_counter()
            try:
                response = await self._client.post(self._path, json=body)
            except httpx.TransportError as exc:
                public = f"{gave_up}{transport_failure(exc, self.spec.timeout)}"
                raise GenerationError(f"{self.url}: {gave_up}{type(exc).__name__}: {exc}", public) from None
        if response.status_code == 200:
            return _parse(response, self.spec.api, time.perf_counter() - started, n)
        failure = f"HTTP {response.status_code}: {response.text[:200]}"
        retried = gave_up if retryable(response) else ""  # a server that says not to retry was asked once
        raise GenerationError(f"{self.url}: {retried}{failure}", f"{retried}{status_text(response.status_code)}")

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
        """Close the HTTP connection pool."""
        await self._client.aclose()


def chat_messages(prompt: Content, system_prompt: str | None) -> list[dict[str, Any]]:
    """A prompt as chat messages: text becomes a user message, after the system prompt when there is one."""
    if isinstance(prompt, str):
        head = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return [*head, {"role": "user", "content": prompt}]
    return list(prompt)


def _parse(response: httpx.Response, api: str, latency: float, n: int) -> list[Generation]:
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
        """``n`` completions: one call with ``n`` when the callable takes it, else ``n`` calls."""
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
