"""Targets over real loopback HTTP: chat and completions, n samples, retries, timeouts, keys; callables."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsi.runs import CallableTarget, Generation, GenerationError, OpenAITarget
from evalsi.specs import SamplingSpec, TargetSpec
from tests.helpers.openai_server import OpenAIServer


def target(server: OpenAIServer, **fields: Any) -> OpenAITarget:
    spec = TargetSpec(**{"base_url": server.base_url, "model": "m", "retry_backoff": 0.01, "timeout": 5, **fields})
    return OpenAITarget(spec, SamplingSpec(temperature=0.5, max_tokens=16, extra={"top_k": 5}), "be brief")


async def generate(t: Any, prompt: Any, n: int) -> list[Generation]:
    try:
        return list(await t.generate(prompt, n))
    finally:
        await t.aclose()


def test_chat_request_carries_messages_sampling_and_n(server: OpenAIServer) -> None:
    out = asyncio.run(generate(target(server), "3+3?", 2))
    assert [g.text for g in out] == ["6", "7"]
    body = server.requests[-1]
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "3+3?"}]
    assert (body["model"], body["n"], body["temperature"], body["max_tokens"], body["top_k"]) == ("m", 2, 0.5, 16, 5)
    assert "top_p" not in body  # unset sampling params are left to the server


def test_completions_api_sends_the_raw_prompt(server: OpenAIServer) -> None:
    out = asyncio.run(generate(target(server, api="completions"), "2+2?", 1))
    assert out[0].text == "4" and out[0].finish_reason == "stop" and out[0].tokens == 1
    assert server.requests[-1]["prompt"] == "2+2?" and "messages" not in server.requests[-1]


def test_samples_per_request_splits_n(server: OpenAIServer) -> None:
    out = asyncio.run(generate(target(server, samples_per_request=2), "capital of France?", 5))
    assert len(out) == 5
    assert [r.get("n", 1) for r in server.requests] == [2, 2, 1]


def test_retries_429_and_5xx_then_succeeds(server: OpenAIServer) -> None:
    server.inject(status=429, times=2)
    server.inject(status=503, times=1, retry_after=None)
    out = asyncio.run(generate(target(server), "2+2?", 1))
    assert out[0].text == "4"
    assert server.statuses == [429, 429, 503, 200]


def test_gives_up_after_max_retries(server: OpenAIServer) -> None:
    server.inject(status=500, times=10)
    with pytest.raises(GenerationError, match="gave up after 3 attempts; last: HTTP 500"):
        asyncio.run(generate(target(server, max_retries=2), "2+2?", 1))
    assert server.request_count() == 3


def test_a_timeout_is_retried(server: OpenAIServer) -> None:
    server.inject(delay=3.0)
    out = asyncio.run(generate(target(server, timeout=0.3), "2+2?", 1))
    assert out[0].text == "4"
    assert server.request_count() == 2


def test_a_client_error_is_not_retried(server: OpenAIServer) -> None:
    server.inject(status=400)
    with pytest.raises(GenerationError, match="HTTP 400"):
        asyncio.run(generate(target(server), "2+2?", 1))
    assert server.request_count() == 1


def test_api_key_comes_from_the_named_variable(server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEY", "sk-secret")
    t = target(server, api_key_env="TEST_KEY", headers={"X-Team": "evals"})
    assert "sk-secret" not in str(t.describe())
    asyncio.run(generate(t, "2+2?", 1))
    assert server.headers[-1]["authorization"] == "Bearer sk-secret"
    assert server.headers[-1]["x-team"] == "evals"
    monkeypatch.delenv("TEST_KEY")
    with pytest.raises(GenerationError, match="TEST_KEY"):
        target(server, api_key_env="TEST_KEY")


def test_concurrency_is_bounded(server: OpenAIServer) -> None:
    server.delay = 0.05
    active = 0
    peak = 0
    original = server._respond

    async def counting(method: str, path: str, raw: bytes) -> Any:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return await original(method, path, raw)
        finally:
            active -= 1

    server._respond = counting  # type: ignore[method-assign]

    async def main() -> None:
        t = target(server, max_concurrency=3)
        try:
            await asyncio.gather(*(t.generate("2+2?", 1) for _ in range(12)))
        finally:
            await t.aclose()

    asyncio.run(main())
    assert peak == 3


def test_callable_targets_sync_async_and_with_n() -> None:
    def echo(prompt: str) -> str:
        return prompt.upper()

    async def many(prompt: str, n: int, sampling: dict[str, Any]) -> list[str]:
        return [f"{prompt}-{i}-{sampling['temperature']}" for i in range(n)]

    assert [g.text for g in asyncio.run(generate(CallableTarget(echo), "hi", 2))] == ["HI", "HI"]
    out = asyncio.run(generate(CallableTarget(many, SamplingSpec(temperature=0.7)), "q", 3))
    assert [g.text for g in out] == ["q-0-0.7", "q-1-0.7", "q-2-0.7"]


def test_callable_failures_are_generation_errors() -> None:
    def broken(prompt: str) -> str:
        raise RuntimeError("model crashed")

    def wrong(prompt: str) -> int:
        return 3

    with pytest.raises(GenerationError, match="model crashed"):
        asyncio.run(generate(CallableTarget(broken), "q", 1))
    with pytest.raises(GenerationError, match="return a string"):
        asyncio.run(generate(CallableTarget(wrong), "q", 1))
