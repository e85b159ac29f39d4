"""Streamed completions (``stream: true``): read as server-sent events, in work linear in the stream's length."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from evalsi.runs import GenerationError, OpenAITarget
from evalsi.runs._streaming import StreamedCompletion, StreamError
from evalsi.specs import SamplingSpec, TargetSpec
from tests.helpers.openai_server import OpenAIServer


def streaming_target(server: OpenAIServer, api: str = "chat") -> OpenAITarget:
    spec = TargetSpec.model_validate(
        {"base_url": server.base_url, "model": "m", "api": api, "retry_backoff": 0.01, "timeout": 10}
    )
    return OpenAITarget(spec, SamplingSpec(max_tokens=64, extra={"stream": True}))


async def generate(target: OpenAITarget, prompt: Any, n: int) -> list[Any]:
    try:
        return list(await target.generate(prompt, n))
    finally:
        await target.aclose()


def test_a_streamed_chat_completion_is_read_whole() -> None:
    answer = "The answer is 42, as computed step by step."
    with OpenAIServer(default=answer) as server:
        out = asyncio.run(generate(streaming_target(server), "6*7?", 1))
        assert server.requests[-1]["stream"] is True
    assert [(g.text, g.finish_reason, g.tokens) for g in out] == [(answer, "stop", len(answer.split()))]


def test_streamed_samples_and_completions_api() -> None:
    with OpenAIServer(answers={"q": ["first answer", "second answer here"]}) as server:
        chat = asyncio.run(generate(streaming_target(server), "q", 2))
        text = asyncio.run(generate(streaming_target(server, "completions"), "q", 1))
    assert [g.text for g in chat] == ["first answer", "second answer here"]
    assert [g.finish_reason for g in chat] == ["stop", "stop"] and chat[0].tokens is None  # n > 1: no per-sample usage
    assert text[0].text == "first answer"


def test_a_stream_that_is_not_events_fails_the_record_without_its_text() -> None:
    completion = StreamedCompletion("chat")
    with pytest.raises(StreamError, match="not JSON") as caught:
        completion.feed(b"data: secret upstream text\n\n")
    assert "secret" not in str(caught.value)
    with pytest.raises(StreamError, match="reported an error"):
        StreamedCompletion("chat").feed(b'data: {"error": {"message": "secret"}}\n\n')


def test_a_generation_error_names_a_broken_stream() -> None:
    with OpenAIServer(default="x") as server:
        target = streaming_target(server)
        target._read = broken_reader  # type: ignore[method-assign]
        with pytest.raises(GenerationError, match="not JSON"):
            asyncio.run(generate(target, "q", 1))


async def broken_reader(body: Any) -> Any:
    completion = StreamedCompletion("chat")
    completion.feed(b"data: {nope\n\n")
    return completion


def sse(tokens: int) -> bytes:
    events = [
        b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": None}]})
        for i in range(tokens)
    ]
    return b"\n\n".join(events) + b'\n\ndata: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}\n\n'


def parse(data: bytes, piece: int) -> StreamedCompletion:
    completion = StreamedCompletion("chat")
    for start in range(0, len(data), piece):
        completion.feed(data[start : start + piece])
    completion.close()
    return completion


@pytest.mark.parametrize("piece", [7, 1500])
def test_parsing_a_long_stream_copies_and_joins_in_proportion_to_its_length(piece: int) -> None:
    short, long = sse(8192), sse(32768)
    a, b = parse(short, piece), parse(long, piece)
    text_a, finish = a.texts()[0]
    text_b, _ = b.texts()[0]
    assert text_a.count(" t") == 8192 and text_b.count(" t") == 32768 and finish == "length"
    # Each byte is copied into a complete line once; a line split across reads is joined once; each choice's text
    # is joined once at the end. A reader that grew a buffer or a string by concatenation would copy O(n^2).
    for completion, data in ((a, short), (b, long)):
        assert completion.copied <= len(data)
        assert completion.joins <= data.count(b"\n") + 1
    assert 3.8 <= b.copied / a.copied <= 4.2
    if piece == 7:  # nearly every line spans reads
        assert 3.8 <= b.joins / a.joins <= 4.2
    else:
        assert b.joins <= 4.2 * a.joins + 2
