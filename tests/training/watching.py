"""What the end-to-end watch tests share: the watcher as its own process, and reading what the vLLM stand-in was
asked (completions per checkpoint, adapter loads, served models) from its request log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson

from tests.helpers.vllm_standin import read_log
from tests.training.conftest import QUESTIONS, RunningVLLM, lora_arguments

SETTLE = 1.0
PROMPT_TO_KEY = {q: f"r{i}" for i, q in enumerate(QUESTIONS)}


def wait_for(condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def watcher(
    tmp_path: Path, vllm: RunningVLLM, spec: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`evalsi checkpoints watch` on ``tmp_path/out`` as its own process (its output in ``watcher.log``)."""
    args = [
        sys.executable,
        "-m",
        "evalsi",
        "checkpoints",
        "watch",
        str(tmp_path / "out"),
        *lora_arguments(spec, tmp_path / "logs", vllm.base_url),
        "--settle",
        str(SETTLE),
        "--poll",
        "0.2",
        "--regression",
        "exact-match:0.2",
        "--stop-file",
        str(tmp_path / "STOP"),
        "--set",
        "target.maxConcurrency=1",
        *extra,
    ]
    log = (tmp_path / "watcher.log").open("ab")
    return subprocess.Popen(
        args, cwd=tmp_path, stdout=log, stderr=log, start_new_session=True, env={**os.environ, **(env or {})}
    )


def completions(vllm: RunningVLLM, since: float = 0.0) -> list[tuple[str, str, float]]:
    """(model, record key, time) of every completion request the stand-in received after ``since``."""
    out = []
    for event in read_log(vllm.log):
        # A request whose body never arrived (the watcher was killed while sending it) was answered with an error.
        if event.get("path") == "/v1/chat/completions" and event["time"] >= since and event["body"].get("messages"):
            prompt = event["body"]["messages"][-1]["content"]
            out.append((event["body"]["model"], PROMPT_TO_KEY[prompt], event["time"]))
    return out


def loads(vllm: RunningVLLM) -> list[tuple[str, float]]:
    """(adapter name, time) of every adapter the stand-in was asked to load."""
    return [(e["body"]["lora_name"], e["time"]) for e in read_log(vllm.log) if e.get("path") == "/v1/load_lora_adapter"]


def complete(path: Path) -> bool:
    return path.exists() and orjson.loads(path.read_bytes()).get("status") == "complete"


def journal_keys(journal: Path) -> set[str]:
    """The record keys a results journal holds (its header line aside, a torn last line ignored)."""
    lines = journal.read_bytes().splitlines()[1:]
    return {orjson.loads(line)["key"] for line in lines if line.strip().endswith(b"}")}


def served_models(vllm: RunningVLLM) -> list[str]:
    return [m["id"] for m in httpx.get(f"{vllm.base_url}/models").json()["data"]]
