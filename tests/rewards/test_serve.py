"""``evalsi rewards serve`` over real HTTP on loopback, with the request shapes OpenRLHF sends.

OpenRLHF (v0.11 ``SingleTurnAgentExecutor._fetch_rewards_via_http``) posts ``{"query": [q], "prompts": [p],
"labels": [l]}`` with aiohttp, one sample per request (empty lists to extra servers in v0.11.0), and reads
``rewards``, ``scores`` and ``extra_logs`` from the JSON answer.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import yaml
from typer.testing import CliRunner

from evalsi.cli.rewards_serve import serve_command
from evalsi.rewards import from_mapping
from evalsi.rewards.serve import create_app
from tests.rewards._adapter_evaluators import Gate
from tests.rewards._keys import without_vector, without_vector_logs
from tests.rewards._servers import ServerThread

PROMPT = "<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n"
SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "serve-test"},
    "spec": {
        "components": [
            {"ref": "exact-match", "name": "exact", "weight": 0.75},
            {"ref": "contains", "name": "hi", "weight": 0.25, "params": {"text": "hi"}},
        ],
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(create_app(from_mapping(SPEC))) as running:
        yield running


def post(url: str, payload: Any) -> httpx.Response:
    return httpx.post(url, json=payload, timeout=30)


def test_batched_form(server: ServerThread) -> None:
    payload = {"query": [PROMPT + "hi<|im_end|>", PROMPT + "hello"], "prompts": [PROMPT, PROMPT], "labels": ["hi", "x"]}
    response = post(server.url + "/get_reward", payload)
    assert response.status_code == 200
    assert without_vector_logs(response.json()) == {
        "rewards": [1.0, 0.0],
        "scores": [1.0, 0.0],
        "extra_logs": {"exact": [1.0, 0.0], "hi": [1.0, 0.0], "exact_skipped": [0.0, 0.0], "hi_skipped": [0.0, 0.0]},
    }


def test_one_sample_form_as_openrlhf_sends_it(server: ServerThread) -> None:
    response = post(server.url + "/", {"query": [PROMPT + "oh hi"], "prompts": [PROMPT], "labels": ["nope"]})
    assert without_vector_logs(response.json()) == {
        "rewards": [0.25],
        "scores": [0.25],
        "extra_logs": {"exact": [0.0], "hi": [1.0], "exact_skipped": [0.0], "hi_skipped": [0.0]},
    }


def test_one_sample_form_with_bare_strings(server: ServerThread) -> None:
    response = post(server.url + "/get_reward", {"query": PROMPT + "hi", "prompts": PROMPT, "labels": "hi"})
    assert without_vector_logs(response.json()) == {
        "rewards": 1.0,
        "scores": 1.0,
        "extra_logs": {"exact": 1.0, "hi": 1.0, "exact_skipped": 0.0, "hi_skipped": 0.0},
    }


def test_empty_lists_answer_empty_lists(server: ServerThread) -> None:
    response = post(server.url + "/get_reward", {"query": [], "prompts": [], "labels": []})
    assert response.status_code == 200
    assert without_vector_logs(response.json()) == {
        "rewards": [],
        "scores": [],
        "extra_logs": {"exact": [], "hi": [], "exact_skipped": [], "hi_skipped": []},
    }


def test_labels_may_be_missing(server: ServerThread) -> None:
    response = post(server.url + "/get_reward", {"query": [PROMPT + "hi"], "prompts": [PROMPT]})
    logs = without_vector(response.json()["extra_logs"])
    assert logs == {"exact": [0.0], "hi": [1.0], "exact_skipped": [1.0], "hi_skipped": [0.0]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"query": 5}', '"query" must be a list'),
        (b'{"query": ["a", "b"], "prompts": ["a"]}', "prompts has 1 items for 2 queries"),
        (b'{"query": ["a", 7], "prompts": ["a", "b"]}', "rollout 1: query and prompt must be text"),
    ],
)
def test_bad_requests_are_400_with_a_reason(server: ServerThread, body: bytes, message: str) -> None:
    response = httpx.post(server.url + "/get_reward", content=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_rollout" and message in error["message"]


def test_health(server: ServerThread) -> None:
    response = httpx.get(server.url + "/health", timeout=30)
    assert response.json() == {"status": "ok", "spec": "serve-test", "components": ["exact", "hi"], "queued": 0}


def wait_for(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_scoring_is_off_the_event_loop_and_queued_requests_merge() -> None:
    Gate.reset()
    spec = {
        "cache": {"enabled": False},
        "components": [
            {"ref": "test-adapters-gate", "name": "gate"},
            {"ref": "test-adapters-flaky", "name": "flaky", "onError": "raise"},
        ],
    }
    with ServerThread(create_app(from_mapping(spec))) as running:
        url = running.url + "/get_reward"
        answers: dict[str, httpx.Response] = {}

        def send(text: str) -> None:
            answers[text] = post(url, {"query": [text], "prompts": [""], "labels": [None]})

        threads = [threading.Thread(target=send, args=("first",))]
        threads[0].start()
        assert Gate.entered.wait(timeout=20)
        # the first batch is blocked inside the evaluator, yet the server still answers
        assert httpx.get(running.url + "/health", timeout=10).json()["queued"] == 0
        for text in ("second", "boom", "third"):
            threads.append(threading.Thread(target=send, args=(text,)))
            threads[-1].start()
        wait_for(lambda: httpx.get(running.url + "/health", timeout=10).json()["queued"] == 3, "3 queued requests")
        Gate.release.set()
        for thread in threads:
            thread.join(timeout=30)
    assert Gate.batches == [1, 3]  # the three queued requests were scored in one engine call
    assert answers["second"].json()["rewards"] == [2.0]
    assert answers["third"].status_code == 200
    # onError: raise fails only the request that errored, though it was scored together with the others
    failed = answers["boom"]
    assert failed.status_code == 422
    assert failed.json()["error"]["code"] == "reward_batch_failed"
    assert failed.json()["error"]["component"] == "flaky"


def test_on_error_none_is_refused() -> None:
    with pytest.raises(ValueError, match="OpenRLHF cannot skip"):
        create_app(from_mapping({"onError": "none", "components": [{"ref": "exact-match"}]}))


def cli_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(serve_command)
    return app


def test_cli_bad_spec_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "spec": {"components": [{"ref": "no-such-evaluator"}]}}))
    result = CliRunner().invoke(cli_app(), ["--spec", str(path), "--port", "0"])
    assert result.exit_code == 2
    assert "unknown evaluator 'no-such-evaluator'" in result.output


def test_cli_port_in_use_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli_app(), ["--spec", str(path), "--port", str(port)])
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.output


SERVER_SCRIPT = textwrap.dedent(
    """
    import os, pathlib, time
    import typer
    import evalsi.evaluators
    from evalsi.evaluators import Evaluator, NoParams, Score
    from evalsi.cli.rewards_serve import serve_command

    @evalsi.evaluators.register
    class Slow(Evaluator[NoParams]):
        name = "test-serve-slow"
        summary = "Marks that it started, then takes a while."
        def score_batch(self, records, params, ctx):
            pathlib.Path(os.environ["MARKER"]).touch()
            time.sleep(1.0)
            return [Score.ok(0.5) for _ in records]

    typer.run(serve_command)
    """
)


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError("the server printed nothing")
    return proc.stdout.readline()


def test_sigterm_finishes_requests_in_flight_and_exits_0(tmp_path: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text(SERVER_SCRIPT)
    spec = tmp_path / "slow.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "spec": {"components": [{"ref": "test-serve-slow"}]}}))
    marker = tmp_path / "started"
    env = {**os.environ, "MARKER": str(marker)}
    proc = subprocess.Popen(
        [sys.executable, str(script), "--spec", str(spec), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = read_line(proc, 60)
        assert line.startswith("evalsi rewards serve: serve-test on http://127.0.0.1:"), line
        url = line.split(" on ", 1)[1].strip()
        answer: list[httpx.Response] = []
        client = threading.Thread(target=lambda: answer.append(post(url + "/get_reward", {"query": ["x"]})))
        client.start()
        wait_for(marker.exists, "the request to reach the evaluator")
        proc.send_signal(signal.SIGTERM)
        client.join(timeout=30)
        assert proc.wait(timeout=30) == 0
        assert answer and answer[0].json()["rewards"] == [0.5]  # the request in flight was answered
        assert proc.stderr is not None and "stopped (SIGTERM)" in proc.stderr.read()
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
