"""Checkpoint overhead: seconds from a checkpoint settling to its step result, minus the evaluation itself.

A watcher (in-process, the same code as `evalsi checkpoints watch`) watches a directory while this script writes
checkpoints into it one at a time, each after the previous one's result is in. The vLLM stand-in
(tests/helpers/vllm_standin.py, its own process) serves a base model with runtime LoRA loading, answering at once.
Each serving strategy runs embedded (results files only) and, with --server (the default), also with
`--server URL` against a real evalsi server process on loopback (SQLite): each step stored there as a run and
compared with the base through CompareRuns.

For each checkpoint: settled = its newest file's modification time + --settle (the moment the watcher may start);
done = when the watcher reports the step's result (results file written, stored on the server with --server, and
compared with the base); evaluation = the run's own wall time (generation and scoring of every record, as
`evalsi run` reports it, the baseline measured in the same run). Overhead = done − settled − evaluation: waking
up, serving (loading and unloading the adapter for `lora`), binding the spec, writing results, storing them,
comparing with the base. The server path's cost is its overhead against the embedded one's (medians).

Target: under 0.5 s per checkpoint (floor 1 s). The watcher looks for new checkpoints every --poll seconds
(default 2, as the command) and sleeps until each one settles, so poll < settle keeps discovery off the clock.

    .venv/bin/python bench/checkpoint_overhead.py [--checkpoints 5] [--records 50] [--settle 2.5] [--no-server]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.vllm_standin import standin_executable  # noqa: E402
from tests.server.harness import ServerProcess, make_token, write_config  # noqa: E402

from evalsi.training import Checkpoint, CheckpointEvaluator, Endpoint, LoRA, ServingStrategy, StepResult  # noqa: E402
from evalsi.training._checkpoints import signature  # noqa: E402
from evalsi.training._vllm import free_port  # noqa: E402
from evalsi.training._watch import Watcher  # noqa: E402

Server = tuple[str, str]
"""A running server's URL and a token with evaluations.run."""


def start_standin(folder: Path, answers: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    base = folder / "base-model"
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    (base / "model.safetensors").write_bytes(b"\0" * 64)
    (base / "answers.json").write_text(json.dumps(answers))
    port = free_port()
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    process = subprocess.Popen(
        [
            str(standin_executable(folder / "bin")),
            "serve",
            str(base),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--served-model-name",
            "base",
            "--enable-lora",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(400):
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return process, f"{url}/v1"
        except httpx.TransportError:
            time.sleep(0.025)
    process.kill()
    raise SystemExit("the vLLM stand-in did not start")


def write_spec(folder: Path, records: int) -> tuple[Path, dict[str, str]]:
    rows = [{"id": f"r{i}", "prompt": f"question {i}", "answer": f"answer {i}"} for i in range(records)]
    (folder / "data.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    spec = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "bench"},
        "spec": {
            "target": {"baseUrl": "http://127.0.0.1:9/v1", "model": "base", "maxConcurrency": 8},
            "dataset": {"path": "data.jsonl"},
            "evaluators": [{"ref": "exact-match"}],
        },
    }
    path = folder / "bench.yaml"
    path.write_text(json.dumps(spec))
    return path, {r["prompt"]: r["answer"] for r in rows}


def write_checkpoint(folder: Path, answers: dict[str, str]) -> float:
    """A LoRA checkpoint, written file by file as a trainer would; returns when it settles (newest mtime)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
    (folder / "answers.json").write_text(json.dumps(answers))
    (folder / "adapter_model.safetensors").write_bytes(os.urandom(4096))
    return signature(folder).newest


class Finished:
    """The watcher's display: when each step's result came in (the wall clock, as file times are)."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}

    def waiting(self, pending: list[tuple[Checkpoint, str]]) -> None:
        pass

    def evaluated(self, checkpoint: Checkpoint, result: StepResult) -> None:
        self.at[checkpoint.step] = time.time()

    def failed(self, checkpoint: Checkpoint, reason: str) -> None:
        raise SystemExit(f"checkpoint-{checkpoint.step} failed: {reason}")


@contextmanager
def running_server(folder: Path) -> Iterator[Server]:
    """A real evalsi server process on loopback with a SQLite database, and a token for it."""
    folder.mkdir(parents=True)
    config = write_config(folder, {"database": {"url": "sqlite:///server.db"}})
    token = make_token(f"sqlite:///{folder / 'server.db'}", "bench", ["evaluations.run"])
    with ServerProcess(config) as process:
        yield process.http, token


def measure(
    name: str,
    serving: ServingStrategy,
    spec: Path,
    work: Path,
    answers: dict[str, str],
    checkpoints: int,
    settle: float,
    poll: float,
    server: Server | None = None,
) -> list[tuple[float, float]]:
    out_dir, log_dir = work / f"out-{name}", work / f"logs-{name}"
    url, token = server if server is not None else (None, None)
    evaluator = CheckpointEvaluator(
        [spec], f"bench-{name}", serving, regression=["exact-match"], log_dir=log_dir, server=url, token=token
    )
    evaluator.evaluate("base", None)  # the base first, so each step is also compared (as with --regression)
    stop = threading.Event()
    finished = Finished()
    watcher = Watcher(evaluator, out_dir, settle=settle, poll=poll, display=finished)
    thread = threading.Thread(target=watcher.run, kwargs={"until": stop.is_set}, daemon=True)
    thread.start()
    rows = []
    try:
        for index in range(1, checkpoints + 1):
            step = index * 100
            newest = write_checkpoint(out_dir / f"checkpoint-{step}", answers)
            deadline = time.time() + settle + 120
            while step not in finished.at:
                if time.time() > deadline:
                    raise SystemExit(f"{name}: checkpoint-{step} was not evaluated")
                time.sleep(0.01)
            data = orjson.loads(evaluator.result_path("bench", step).read_bytes())
            evaluation = float(data["timings"]["wallSeconds"])
            rows.append((finished.at[step] - (newest + settle) - evaluation, evaluation))
    finally:
        stop.set()
        thread.join(poll + 30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--checkpoints", type=int, default=5)
    parser.add_argument("--records", type=int, default=50)
    parser.add_argument("--settle", type=float, default=2.5)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--server", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--quick", action="store_true", help="two small checkpoints (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.checkpoints, args.records, args.settle, args.poll = 2, 5, 0.5, 0.5
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec, answers = write_spec(work, args.records)
        process, base_url = start_standin(work / "vllm", answers)
        try:
            with running_server(work / "server") if args.server else _no_server() as server:
                report(args, spec, work, answers, base_url, server)
        finally:
            process.terminate()
            process.wait(10)
    print("target: overhead under 0.5 s per checkpoint (floor 1 s)")


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


def report(
    args: argparse.Namespace, spec: Path, work: Path, answers: dict[str, str], base_url: str, server: Server | None
) -> None:
    """Measure each serving strategy embedded (and through the server) and print the table."""
    strategies: list[tuple[str, ServingStrategy]] = [("endpoint", Endpoint(base_url, "base")), ("lora", LoRA(base_url))]
    print(
        f"{args.checkpoints} checkpoints x {args.records} records, settle {args.settle:g} s, "
        f"poll {args.poll:g} s; vLLM stand-in, answers at once"
        + ("; server: a local evalsi server process (SQLite)" if server else "")
    )
    print(
        f"{'serving':<10}{'results':<10}{'overhead median':>17}{'max':>9}{'evaluation median':>19}"
        f"{'overhead/eval':>15}{'vs embedded':>13}"
    )
    for name, serving in strategies:
        embedded = 0.0
        for where in ("embedded", "server") if server else ("embedded",):
            rows = measure(
                f"{name}-{where}",
                serving,
                spec,
                work,
                answers,
                args.checkpoints,
                args.settle,
                args.poll,
                server if where == "server" else None,
            )
            overheads = [o for o, _ in rows]
            evaluation = statistics.median(e for _, e in rows)
            overhead = statistics.median(overheads)
            if where == "embedded":
                embedded = overhead
                versus = "baseline"
            else:
                versus = f"{overhead / embedded:.2f}x" if embedded > 0 else "n/a"
            print(
                f"{name:<10}{where:<10}{overhead:>15.3f} s{max(overheads):>7.3f} s{evaluation:>17.3f} s"
                f"{overhead / evaluation:>15.2f}{versus:>13}"
            )
        if server:
            print(f"{'':<10}{'server adds':<10}{overhead - embedded:>15.3f} s per checkpoint (medians)")


if __name__ == "__main__":
    main()
