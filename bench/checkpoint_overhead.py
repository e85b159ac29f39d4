"""Checkpoint overhead: seconds from a checkpoint settling to its results file, minus the evaluation itself.

A watcher (in-process, the same code as `evalsi checkpoints watch`) watches a directory while this script writes
checkpoints into it one at a time, each after the previous one's results file is complete. The vLLM stand-in
(tests/helpers/vllm_standin.py, its own process) serves a base model with runtime LoRA loading, answering at once.

For each checkpoint: settled = its newest file's modification time + --settle (the moment the watcher may start);
done = the modification time of its results file (complete, with the checkpoint section); evaluation = the run's
own wall time (generation and scoring of every record, as `evalsi run` reports it, the baseline measured in the
same run). Overhead = done − settled − evaluation: waking up, serving (loading and unloading the adapter for
`lora`), binding the spec, writing results, comparing with the base.

Target: under 0.5 s per checkpoint (floor 1 s). The watcher looks for new checkpoints every --poll seconds
(default 2, as the command) and sleeps until each one settles, so poll < settle keeps discovery off the clock.

    .venv/bin/python bench/checkpoint_overhead.py [--checkpoints 5] [--records 50] [--settle 2.5]
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
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.vllm_standin import standin_executable  # noqa: E402

from evalsi.training import CheckpointEvaluator, Endpoint, LoRA, ServingStrategy, free_port, signature  # noqa: E402
from evalsi.training._watch import Watcher  # noqa: E402


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


def measure(
    name: str,
    serving: ServingStrategy,
    spec: Path,
    work: Path,
    answers: dict[str, str],
    checkpoints: int,
    settle: float,
    poll: float,
) -> list[tuple[float, float]]:
    out_dir, log_dir = work / f"out-{name}", work / f"logs-{name}"
    evaluator = CheckpointEvaluator([spec], f"bench-{name}", serving, regression=["exact-match"], log_dir=log_dir)
    evaluator.evaluate("base", None)  # the base first, so each step is also compared (as with --regression)
    stop = threading.Event()
    watcher = Watcher(evaluator, out_dir, settle=settle, poll=poll)
    thread = threading.Thread(target=watcher.run, kwargs={"until": stop.is_set}, daemon=True)
    thread.start()
    rows = []
    try:
        for index in range(1, checkpoints + 1):
            newest = write_checkpoint(out_dir / f"checkpoint-{index * 100}", answers)
            result = evaluator.result_path("bench", index * 100)
            deadline = time.time() + settle + 120
            while not (result.exists() and orjson.loads(result.read_bytes()).get("checkpoint")):
                if time.time() > deadline:
                    raise SystemExit(f"{name}: checkpoint-{index * 100} was not evaluated")
                time.sleep(0.01)
            data = orjson.loads(result.read_bytes())
            done = result.stat().st_mtime
            evaluation = float(data["timings"]["wallSeconds"])
            rows.append((done - (newest + settle) - evaluation, evaluation))
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec, answers = write_spec(work, args.records)
        process, base_url = start_standin(work / "vllm", answers)
        try:
            strategies: list[tuple[str, ServingStrategy]] = [
                ("endpoint", Endpoint(base_url, "base")),
                ("lora", LoRA(base_url)),
            ]
            print(
                f"{args.checkpoints} checkpoints x {args.records} records, settle {args.settle:g} s, "
                f"poll {args.poll:g} s; vLLM stand-in, answers at once"
            )
            print(f"{'serving':<10}{'overhead median':>17}{'max':>9}{'evaluation median':>19}{'overhead/eval':>15}")
            for name, serving in strategies:
                rows = measure(name, serving, spec, work, answers, args.checkpoints, args.settle, args.poll)
                overheads = [o for o, _ in rows]
                evaluation = statistics.median(e for _, e in rows)
                overhead = statistics.median(overheads)
                print(
                    f"{name:<10}{overhead:>15.3f} s{max(overheads):>7.3f} s{evaluation:>17.3f} s"
                    f"{overhead / evaluation:>15.2f}"
                )
        finally:
            process.terminate()
            process.wait(10)
    print("target: overhead under 0.5 s per checkpoint (floor 1 s)")


if __name__ == "__main__":
    main()
