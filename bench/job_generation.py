"""What generating replies adds to an evaluation job, against a job scoring the same rows with replies given.

In the same run, on one server started on loopback: a job over rows that already end with the reply (the
baseline: scoring only), then jobs over the same rows without replies naming a target, the scripted
OpenAI-compatible server on loopback answering each request after ``--latency`` seconds (a model's time), at two
``max_concurrency`` settings (``project_share: 1``, one tenant). Prints each job's seconds, its ratio to the
baseline, and the floor the target's concurrency sets (rows × latency ÷ concurrency, per batch of
``batch_rows``): how close generation gets to it shows what the server's own work costs.
Run: ``.venv/bin/python bench/job_generation.py [--rows 512 --latency 0.05]`` (under a minute).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.openai_server import OpenAIServer
from tests.server.evaluation import TERMINAL, chat, jsonl, post, upload, wait_built, wait_state
from tests.server.harness import ServerProcess, make_token, write_config

CAPITALS = """
from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test()
def test_capitals(row: EvaluationRow) -> EvaluationRow:
    expected = str(row.ground_truth or "").lower()
    row.score = 1.0 if expected and expected in row.last_text.lower() else 0.0
    return row
"""
BATCH_ROWS = 256


def timed_job(server: ServerProcess, token: str, job_id: str, dataset: str, target: str | None, rows: int) -> float:
    """Seconds from creating the job to its completion."""
    job: dict[str, object] = {"evaluator": "capitals", "inputDataset": dataset, "outputDataset": f"{job_id}-out"}
    if target:
        job["target"] = target
    started = time.perf_counter()
    assert post(server, token, "evaluationJobs", {"evaluationJob": job, "evaluationJobId": job_id}).is_success
    done = wait_state(server, token, job_id, TERMINAL, timeout=600)
    seconds = time.perf_counter() - started
    assert done["state"] == "COMPLETED" and done["outputStats"]["scored"] == rows, done
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--latency", type=float, default=0.05, help="Seconds the target takes per request.")
    parser.add_argument("--quick", action="store_true", help="a few rows (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.rows = 16
    given = [chat(f"Capital of country {i}?", f"City {i % 7}", f"City {i % 5}") for i in range(args.rows)]
    bare = [chat(f"Capital of country {i}?", None, f"City {i % 5}") for i in range(args.rows)]
    directory = Path(tempfile.mkdtemp(prefix="evalsi-bench-generation-"))
    directory.chmod(0o755)
    concurrencies = (8, 32)
    try:
        with OpenAIServer(default="City 3", delay=args.latency) as upstream:
            database = f"sqlite:///{directory / 'server.db'}"
            targets = {f"c{c}": {"base_url": upstream.base_url, "model": "m", "max_concurrency": c}
                       for c in concurrencies}  # fmt: skip
            spec = {"database": {"url": database}, "evaluators": {"storage_dir": str(directory / "evaluators")},
                    "jobs": {"batch_rows": BATCH_ROWS}, "datasets": {"max_rows": args.rows},
                    "rewards": {"project_share": 1.0}, "targets": targets}  # fmt: skip
            config = write_config(directory, spec)
            token = make_token(database, "bench", ["evaluations.run", "resource.runs_code", "evaluators.write"])
            with ServerProcess(config) as server:
                upload(server, token, "capitals", {"test_capitals.py": CAPITALS}, "test_capitals.py::test_capitals")
                assert wait_built(server, token, "capitals")["state"] == "ACTIVE"
                for name, rows in (("given", given), ("bare", bare)):
                    assert post(server, token, "datasets", {"datasetId": name, "jsonl": jsonl(rows)}).is_success
                baseline = timed_job(server, token, "baseline", "given", None, args.rows)
                print(f"scoring only ({args.rows} rows with replies): {baseline:.2f} s")
                for c in concurrencies:
                    seconds = timed_job(server, token, f"gen-{c}", "bare", f"c{c}", args.rows)
                    per_batch = [min(BATCH_ROWS, args.rows - s) for s in range(0, args.rows, BATCH_ROWS)]
                    floor = sum(math.ceil(n / c) for n in per_batch) * args.latency
                    print(f"generating, max_concurrency={c}: {seconds:.2f} s, {seconds / baseline:.2f}x scoring only; "
                          f"generation {seconds - baseline:.2f} s against a floor of {floor:.2f} s "
                          f"({(seconds - baseline) / floor:.2f}x)")  # fmt: skip
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
