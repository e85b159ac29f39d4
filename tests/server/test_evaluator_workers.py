"""Warm evaluator workers: an uploaded evaluator's interpreter is started once and fed batch after batch.

A real server builds a real evaluator; its jobs score in real sandboxes. The evaluator draws a token when its
module is imported and answers it as each row's reason, so the rows an interpreter scored can be told apart:
batches of one job and the next job share one; a worker past its row or memory budget, or one whose batch ran
out of time, is replaced by a fresh one.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalsi.sandbox import Limits
from evalsi.server.evaluation.evaluators._workers import WorkerKey, Workers, WorkerSettings
from tests.server.evaluation import TERMINAL, chat, create_job, get, jsonl, post, upload, wait_built, wait_state
from tests.server.harness import ServerProcess, make_token, write_config

pytestmark = [pytest.mark.timeout(600), pytest.mark.sandbox]

WARM = """
import time
import uuid

from evalsi.testing import EvaluationRow, evaluation_test

STARTED = uuid.uuid4().hex
\"\"\"Drawn once per import: the rows one interpreter scored share it.\"\"\"
HELD = []


@evaluation_test()
def test_warm(row: EvaluationRow) -> EvaluationRow:
    if row.last_text == "sleep":
        time.sleep(600)
    if row.last_text == "grow":
        HELD.append(b"x" * (200 << 20))  # written, so resident: past the worker's memory budget
    row.score = 1.0
    row.reason = STARTED
    return row
"""
BATCH_TIMEOUT = 20
"""Seconds a batch may take: generous for a loaded machine, short beside the sleeping row's 600 s."""


@dataclass
class Env:
    server: ServerProcess
    token: str


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("workers")
    database = f"sqlite:///{directory / 'server.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-workers-test-"))  # under /tmp: sandbox users must reach it
    jobs = {"batch_rows": 2, "batch_timeout": BATCH_TIMEOUT, "worker_max_rows": 6, "worker_max_memory_mb": 160}
    config = write_config(
        directory, {"database": {"url": database}, "evaluators": {"storage_dir": str(storage)}, "jobs": jobs}
    )
    token = make_token(database, "team-w", ["evaluations.run", "resource.runs_code", "evaluators.write"])
    with ServerProcess(config) as server:
        for name in ("warm", "budget", "timed", "memory"):
            files, entry = {f"test_{name}.py": WARM}, f"test_{name}.py::test_warm"  # told apart in ``ps``
            assert upload(server, token, name, files, entry).status_code == 200
        for name in ("warm", "budget", "timed", "memory"):
            built = wait_built(server, token, name, timeout=300)
            assert built["state"] == "ACTIVE", get(server, token, f"evaluators/{name}/log").text
        yield Env(server, token)
    shutil.rmtree(storage, ignore_errors=True)


def scored(env: Env, job_id: str, evaluator: str, replies: list[str]) -> list[dict[str, Any]]:
    """The output rows of a job of ``evaluator`` over rows whose replies are ``replies``."""
    rows = [chat(f"question {i}", reply, "x") for i, reply in enumerate(replies)]
    assert post(env.server, env.token, "datasets", {"datasetId": f"{job_id}-in", "jsonl": jsonl(rows)}).is_success
    created = create_job(env.server, env.token, job_id, evaluator, f"{job_id}-in", f"{job_id}-out")
    assert created.status_code == 200, created.text
    job = wait_state(env.server, env.token, job_id, TERMINAL, timeout=400)
    assert job["state"] == "COMPLETED", job
    dataset = get(env.server, env.token, f"datasets/{job_id}-out?rows=true").json()
    return [orjson.loads(line) for line in dataset["jsonl"].splitlines()]


def interpreters(rows: list[dict[str, Any]]) -> list[str | None]:
    """The token of the interpreter that scored each row (None for a row that failed)."""
    out: list[str | None] = []
    for row in rows:
        out.append(None if "evaluation_error" in row else row["evaluation_result"]["reason"])
    return out


def workers_running(evaluator: str) -> int:
    """Warm workers of ``evaluator`` running on the machine now."""
    listing = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in listing.splitlines() if f"evalsi_runner.py serve test_{evaluator}.py" in line)


def test_a_jobs_batches_and_the_next_job_are_scored_by_one_interpreter_importing_the_evaluator_once(env: Env) -> None:
    first = interpreters(scored(env, "warm-1", "warm", ["a", "b", "c", "d"]))  # two batches of two rows
    second = interpreters(scored(env, "warm-2", "warm", ["e", "f"]))
    assert None not in first + second
    assert len(set(first + second)) == 1, "each batch started the evaluator's interpreter again"


def test_a_worker_past_its_row_budget_is_replaced_by_a_fresh_one(env: Env) -> None:
    tokens = interpreters(scored(env, "budget-1", "budget", [str(i) for i in range(10)]))
    assert None not in tokens
    assert len(set(tokens[:6])) == 1, tokens  # jobs.worker_max_rows=6: three batches of two rows
    assert len(set(tokens[6:])) == 1 and tokens[6] != tokens[0], tokens


def test_a_batch_out_of_time_kills_its_worker_and_the_next_batch_gets_a_fresh_one(env: Env) -> None:
    started = time.monotonic()
    rows = scored(env, "timed-1", "timed", ["a", "b", "sleep", "c", "d", "e"])
    assert time.monotonic() - started < 300  # the sleeping batch was killed at its timeout, not waited for
    tokens = interpreters(rows)
    assert tokens[0] == tokens[1] and tokens[0] is not None
    for row in rows[2:4]:
        error = row["evaluation_error"]
        assert f"timeout: no answer within jobs.batch_timeout={BATCH_TIMEOUT}s" in error, error
    assert tokens[4] == tokens[5] and tokens[4] is not None and tokens[4] != tokens[0], tokens
    assert workers_running("timed") == 1, "the killed worker is still running, or its successor is not idle"


def test_a_worker_holding_more_than_its_memory_budget_is_replaced_after_its_batch(env: Env) -> None:
    tokens = interpreters(scored(env, "memory-1", "memory", ["a", "b", "grow", "c", "d", "e"]))
    assert None not in tokens, tokens
    assert tokens[0] == tokens[1] == tokens[2] == tokens[3], tokens  # the batch that grew it is answered
    assert tokens[4] == tokens[5] != tokens[0], tokens  # jobs.worker_max_memory_mb=160: then it is replaced


def key(evaluator: str) -> WorkerKey:
    return WorkerKey("p", evaluator, "rev", "/nonexistent", "e.py", "/nonexistent", "namespaced", 1 << 30, 8)


def test_idle_workers_past_the_idle_bound_or_the_idle_time_are_stopped() -> None:
    workers = Workers(WorkerSettings(max_idle=2, idle_timeout=60.0))
    try:
        leased = [workers.lease(key(name), Limits()) for name in ("a", "b", "c")]
        for worker in leased:
            workers.give_back(worker)
        assert [w.spent for w in leased] == [True, False, False]  # the longest idle went past jobs.max_idle_workers
        assert workers.lease(key("b"), Limits()) is leased[1]  # an idle worker of the same key is reused
        assert workers.lease(key("a"), Limits()) is not leased[0]
        leased[2].idle_since -= 61
        assert workers.sweep() == 1 and leased[2].spent
    finally:
        workers.close()
