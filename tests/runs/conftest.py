"""Fixtures for run tests: a scripted loopback OpenAI-compatible server and small datasets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalsi.runs._results import read_results
from tests.helpers.openai_server import OpenAIServer

# The Hugging Face hub is unreachable here: with `datasets` installed, never wait on it (it retries for ~30 s).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ANSWERS: dict[str, Any] = {"2+2?": "4", "3+3?": ["6", "7"], "capital of France?": "Paris"}
"""Per prompt: always right, right then wrong, always right."""


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers=ANSWERS, default="no idea") as srv:
        yield srv


@pytest.fixture(autouse=True)
def workdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test here runs from an unrelated working directory: no path may depend on where evalsi started."""
    directory = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(directory)
    return directory


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


@pytest.fixture
def qa_file(tmp_path: Path) -> Path:
    return write_jsonl(
        tmp_path / "qa.jsonl",
        [
            {"id": "a", "question": "2+2?", "answer": "4"},
            {"id": "b", "question": "3+3?", "answer": "6"},
            {"id": "c", "question": "capital of France?", "answer": "Paris"},
            {"id": "d", "question": "largest planet?", "answer": "Jupiter"},
        ],
    )


def run_spec(server: OpenAIServer, data: Path, output: Path, **spec: Any) -> dict[str, Any]:
    """A RunSpec body against the test server (fast retries), exact-match scored."""
    body: dict[str, Any] = {
        "target": {"baseUrl": server.base_url, "model": "test-model", "retryBackoff": 0.01, "timeout": 5},
        "dataset": {"path": str(data), "fields": {"prompt": "question"}},
        "evaluators": [{"ref": "exact-match"}],
        "output": str(output),
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return body


def record_dicts(path: Path) -> list[dict[str, Any]]:
    """A results file's records without their samples' latencies (which no two runs share), for equality."""
    out = []
    for record in read_results(path)["records"]:
        samples = [{k: v for k, v in s.items() if k != "latency"} for s in record["samples"]]
        out.append({**record, "samples": samples})
    return out
