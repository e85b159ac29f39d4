"""The loopback OpenAI-compatible server of in-process serving, with plain generate functions (no torch): what
cannot change on retry is said once, a client that hangs up stops its generation, and stopping waits for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsi.runs import Runner, run_from_mapping
from evalsi.training._transformers import Cancelled, GenerationCancelled, OpenAICompatibleServer, RequestError
from tests.runs.conftest import write_jsonl


class Model:
    """A generate function: answers ``ok``, fails, refuses, or runs until cancelled, as told."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.calls = 0
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, prompt: Any, n: int, sampling: dict[str, Any], cancelled: Cancelled) -> list[str]:
        self.calls += 1
        if self.mode == "fail":
            raise RuntimeError("cannot reshape tensor of 0 elements")
        if self.mode == "refuse":
            raise RequestError("the prompt is 70 tokens; the model's context is 64 tokens")
        if self.mode == "endless":
            self.thread = threading.current_thread()
            self.started.set()
            deadline = time.monotonic() + 120
            while not cancelled():
                assert time.monotonic() < deadline, "never cancelled"
                time.sleep(0.01)
            self.cancelled.set()
            raise GenerationCancelled
        return ["ok"] * n


@pytest.fixture
def served() -> Iterator[tuple[OpenAICompatibleServer, Model]]:
    model = Model()
    server = OpenAICompatibleServer(model, "m")
    server.start()
    try:
        yield server, model
    finally:
        server.stop()


def run_against(server: OpenAICompatibleServer, tmp_path: Path) -> Any:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": f"r{i}", "prompt": f"q{i}", "answer": "ok"} for i in range(3)])
    spec = {
        "target": {"baseUrl": server.base_url, "model": "m", "maxRetries": 5, "retryBackoff": 0.01},
        "dataset": {"path": str(data)},
        "evaluators": [{"ref": "exact-match"}],
        "output": str(tmp_path / "r.json"),
    }
    return Runner(run_from_mapping(spec)).run()


def test_a_model_failure_is_asked_once_per_record_and_says_why(
    served: tuple[OpenAICompatibleServer, Model], tmp_path: Path
) -> None:
    server, model = served
    model.mode = "fail"
    reply = httpx.post(f"{server.base_url}/completions", json={"prompt": "q", "max_tokens": 2}, timeout=30)
    assert reply.status_code == 500 and reply.headers["x-should-retry"] == "false"
    model.calls = 0
    outcome = run_against(server, tmp_path)
    assert outcome.verdict == "failed" and len(outcome.failed) == 3
    assert model.calls == 3  # once per record: asking the same model the same thing again fails the same way
    reason = outcome.failed["r0"]
    assert "HTTP 500" in reason and "cannot reshape tensor" in reason and "gave up" not in reason


def test_a_request_the_model_cannot_take_is_a_client_error(
    served: tuple[OpenAICompatibleServer, Model], tmp_path: Path
) -> None:
    server, model = served
    model.mode = "refuse"
    reply = httpx.post(f"{server.base_url}/chat/completions", json={"messages": [{"role": "user", "content": "q"}]})
    assert reply.status_code == 400 and "context is 64 tokens" in reply.json()["error"]["message"]
    for body in ({"prompt": "q", "n": 0}, {"prompt": "q", "n": "two"}, {"max_tokens": 2}, [1, 2]):
        bad = httpx.post(f"{server.base_url}/completions", json=body)
        assert bad.status_code == 400, body
    model.calls = 0
    assert run_against(server, tmp_path).verdict == "failed" and model.calls == 3


def test_a_client_that_hangs_up_stops_its_generation_without_a_traceback(
    served: tuple[OpenAICompatibleServer, Model], capfd: pytest.CaptureFixture[str]
) -> None:
    server, model = served
    model.mode = "endless"
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{server.base_url}/completions", json={"prompt": "q"}, timeout=0.5)
    assert model.cancelled.wait(60)  # the generation noticed its client had gone
    model.mode = "ok"
    assert httpx.post(f"{server.base_url}/completions", json={"prompt": "q"}, timeout=30).status_code == 200
    _, err = capfd.readouterr()
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err


def test_stopping_cancels_generations_and_waits_for_their_threads(capfd: pytest.CaptureFixture[str]) -> None:
    model = Model()
    model.mode = "endless"
    existing = set(threading.enumerate())
    server = OpenAICompatibleServer(model, "m")
    server.start()
    replies: list[Any] = []

    def ask() -> None:
        try:
            replies.append(httpx.post(f"{server.base_url}/completions", json={"prompt": "q"}, timeout=120))
        except httpx.TransportError as exc:
            replies.append(exc)

    client = threading.Thread(target=ask)
    client.start()
    assert model.started.wait(60)
    # An idle keep-alive connection too: stopping must not wait for its client to close it.
    idle = httpx.Client()
    assert idle.get(server.base_url.removesuffix("/v1") + "/health").status_code == 200
    handlers = [t for t in set(threading.enumerate()) - existing if "process_request_thread" in t.name]
    assert model.thread in handlers and len(handlers) >= 2
    server.stop()
    assert model.cancelled.is_set()  # stopped inside the generation, not after it
    assert not [t for t in handlers if t.is_alive()]  # every request thread is gone once stop() returns
    client.join(60)
    idle.close()
    assert replies and (isinstance(replies[0], httpx.TransportError) or replies[0].status_code == 503)
    _, err = capfd.readouterr()
    assert "Traceback" not in err
