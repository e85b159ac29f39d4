"""The id commands of the evaluator, dataset and job groups: one request each, the answer shown as JSON."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app


class Recorder(BaseHTTPRequestHandler):
    """Answers every request with the method, path and token it saw (a server's JSON API, on loopback)."""

    def _answer(self) -> None:
        body = json.dumps(
            {"method": self.command, "path": self.path, "auth": self.headers.get("Authorization")}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    ("argv", "method", "path"),
    [
        (["evaluators", "get", "ev-1"], "GET", "/v1alpha1/evaluators/ev-1"),
        (["evaluators", "delete", "ev-1"], "DELETE", "/v1alpha1/evaluators/ev-1"),
        (["jobs", "get", "job-1"], "GET", "/v1alpha1/evaluationJobs/job-1"),
        (["jobs", "cancel", "job-1"], "POST", "/v1alpha1/evaluationJobs/job-1/cancel"),
        (["jobs", "delete", "job-1"], "DELETE", "/v1alpha1/evaluationJobs/job-1"),
        (["datasets", "delete", "rows"], "DELETE", "/v1alpha1/datasets/rows"),
    ],
)
def test_an_id_command_sends_one_request_and_shows_the_answer(
    server: str, argv: list[str], method: str, path: str
) -> None:
    result = CliRunner().invoke(app, [*argv, "--server", server], env={"EVALSI_TOKEN": "t0k"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"method": method, "path": path, "auth": "Bearer t0k"}


@pytest.mark.parametrize(
    ("argv", "argument", "summary"),
    [
        (["jobs", "cancel"], "job_id", "Cancel a queued or running job"),
        (["evaluators", "delete"], "evaluator_id", "Delete an uploaded evaluator"),
        (["datasets", "delete"], "name", "Delete a dataset."),
    ],
)
def test_an_id_command_names_its_argument_and_says_what_it_does(argv: list[str], argument: str, summary: str) -> None:
    missing = CliRunner().invoke(app, argv)
    assert missing.exit_code == 2
    assert f"Missing argument '{argument}'" in missing.output
    assert summary in CliRunner().invoke(app, [*argv, "--help"]).stdout
