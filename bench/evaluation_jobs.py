"""Cost per row of an evaluation job on a real server against scoring the same rows in-process, in one run.

The baseline: the evaluation test's function applied to every row in this process (``score_rollouts``: no
sandbox, no server). Then, per batch size, a fresh server on loopback (upload and build excluded) runs jobs over
the same dataset: the first starts the evaluator's warm worker (one sandbox, one interpreter and import), the
next find it warm, and a one-row job gives the fixed cost of a job (its database writes, the output dataset).
Each job is timed by the server's own clock, from ``CreateEvaluationJob`` to ``COMPLETED``; the baseline, right
after each server's jobs, scores the rows pass after pass for as long as the warm job took (the faster of two).
Prints the cost per row against the baseline's, for the whole warm job and past its fixed cost; target at the
default batch (``jobs.batch_rows``): <= 10x.
Run: ``.venv/bin/python bench/evaluation_jobs.py [--quick] [--rows 5000]`` (a few minutes; --quick: seconds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.server.evaluation import (
    TERMINAL,
    chat,
    create_job,
    get,
    jsonl,
    post,
    upload,
    wait_built,
)
from tests.server.harness import ServerProcess, make_token, write_config

from evalsi.server.evaluation._config import JobsConfig
from evalsi.testing import EvaluationRow
from evalsi.testing._scoring import score_rollouts

CAPITALS = """
from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test()
def test_capitals(row: EvaluationRow) -> EvaluationRow:
    expected = str(row.ground_truth or "").lower()
    row.score = 1.0 if expected and expected in row.last_text.lower() else 0.0
    return row
"""
"""The scoring function timed: a substring check, so the bench measures what surrounds it."""
DEFAULT_BATCH = JobsConfig().batch_rows


def in_process(rows: list[dict[str, object]], span: float = 0.0) -> float:
    """Seconds per row to score ``rows`` with the test's function here (the module is executed, not uploaded).

    Passes over ``rows`` repeat until ``span`` seconds have gone, so that on a busy machine the baseline gets the
    same share of the cores as the job it is set against (a burst of a few ms would often get a core alone).
    """
    namespace: dict[str, object] = {}
    exec(compile(CAPITALS, "test_capitals.py", "exec"), namespace)
    function = getattr(namespace["test_capitals"], "__wrapped__", None) or namespace["test_capitals"]
    declared = getattr(function, "evaluation", None)
    scoring = declared.function if declared is not None else function
    started, passes = time.perf_counter(), 0
    while passes == 0 or time.perf_counter() - started < span:
        built = [EvaluationRow(list(r["messages"]), r["ground_truth"], str(i)) for i, r in enumerate(rows)]  # type: ignore[arg-type, call-overload]
        score_rollouts(scoring, "pointwise", built)
        passes += 1
    return (time.perf_counter() - started) / (passes * len(rows))


def wait_done(server: ServerProcess, token: str, job_id: str) -> dict[str, Any]:
    """The finished job, polled every 10 ms (the tests' 100 ms poll would dominate a short job)."""
    deadline = time.monotonic() + 600
    while True:
        job: dict[str, Any] = get(server, token, f"evaluationJobs/{job_id}").json()
        if job["state"] in TERMINAL:
            assert job["state"] == "COMPLETED", job
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.01)


def on_server(rows: list[dict[str, object]], batch_rows: int) -> dict[str, float]:
    """Seconds each job took on one fresh server, by the server's own clock (``updateTime - createTime``).

    Jobs, in order: ``cold`` over all ``rows`` (it starts the evaluator's warm worker: its sandbox, interpreter
    and import), ``warm`` over them again twice (the worker is idle, warm), ``single`` over one row three times;
    repeated jobs keep their fastest. ``wall`` is the cold job from the client's side, polling included.
    """
    directory = Path(tempfile.mkdtemp(prefix="evalsi-bench-jobs-"))
    directory.chmod(0o755)
    try:
        database = f"sqlite:///{directory / 'server.db'}"
        spec = {"database": {"url": database}, "evaluators": {"storage_dir": str(directory / "evaluators")},
                "jobs": {"batch_rows": batch_rows}, "datasets": {"max_rows": len(rows)}}  # fmt: skip
        config = write_config(directory, spec)
        token = make_token(database, "bench", ["evaluations.run", "resource.runs_code", "evaluators.write"])
        with ServerProcess(config) as server:
            upload(server, token, "capitals", {"test_capitals.py": CAPITALS}, "test_capitals.py::test_capitals")
            assert wait_built(server, token, "capitals")["state"] == "ACTIVE"
            assert post(server, token, "datasets", {"datasetId": "rows", "jsonl": jsonl(rows)}).is_success  # type: ignore[arg-type]
            assert post(server, token, "datasets", {"datasetId": "one", "jsonl": jsonl(rows[:1])}).is_success  # type: ignore[arg-type]
            seconds: dict[str, float] = {}
            for n, (name, source) in enumerate([("cold", "rows"), *[("warm", "rows")] * 2, *[("single", "one")] * 3]):
                started = time.perf_counter()
                assert create_job(server, token, f"job-{n}", "capitals", source, f"out-{n}").is_success
                job = wait_done(server, token, f"job-{n}")
                if name == "cold":
                    seconds["wall"] = time.perf_counter() - started
                assert job["outputStats"]["scored"] == (1 if source == "one" else len(rows)), job
                took = _seconds(job["updateTime"]) - _seconds(job["createTime"])
                seconds[name] = min(took, seconds.get(name, took))
            return seconds
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=None, help="dataset rows (default 5000; 500 with --quick)")
    parser.add_argument("--quick", action="store_true", help="fewer rows, the default batch size only (a smoke run)")
    args = parser.parse_args()
    count = args.rows or (500 if args.quick else 5000)
    rows = [chat(f"Capital of country {i}?", f"City {i % 7}", f"City {i % 5}") for i in range(count)]
    print(f"{count} rows; {os.cpu_count()} cores, {os.getloadavg()[0]:.1f} load")
    for batch in (DEFAULT_BATCH,) if args.quick else (64, DEFAULT_BATCH, 1024):
        took = on_server(rows, batch)  # type: ignore[arg-type]
        baseline = min(in_process(rows, took["warm"]) for _ in range(2))  # type: ignore[arg-type]
        print(f"in-process, right after the jobs: {1 / baseline:,.0f} rows/s ({baseline * 1e6:.1f} µs/row)")
        cold, warm, single = took["cold"] / count, took["warm"] / count, took["single"]
        marginal = max(took["warm"] - single, 0.0) / (count - 1)
        print(
            f"job of {count} rows, batch_rows={batch}: worker cold {took['cold']:.2f} s ({cold / baseline:,.0f}x; "
            f"{took['wall']:.2f} s seen by the client); a 1-row job with the worker warm {single * 1e3:.0f} ms"
        )
        print(
            f"ratio per row, batch_rows={batch}, worker warm: {warm / baseline:.1f}x the in-process time "
            f"({warm * 1e6:.0f} µs/row, the whole job); {marginal / baseline:.1f}x past the job's fixed cost"
            + (" (target <= 10x)" if batch == DEFAULT_BATCH else "")
        )


if __name__ == "__main__":
    main()
