"""Throughput of an evaluation job on a real server against scoring the same rows in-process.

In the same run: the evaluation test's function applied to every row in this process (``score_rollouts``, the
baseline: no sandbox, no server), then a job scoring the same dataset on a server started on loopback (upload
and build excluded; timed from ``CreateEvaluationJob`` to ``COMPLETED``), for two batch sizes. Prints rows per
second and the job's cost per row against the baseline's. The difference is the sandbox (one bubblewrap start
per job, one interpreter and import per batch), the JSON round trips and the output dataset's write.
Run: ``.venv/bin/python bench/evaluation_jobs.py [--rows 2000]`` (under a minute).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.server.evaluation import (
    TERMINAL,
    chat,
    create_job,
    jsonl,
    post,
    upload,
    wait_built,
    wait_state,
)
from tests.server.harness import ServerProcess, make_token, write_config

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


def in_process(rows: list[dict[str, object]]) -> float:
    """Seconds to score ``rows`` with the test's function here (the module is executed, not uploaded)."""
    namespace: dict[str, object] = {}
    exec(compile(CAPITALS, "test_capitals.py", "exec"), namespace)
    function = getattr(namespace["test_capitals"], "__wrapped__", None) or namespace["test_capitals"]
    declared = getattr(function, "evaluation", None)
    scoring = declared.function if declared is not None else function
    started = time.perf_counter()
    built = [EvaluationRow(list(r["messages"]), r["ground_truth"], str(i)) for i, r in enumerate(rows)]  # type: ignore[arg-type, call-overload]
    score_rollouts(scoring, "pointwise", built)
    return time.perf_counter() - started


def on_server(rows: list[dict[str, object]], batch_rows: int) -> float:
    """Seconds from creating a job over ``rows`` to its completion, on a fresh server."""
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
            started = time.perf_counter()
            assert create_job(server, token, "bench", "capitals", "rows", "out").is_success
            job = wait_state(server, token, "bench", TERMINAL, timeout=600)
            seconds = time.perf_counter() - started
            assert job["state"] == "COMPLETED" and job["outputStats"]["scored"] == len(rows), job
            return seconds
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="a few rows, one batch size (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.rows = 64
    rows = [chat(f"Capital of country {i}?", f"City {i % 7}", f"City {i % 5}") for i in range(args.rows)]
    baseline = min(in_process(rows) for _ in range(3))  # type: ignore[arg-type]
    print(f"in-process: {args.rows / baseline:,.0f} rows/s ({baseline * 1e6 / args.rows:.1f} µs/row)")
    for batch in (64,) if args.quick else (64, 256, 1024):
        seconds = on_server(rows, batch)  # type: ignore[arg-type]
        ratio = seconds / baseline
        print(f"job, batch_rows={batch}: {args.rows / seconds:,.0f} rows/s ({seconds * 1e3 / args.rows:.2f} ms/row), "
              f"{ratio:,.0f}x the in-process time")  # fmt: skip


if __name__ == "__main__":
    main()
