"""Orchestration overhead of `evalsi run` against raw concurrent HTTP requests to the same instant endpoint.

A loopback OpenAI-compatible server (tests/helpers/openai_server.py, its own process) answers every chat request
at once. In the same run, alternating rounds:

- raw: the same chat request bodies sent with httpx.AsyncClient at the same concurrency, nothing else;
- evalsi: a full run (dataset file -> generation -> math-equiv scoring through the engine -> journal and
  atomic results file -> summary), from a fresh results file each round.

Prints records/s medians and the overhead (evalsi / raw - 1) twice: in wall time, and in CPU time of this
(client) process, which a noisy shared machine disturbs far less (the server runs in its own process, so its
CPU is not counted on either side). Target: under 25%.

    .venv/bin/python bench/run_overhead.py [--records 1000] [--rounds 5] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalsi.evaluators import available_names, get_evaluator  # noqa: E402
from evalsi.runs import Runner, run_from_mapping  # noqa: E402

ANSWER = "Let me compute. 6 times 7 is 42, so the answer is \\boxed{42}."


def start_server() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.openai_server", "--default", ANSWER],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    base_url = process.stdout.readline().strip()
    if not base_url.startswith("http://127.0.0.1:"):
        process.kill()
        raise SystemExit(f"the test server did not start: {base_url!r}")
    return process, base_url


def write_dataset(path: Path, records: int) -> list[dict[str, Any]]:
    rows = [
        {"id": f"r{i}", "prompt": f"What is 6 times 7? (variant {i})", "answer": "42" if i % 4 else "41"}
        for i in range(records)
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return rows


Timing = tuple[float, float]
"""(wall seconds, CPU seconds of this process)."""


def timed_raw(base_url: str, rows: list[dict[str, Any]], concurrency: int) -> Timing:
    cpu = time.process_time()
    wall = asyncio.run(raw_round(base_url, rows, concurrency))
    return wall, time.process_time() - cpu


async def raw_round(base_url: str, rows: list[dict[str, Any]], concurrency: int) -> float:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    slots = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base_url + "/", limits=limits, timeout=60) as client:

        async def one(row: dict[str, Any]) -> str:
            body = {"model": "m", "messages": [{"role": "user", "content": row["prompt"]}], "max_tokens": 64}
            async with slots:
                response = await client.post("chat/completions", json=body)
            text: str = response.json()["choices"][0]["message"]["content"]
            return text

        started = time.perf_counter()
        texts = await asyncio.gather(*(one(r) for r in rows))
        elapsed = time.perf_counter() - started
    assert len(texts) == len(rows)
    return elapsed


def evalsi_round(base_url: str, data: Path, output: Path, evaluator: str, concurrency: int) -> Timing:
    output.unlink(missing_ok=True)
    cpu = time.process_time()
    spec = {
        "target": {"baseUrl": base_url, "model": "m", "maxConcurrency": concurrency},
        "sampling": {"maxTokens": 64},
        "dataset": {"path": str(data)},
        "evaluators": [{"ref": evaluator}],
        "output": str(output),
    }
    started = time.perf_counter()
    run = run_from_mapping(spec)  # loading and binding the spec is part of the run's cost
    outcome = Runner(run).run()
    elapsed = time.perf_counter() - started
    assert outcome.verdict == "ok" and len(outcome.records) == int(data.read_bytes().count(b"\n"))
    if evaluator == "math-equiv":  # every fourth reference is wrong on purpose
        mean = outcome.summary.metrics[evaluator].mean
        assert abs(mean - 0.75) < 1e-9, mean
    return elapsed, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description="evalsi run overhead vs raw HTTP")
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--evaluator", default=None, help="default: math-equiv when installed, else exact-match")
    parser.add_argument("--quick", action="store_true", help="a few records, one round (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds = 64, 1

    evaluator = args.evaluator or ("math-equiv" if "math-equiv" in available_names() else "exact-match")
    get_evaluator(evaluator)  # import and warm it outside the timed rounds, as a long-lived process would
    server, base_url = start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data.jsonl"
            rows = write_dataset(data, args.records)
            asyncio.run(raw_round(base_url, rows[:200], args.concurrency))  # warm-up: connections, imports
            evalsi_round(base_url, data, Path(tmp) / "warm.json", evaluator, args.concurrency)
            raw: list[Timing] = []
            ours: list[Timing] = []
            for _ in range(args.rounds):
                raw.append(timed_raw(base_url, rows, args.concurrency))
                ours.append(evalsi_round(base_url, data, Path(tmp) / "results.json", evaluator, args.concurrency))
    finally:
        server.kill()
        server.wait()

    n = args.records
    print(f"records: {n}, concurrency: {args.concurrency}, rounds: {args.rounds}, evaluator: {evaluator}")
    for label, index in (("wall", 0), ("client CPU", 1)):
        r = statistics.median(t[index] for t in raw)
        o = statistics.median(t[index] for t in ours)
        paired = statistics.median(b[index] / a[index] - 1 for a, b in zip(raw, ours, strict=True))
        print(
            f"{label:>10}: raw httpx {n / r:7.0f} records/s ({r:.3f} s) | evalsi run {n / o:7.0f} records/s "
            f"({o:.3f} s) | overhead {o / r - 1:+.1%} of medians, {paired:+.1%} median paired (target < +25%)"
        )


if __name__ == "__main__":
    main()
