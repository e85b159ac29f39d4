"""Fixtures for checkpoint tests: model directories written on disk, and the vLLM stand-in as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from evalsi.training._vllm import free_port, stop_process
from tests.helpers.vllm_standin import standin_executable


@pytest.fixture(autouse=True)
def workdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test here runs from an unrelated working directory: no path may depend on where evalsi started."""
    directory = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(directory)
    return directory


def write_model(folder: Path, answers: dict[str, str] | None = None, *, weights: bool = True) -> Path:
    """A full-weights model directory the stand-in serves (config, weights, answers)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "standin"}))
    (folder / "answers.json").write_text(json.dumps(answers or {}))
    if weights:
        (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def write_adapter(folder: Path, answers: dict[str, str] | None = None) -> Path:
    """A LoRA adapter directory (adapter config, weights, answers)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": "base"}))
    (folder / "answers.json").write_text(json.dumps(answers or {}))
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    return folder


@pytest.fixture
def vllm_bin(tmp_path: Path) -> Path:
    return standin_executable(tmp_path / "bin")


@dataclass
class RunningVLLM:
    """A stand-in vLLM serving a base model with runtime LoRA updates on."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def start_standin(vllm_bin: Path, model: Path, log: Path, *extra: str, lora: bool = True) -> RunningVLLM:
    port = free_port()
    env = {**os.environ, "VLLM_STANDIN_LOG": str(log)}
    if lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    args = [
        str(vllm_bin),
        "serve",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        "base",
        *(["--enable-lora"] if lora else []),
        *extra,
    ]
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    with httpx.Client() as client:
        for _ in range(400):
            try:
                if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return RunningVLLM(process, port, log)
            except httpx.TransportError:
                pass
            if process.poll() is not None:
                raise RuntimeError(f"stand-in exited with {process.returncode}")
            time.sleep(0.025)
    stop_process(process, 2)
    raise RuntimeError("stand-in did not become healthy")


@pytest.fixture
def lora_vllm(tmp_path: Path, vllm_bin: Path) -> Iterator[RunningVLLM]:
    base = write_model(tmp_path / "base-model", {**answers(), "2+2?": "5", "*": "?"})  # the base knows every answer
    running = start_standin(vllm_bin, base, tmp_path / "standin.log")
    try:
        yield running
    finally:
        stop_process(running.process, 5)


@pytest.fixture
def slow_vllm(tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningVLLM]:
    """A stand-in vLLM whose answers take 50 ms, so an evaluation lasts long enough to be killed halfway."""
    monkeypatch.setenv("VLLM_STANDIN_DELAY", "0.05")
    running = start_standin(vllm_bin, write_model(tmp_path / "base-model", answers()), tmp_path / "standin.log")
    try:
        yield running
    finally:
        stop_process(running.process, 5)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real evalsi server process on SQLite, and a token of project `training` with evaluations.run."""
    # Imported here: integration sessions that share these helpers install no server extra.
    from tests.server.harness import ServerProcess, make_token, write_config

    directory = tmp_path / "server"
    directory.mkdir()
    config = write_config(directory, {"database": {"url": "sqlite:///server.db"}})
    token = make_token(f"sqlite:///{directory / 'server.db'}", "training", ["evaluations.run"])
    with ServerProcess(config) as process:
        yield process.http, token


QUESTIONS = {f"q{i}": f"a{i}" for i in range(30)}
"""The dataset of the checkpoint tests: 30 questions, each with one right answer."""


def answers(wrong: int = 0) -> dict[str, str]:
    """A model's answers: right except the first ``wrong`` questions."""
    return {q: ("wrong" if i < wrong else a) for i, (q, a) in enumerate(QUESTIONS.items())}


def write_spec(folder: Path, name: str = "forgetting", gate_min: float | None = None, every: int | None = None) -> Path:
    """A RunSpec over the 30 questions, exact-match scored; the target is filled in by the serving strategy."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text(
        "".join(
            json.dumps({"id": f"r{i}", "prompt": q, "answer": a}) + "\n" for i, (q, a) in enumerate(QUESTIONS.items())
        )
    )
    spec: dict[str, object] = {
        "target": {
            "baseUrl": "http://127.0.0.1:9/v1",
            "model": "placeholder",
            "retryBackoff": 0.01,
            "maxRetries": 1,
            "timeout": 10,
        },
        "dataset": {"path": f"{name}.jsonl"},
        "evaluators": [{"ref": "exact-match"}],
    }
    if gate_min is not None:
        spec["gates"] = [{"metric": "exact-match", "min": gate_min}]
    if every is not None:
        spec["every"] = every
    document = {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec", "metadata": {"name": name}, "spec": spec}
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(document))
    return path


def lora_arguments(spec: Path, logs: Path, base_url: str) -> list[str]:
    """The options the ``evalsi checkpoints`` tests share: the spec, the training run, lora serving, the log dir."""
    return [
        "-f",
        str(spec),
        "--training-run",
        "grpo-1",
        "--serve",
        "lora",
        "--base-url",
        base_url,
        "--log-dir",
        str(logs),
    ]
