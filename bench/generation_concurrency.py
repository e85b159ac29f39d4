"""Generation at full concurrency: evalsi against a plain aiohttp client, the same requests, in the same run.

A loopback OpenAI-compatible server (tests/helpers/openai_server.py, its own process) answers every chat request
after ``--latency`` seconds (a model's time), with no cap of its own. Per concurrency (16, 64, 256, 1024), in
alternating rounds over the same ``--records`` prompts:

- ideal: records / concurrency x latency;
- aiohttp: the chat bodies posted with one ``aiohttp.ClientSession`` at that concurrency, nothing else;
- evalsi generation: the generation phase of an in-process ``evalsi.runs.Runner`` (first request sent to last
  completion received, measured around the run's own target), exact-match scoring, journal and results file;
- evalsi run: the whole ``evalsi run -f spec.yaml`` command, a fresh process (start-up and imports included).

Targets: evalsi generation within 1.3x of aiohttp at 64, 256 and 1,024; the whole ``evalsi run`` of 1,024 records
at 256 under 2.5 s. ``--candidates`` adds the transports evalsi chose between (bare ``httpx.AsyncClient``,
httpx over ``httpx-aiohttp``, ``pyreqwest``) where installed. Then a streamed completion's parse time per token,
8k against 32k tokens (target: the ratio near 1, linear). ``--quick`` runs one small round of each (seconds).

    .venv/bin/python bench/generation_concurrency.py [--quick] [--records 1024] [--latency 0.05] [--candidates]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _startup import compile_evalsi  # noqa: E402

from evalsi.runs import Runner, run_from_mapping  # noqa: E402
from evalsi.runs._targets import make_target  # noqa: E402

ANSWER = "The answer is 42."
CLI_CPU: list[float] = []
"""CPU seconds of each `evalsi run` process (less disturbed by a busy machine than its wall time)."""
Round = Callable[[str, list[bytes], int], Coroutine[Any, Any, float]]


def raise_file_limit() -> None:
    """1,024 connections on each side need more descriptors than the usual soft limit (the server inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-m", "tests.helpers.openai_server", "--default", ANSWER, "--delay", str(latency)]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    base_url = process.stdout.readline().strip()
    if not base_url.startswith("http://127.0.0.1:"):
        process.kill()
        raise SystemExit(f"the test server did not start: {base_url!r}")
    return process, base_url


def request_bodies(records: int) -> list[bytes]:
    return [
        orjson.dumps({"model": "m", "messages": [{"role": "user", "content": f"Question {i}?"}], "max_tokens": 64})
        for i in range(records)
    ]


async def aiohttp_round(base_url: str, bodies: list[bytes], concurrency: int) -> float:
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:
        slots = asyncio.Semaphore(concurrency)
        url = base_url + "/chat/completions"

        async def one(body: bytes) -> str:
            async with slots, session.post(url, data=body, headers=headers) as response:
                payload = orjson.loads(await response.read())
            text: str = payload["choices"][0]["message"]["content"]
            return text

        started = time.perf_counter()
        texts = await asyncio.gather(*(one(b) for b in bodies))
        elapsed = time.perf_counter() - started
    assert texts == [ANSWER] * len(bodies)
    return elapsed


def httpx_round(transport: Callable[[int], Any]) -> Round:
    async def run(base_url: str, bodies: list[bytes], concurrency: int) -> float:
        import httpx

        headers = {"Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=base_url + "/", transport=transport(concurrency), timeout=120) as client:
            slots = asyncio.Semaphore(concurrency)

            async def one(body: bytes) -> str:
                async with slots:
                    response = await client.post("chat/completions", content=body, headers=headers)
                text: str = orjson.loads(response.content)["choices"][0]["message"]["content"]
                return text

            started = time.perf_counter()
            texts = await asyncio.gather(*(one(b) for b in bodies))
            elapsed = time.perf_counter() - started
        assert texts == [ANSWER] * len(bodies)
        return elapsed

    return run


def _limits(concurrency: int) -> Any:
    import httpx

    return httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)


def bare_httpx(concurrency: int) -> Any:
    import httpx

    return httpx.AsyncHTTPTransport(limits=_limits(concurrency))


def httpx_over_aiohttp(concurrency: int) -> Any:
    from httpx_aiohttp import AiohttpTransport

    return AiohttpTransport(limits=_limits(concurrency))


async def pyreqwest_round(base_url: str, bodies: list[bytes], concurrency: int) -> float:
    from pyreqwest.client import ClientBuilder

    async with ClientBuilder().max_connections(concurrency).build() as client:
        slots = asyncio.Semaphore(concurrency)
        url = base_url + "/chat/completions"

        async def one(body: bytes) -> str:
            async with slots:
                request = client.post(url).body_bytes(body).header("Content-Type", "application/json").build()
                response = await request.send()
                payload = orjson.loads(bytes(await response.bytes()))
            text: str = payload["choices"][0]["message"]["content"]
            return text

        started = time.perf_counter()
        texts = await asyncio.gather(*(one(b) for b in bodies))
        elapsed = time.perf_counter() - started
    assert texts == [ANSWER] * len(bodies)
    return elapsed


def candidates() -> dict[str, Round]:
    """The transports measured with ``--candidates``, those installed."""
    found: dict[str, Round] = {"bare httpx": httpx_round(bare_httpx)}
    try:
        import httpx_aiohttp  # noqa: F401

        found["httpx+httpx-aiohttp"] = httpx_round(httpx_over_aiohttp)
    except ImportError:
        pass
    try:
        import pyreqwest  # noqa: F401

        found["pyreqwest"] = pyreqwest_round
    except ImportError:
        pass
    return found


def write_dataset(path: Path, records: int) -> None:
    rows = [{"id": f"r{i}", "prompt": f"Question {i}?", "answer": ANSWER if i % 4 else "no"} for i in range(records)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def spec_mapping(base_url: str, data: Path, output: Path, concurrency: int) -> dict[str, Any]:
    return {
        "target": {"baseUrl": base_url, "model": "m", "maxConcurrency": concurrency},
        "sampling": {"maxTokens": 64},
        "dataset": {"path": str(data)},
        "evaluators": [{"ref": "exact-match"}],
        "output": str(output),
    }


class Timed:
    """The run's own target, timed: first request sent to last completion received (the generation phase)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.first = float("inf")
        self.last = 0.0

    def describe(self) -> dict[str, Any]:
        return dict(self.inner.describe())

    async def generate(self, prompt: Any, n: int) -> Any:
        self.first = min(self.first, time.perf_counter())
        out = await self.inner.generate(prompt, n)
        self.last = max(self.last, time.perf_counter())
        return out

    async def aclose(self) -> None:
        await self.inner.aclose()


def evalsi_generation(base_url: str, data: Path, output: Path, concurrency: int, records: int) -> float:
    output.unlink(missing_ok=True)
    run = run_from_mapping(spec_mapping(base_url, data, output, concurrency))
    body = run.body
    target = Timed(make_target(body.target, body.sampling, body.dataset.system_prompt))
    outcome = Runner(run, target=target, restart=True).run()
    assert outcome.verdict == "ok" and len(outcome.records) == records, outcome.failed
    assert abs(outcome.summary.metrics["exact-match"].mean - 0.75) < 1e-9
    return target.last - target.first


def evalsi_cli(base_url: str, data: Path, output: Path, concurrency: int, records: int) -> float:
    output.unlink(missing_ok=True)
    spec = output.with_suffix(".yaml")
    document = {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec", "metadata": {"name": "bench"},
                "spec": spec_mapping(base_url, data, output, concurrency)}  # fmt: skip
    spec.write_bytes(orjson.dumps(document))  # JSON is YAML
    argv = [sys.executable, "-c", "from evalsi.cli.main import main; main()", "run", "-f", str(spec)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=os.environ)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr[-2000:]
    assert orjson.loads(output.read_bytes())["status"] == "complete"
    CLI_CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return elapsed


def sse_stream(tokens: int) -> bytes:
    """A streamed chat completion of ``tokens`` events, as vLLM sends it."""
    events = [
        b"data: " + orjson.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": f" tok{i}"},
                                                        "finish_reason": None}]}) + b"\n\n"
        for i in range(tokens)
    ]  # fmt: skip
    end = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    return b"".join(events) + b"data: " + orjson.dumps(end) + b"\n\ndata: [DONE]\n\n"


def stream_parse_seconds(tokens: int, rounds: int) -> float | None:
    """Median seconds to parse a streamed completion of ``tokens`` tokens read in 1,500-byte pieces."""
    try:
        from evalsi.runs._streaming import StreamedCompletion
    except ImportError:  # code without a streaming reader
        return None
    data = sse_stream(tokens)
    chunks = [data[i : i + 1500] for i in range(0, len(data), 1500)]
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        completion = StreamedCompletion("chat")
        for chunk in chunks:
            completion.feed(chunk)
        completion.close()
        text = completion.texts()[0][0]
        times.append(time.perf_counter() - started)
        assert text.count(" tok") == tokens
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one small round of each (a smoke run, no targets)")
    parser.add_argument("--records", type=int, default=1024)
    parser.add_argument("--latency", type=float, default=0.05, help="Seconds the server takes per request.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="16,64,256,1024")
    parser.add_argument("--candidates", action="store_true", help="also measure the other transports")
    parser.add_argument("--no-cli", action="store_true", help="skip the whole `evalsi run` process")
    args = parser.parse_args()
    records, rounds, levels = args.records, args.rounds, [int(c) for c in args.concurrency.split(",")]
    if args.quick:
        records, rounds, levels = 128, 1, [16, 64]
    compile_evalsi()
    raise_file_limit()
    server, base_url = start_server(args.latency)
    others = candidates() if args.candidates else {}
    rows: list[tuple[int, float, dict[str, float]]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data, output = Path(tmp) / "data.jsonl", Path(tmp) / "results.json"
            write_dataset(data, records)
            bodies = request_bodies(records)
            asyncio.run(aiohttp_round(base_url, bodies[:64], 16))  # warm-up: imports, the server's first answers
            evalsi_generation(base_url, data, output, 16, records)
            for concurrency in levels:
                times: dict[str, list[float]] = {}
                for _ in range(rounds):
                    times.setdefault("aiohttp", []).append(asyncio.run(aiohttp_round(base_url, bodies, concurrency)))
                    seconds = evalsi_generation(base_url, data, output, concurrency, records)
                    times.setdefault("evalsi generation", []).append(seconds)
                    if not args.no_cli:
                        seconds = evalsi_cli(base_url, data, output, concurrency, records)
                        times.setdefault("evalsi run", []).append(seconds)
                    for name, round_ in others.items():
                        times.setdefault(name, []).append(asyncio.run(round_(base_url, bodies, concurrency)))
                medians = {name: statistics.median(values) for name, values in times.items()}
                if CLI_CPU:
                    medians["evalsi run CPU"] = statistics.median(CLI_CPU[-rounds:])
                ideal = records / concurrency * args.latency
                rows.append((concurrency, ideal, medians))
                print(format_row(concurrency, ideal, medians), flush=True)
    finally:
        server.kill()
        server.wait()
    print(f"records: {records}, latency: {args.latency:g} s, rounds: {rounds}, cores: {os.cpu_count()}")
    for concurrency, _, medians in rows:
        ratio = medians["evalsi generation"] / medians["aiohttp"]
        target = "" if args.quick or concurrency < 64 else " (target <= 1.3x)"
        print(f"ratio at {concurrency}: evalsi generation / aiohttp = {ratio:.2f}x{target}")
    short, long = (2048, 8192) if args.quick else (8192, 32768)
    a, b = stream_parse_seconds(short, 3), stream_parse_seconds(long, 3)
    if a is None or b is None:
        print("streamed completion parse: no streaming reader in this code")
    else:
        per = (b / long) / (a / short)
        print(f"streamed completion parse: {short} tokens {a * 1000:.1f} ms, {long} tokens {b * 1000:.1f} ms; "
              f"per-token time {long // 1024}k / {short // 1024}k = {per:.2f}x (target ~1: linear)")  # fmt: skip


def format_row(concurrency: int, ideal: float, medians: dict[str, float]) -> str:
    cells = [f"{name} {seconds:.2f} s" for name, seconds in medians.items()]
    return f"concurrency {concurrency:>4}: ideal {ideal:.2f} s | " + " | ".join(cells)


if __name__ == "__main__":
    main()
