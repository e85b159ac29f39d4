"""A run killed with SIGKILL resumes from its finished records: nothing regenerated, nothing lost."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml

from evalsi.runs import RecordResult, Runner, load_run
from evalsi.runs._results import journal_path, read_results
from tests.helpers.openai_server import OpenAIServer
from tests.runs.conftest import write_jsonl

ROOT = Path(__file__).resolve().parents[2]
CHILD = "import sys; from evalsi.runs import Runner, load_run; Runner(load_run(sys.argv[1])).run()"


def journaled(path: Path) -> list[str]:
    if not path.exists():
        return []
    keys = []
    for line in path.read_bytes().splitlines()[1:]:
        with contextlib.suppress(orjson.JSONDecodeError):  # the line being written
            keys.append(RecordResult.from_json(orjson.loads(line)).key)
    return keys


def test_killed_run_resumes_without_recomputing(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "prompt": f"q{i}", "answer": f"a{i}"} for i in range(40)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    with OpenAIServer(answers={f"q{i}": f"a{i}" for i in range(40)}, delay=0.1) as server:
        spec = tmp_path / "run.yaml"
        spec.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "evals.si/v1alpha1",
                    "kind": "RunSpec",
                    "metadata": {"name": "killme"},
                    "spec": {
                        "target": {"baseUrl": server.base_url, "model": "m", "maxConcurrency": 2},
                        "dataset": {"path": str(data)},
                        "evaluators": [{"ref": "exact-match"}],
                        "output": str(tmp_path / "out.json"),
                        "batchSize": 1,
                    },
                }
            )
        )
        out = tmp_path / "out.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(spec)], env=env)
        try:
            deadline = time.monotonic() + 60
            while len(journaled(journal_path(out))) < 6 and time.monotonic() < deadline:
                assert child.poll() is None, "the run ended before it could be killed"
                time.sleep(0.02)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
        done_before = set(journaled(journal_path(out)))
        assert 6 <= len(done_before) < 40
        outcome = Runner(load_run(spec)).run()

        assert outcome.resumed == len(done_before) and outcome.generated == 40 - len(done_before)
        for i in range(40):
            expected = 1 if f"r{i}" in done_before else None
            count = server.request_count(f"q{i}")
            if expected is not None:
                assert count == 1, f"r{i} finished before the kill but was requested {count} times"
            else:
                assert count in (1, 2)  # at most the request in flight at the kill, then the resumed one
        final = read_results(out)
        assert final["status"] == "complete" and [r["id"] for r in final["records"]] == [f"r{i}" for i in range(40)]
        assert outcome.summary.metrics["exact-match"].mean == 1.0
        assert not journal_path(out).exists()


# Ctrl-C as at a terminal: SIGINT's default handler, even when these tests run where SIGINT is ignored (a
# background job of a non-interactive shell), which a child process would otherwise inherit.
CLI = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "import typer; from evalsi.cli.run import run_command; app = typer.Typer(); "
    "app.command('run')(run_command); app.command('other')(lambda: None); app()"
)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_interrupted_cli_run_saves_a_partial_results_file(tmp_path: Path, concurrency: int) -> None:
    """Ctrl-C ends the run with one friendly line: no asyncio traceback of the cancelled requests after it."""
    rows = [{"id": f"r{i}", "prompt": f"q{i}", "answer": f"a{i}"} for i in range(30)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    with OpenAIServer(answers={f"q{i}": f"a{i}" for i in range(30)}, delay=0.1) as server:
        spec = tmp_path / "run.yaml"
        out = tmp_path / "out.json"
        spec.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "evals.si/v1alpha1",
                    "kind": "RunSpec",
                    "metadata": {"name": "ctrl-c"},
                    "spec": {
                        "target": {"baseUrl": server.base_url, "model": "m", "maxConcurrency": concurrency},
                        "dataset": {"path": str(data)},
                        "evaluators": [{"ref": "exact-match"}],
                        "output": str(out),
                        "batchSize": 1,
                    },
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, "-c", CLI, "run", "-f", str(spec), "-q"], env=env, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 60
            while len(journaled(journal_path(out))) < 3 and time.monotonic() < deadline:
                assert child.poll() is None, "the run ended before it could be interrupted"
                time.sleep(0.02)
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
        assert child.returncode == 1, err
        assert "interrupted" in err and "to resume" in err
        assert "Traceback" not in err and "never retrieved" not in err and "CancelledError" not in err, err
        partial = read_results(out)
        assert partial["status"] == "partial" and 3 <= len(partial["records"]) < 30
        outcome = Runner(load_run(spec)).run()
        assert outcome.resumed >= len(partial["records"]) and len(outcome.records) == 30
