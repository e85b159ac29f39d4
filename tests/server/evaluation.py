"""Shared pieces of the evaluator, dataset and job tests: project archives, HTTP calls, waiting for states."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.server.harness import ServerProcess

CAPITALS = """
from evalsi.testing import EvaluationRow, NoOp, evaluation_test


@evaluation_test(input_dataset=["capitals.jsonl"], rollout_processor=NoOp(), passed_threshold=0.5)
def test_capitals(row: EvaluationRow) -> EvaluationRow:
    print("scoring", row.row_id)  # an evaluator's prints never reach the answer
    expected = str(row.ground_truth or "").lower()
    row.score = 1.0 if expected and expected in row.last_text.lower() else 0.0
    row.reason = "names the capital" if row.score else "another city"
    row.metrics["words"] = float(len(row.last_text.split()))
    return row
"""
SLOW = """
import time

from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test()
def test_slow(row: EvaluationRow) -> EvaluationRow:
    time.sleep(30)
    row.score = 1.0
    return row
"""
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


def targz(files: dict[str, str | bytes]) -> bytes:
    """A .tar.gz holding ``files`` (path -> content)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def upload(server: ServerProcess, token: str, evaluator_id: str, files: dict[str, Any], entry: str) -> httpx.Response:
    body = {"evaluatorId": evaluator_id, "entry": entry, "archive": base64.b64encode(targz(files)).decode()}
    return upload_raw(server, token, body)


def upload_raw(server: ServerProcess, token: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.http + "/v1alpha1/evaluators", json=body, headers=headers(token), timeout=60)


def get(server: ServerProcess, token: str, path: str) -> httpx.Response:
    return httpx.get(server.http + "/v1alpha1/" + path, headers=headers(token), timeout=60)


def post(server: ServerProcess, token: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.post(server.http + "/v1alpha1/" + path, json=body, headers=headers(token), timeout=60)


def wait_built(server: ServerProcess, token: str, evaluator_id: str, timeout: float = 120) -> dict[str, Any]:
    """The evaluator once it is no longer BUILDING."""
    deadline = time.monotonic() + timeout
    while True:
        evaluator: dict[str, Any] = get(server, token, f"evaluators/{evaluator_id}").json()
        if evaluator["state"] != "BUILDING" or time.monotonic() > deadline:
            return evaluator
        time.sleep(0.2)


def wait_state(server: ServerProcess, token: str, job_id: str, states: tuple[str, ...], timeout: float = 120) -> Any:
    """The job once its state is one of ``states`` (or at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        job = get(server, token, f"evaluationJobs/{job_id}").json()
        if job["state"] in states or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(orjson.dumps(row).decode() + "\n" for row in rows)


def chat(question: str, reply: str | None, truth: str) -> dict[str, Any]:
    """A dataset row: the question, the assistant's reply when given, and the reference."""
    messages = [{"role": "user", "content": question}]
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return {"messages": messages, "ground_truth": truth}


def create_job(server: ServerProcess, token: str, job_id: str, evaluator: str, source: str, output: str) -> Any:
    body = {
        "evaluationJob": {"evaluator": evaluator, "inputDataset": source, "outputDataset": output},
        "evaluationJobId": job_id,
    }
    return post(server, token, "evaluationJobs", body)


NORMALISED_TEST = """
from capital_words import normalise
from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test(mode="pointwise")
def test_normalised(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0 if normalise(row.ground_truth) in normalise(row.last_text) else 0.0
    return row
"""


def write_wheel(directory: Path) -> Path:
    """A pure-Python wheel ``capital_words`` (normalise: lower case, no punctuation) in ``directory``."""
    files = {
        "capital_words/__init__.py": (
            "def normalise(text):\n    return ''.join(c for c in str(text).lower() if c.isalnum())\n"
        ),
        "capital_words-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: capital-words\nVersion: 1.0\n",
        "capital_words-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("capital_words-1.0.dist-info/RECORD,,")
    files["capital_words-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    path = directory / "capital_words-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path
