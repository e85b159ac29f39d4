"""End to end: a training run writes checkpoints over time; `evalsi checkpoints watch` (a real process) evaluates
each one against the vLLM stand-in once it settles, finds the planted regression, writes the stop file, is
killed mid-evaluation and restarted without evaluating anything twice; then `curve` shows it and exits 3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training import stop_process
from tests.helpers.vllm_standin import read_log
from tests.training.conftest import (
    QUESTIONS,
    RunningVLLM,
    answers,
    lora_arguments,
    start_standin,
    write_adapter,
    write_model,
    write_spec,
)

SETTLE = 1.0
PROMPT_TO_KEY = {q: f"r{i}" for i, q in enumerate(QUESTIONS)}


def wait_for(condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def slow_vllm(tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningVLLM]:
    """A stand-in vLLM whose answers take 50 ms, so an evaluation lasts long enough to be killed halfway."""
    monkeypatch.setenv("VLLM_STANDIN_DELAY", "0.05")
    running = start_standin(vllm_bin, write_model(tmp_path / "base-model", answers()), tmp_path / "standin.log")
    try:
        yield running
    finally:
        stop_process(running.process, 5)


def watcher(tmp_path: Path, vllm: RunningVLLM, spec: Path) -> subprocess.Popen[bytes]:
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
    ]
    log = (tmp_path / "watcher.log").open("ab")
    return subprocess.Popen(args, cwd=tmp_path, stdout=log, stderr=log, start_new_session=True)


def completions(vllm: RunningVLLM, since: float = 0.0) -> list[tuple[str, str, float]]:
    """(model, record key, time) of every completion request the stand-in received after ``since``."""
    out = []
    for event in read_log(vllm.log):
        if event.get("path") == "/v1/chat/completions" and event["time"] >= since:
            prompt = event["body"]["messages"][-1]["content"]
            out.append((event["body"]["model"], PROMPT_TO_KEY[prompt], event["time"]))
    return out


def loads(vllm: RunningVLLM) -> list[tuple[str, float]]:
    return [(e["body"]["lora_name"], e["time"]) for e in read_log(vllm.log) if e.get("path") == "/v1/load_lora_adapter"]


def complete(path: Path) -> bool:
    return path.exists() and orjson.loads(path.read_bytes()).get("status") == "complete"


def test_watch_evaluates_each_checkpoint_once_through_kill_and_restart(tmp_path: Path, slow_vllm: RunningVLLM) -> None:
    spec = write_spec(tmp_path / "specs")
    results = tmp_path / "logs" / "grpo-1" / "forgetting"
    cli = CliRunner()
    base = cli.invoke(
        app,
        [
            "checkpoints",
            "eval",
            "base",
            "--step",
            "base",
            "-f",
            str(spec),
            "--training-run",
            "grpo-1",
            "--serve",
            "lora",
            "--base-url",
            slow_vllm.base_url,
            "--log-dir",
            str(tmp_path / "logs"),
            "-q",
            "--set",
            "target.maxConcurrency=4",
        ],
    )
    assert base.exit_code == 0, base.output
    out = tmp_path / "out"
    write_adapter(out / "checkpoint-100", answers(wrong=1))
    first = watcher(tmp_path, slow_vllm, spec)
    try:
        # A half-written checkpoint (no adapter weights yet) must wait, whatever its age.
        half = out / "checkpoint-200"
        half.mkdir(parents=True)
        (half / "adapter_config.json").write_text(json.dumps({"r": 8}))
        (half / "answers.json").write_text(json.dumps(answers(wrong=5)))
        wait_for(lambda: complete(results / "step-100.json"), what="step 100")
        time.sleep(SETTLE + 0.5)
        assert not (results / "step-200.json").exists()
        assert all(not name.startswith("grpo-1-step-200") for name, _ in loads(slow_vllm))
        (half / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        finished_writing = time.time()
        wait_for(lambda: complete(results / "step-200.json"), what="step 200")
        loaded_200 = next(t for name, t in loads(slow_vllm) if name.startswith("grpo-1-step-200"))
        assert loaded_200 - finished_writing >= SETTLE - 0.05  # the settle time was respected

        # The planted regression; the watcher is killed while it evaluates it.
        write_adapter(out / "checkpoint-300", answers(wrong=12))
        journal = results / "step-300.json.journal"
        wait_for(lambda: journal.exists() and len(journal.read_bytes().splitlines()) >= 6, what="step 300 underway")
        first.kill()
        first.wait(10)
        killed_at = time.time()
    finally:
        if first.poll() is None:
            first.kill()
    scored_before_kill = {
        json.loads(line)["key"] for line in journal.read_bytes().splitlines()[1:] if line.strip().endswith(b"}")
    }
    assert 5 <= len(scored_before_kill) < 30
    assert not (tmp_path / "STOP").exists()

    second = watcher(tmp_path, slow_vllm, spec)
    try:
        wait_for(lambda: complete(results / "step-300.json"), what="step 300 after the restart")
        wait_for(lambda: (tmp_path / "STOP").exists(), what="the stop file")
    finally:
        second.send_signal(signal.SIGTERM)
        code = second.wait(20)
    assert code == 3, (tmp_path / "watcher.log").read_text()

    after = completions(slow_vllm, since=killed_at)
    assert all(model.startswith("grpo-1-step-300") for model, _, _ in after)  # 100 and 200 were not redone
    assert not {key for _, key, _ in after} & scored_before_kill  # nor were step 300's scored records
    every = completions(slow_vllm)
    for step in ("100", "200"):
        keys = [key for model, key, _ in every if model.startswith(f"grpo-1-step-{step}-")]
        assert sorted(keys) == sorted(PROMPT_TO_KEY.values())  # each record exactly once
    stop = json.loads((tmp_path / "STOP").read_text())
    assert stop["step"] == 300 and stop["regressions"] == ["exact-match:0.2"]
    assert not any(name.startswith("grpo-1") for name in _served_models(slow_vllm))  # every adapter unloaded

    html = tmp_path / "curve.html"
    curve = cli.invoke(
        app,
        [
            "checkpoints",
            "curve",
            "-f",
            str(spec),
            "--training-run",
            "grpo-1",
            "--log-dir",
            str(tmp_path / "logs"),
            "--regression",
            "exact-match:0.2",
            "--plot",
            str(html),
        ],
    )
    assert curve.exit_code == 3, curve.output
    rows = [line.split() for line in curve.stdout.splitlines()]
    assert ["300", "0.600", "(-0.400!)", "regressed"] in rows and ["200", "0.833", "(-0.167*)", "ok"] in rows
    assert "class='regression'" in html.read_text()


def _served_models(vllm: RunningVLLM) -> list[str]:
    import httpx

    return [m["id"] for m in httpx.get(f"{vllm.base_url}/models").json()["data"]]


def test_watch_once_with_vllm_serve_starts_and_stops_a_server_per_checkpoint(
    tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "standin.log"
    monkeypatch.setenv("VLLM_STANDIN_LOG", str(log))
    spec = write_spec(tmp_path / "specs")
    out = tmp_path / "out"
    write_model(out / "global_step_10", answers())
    write_model(out / "global_step_20", answers(wrong=2))
    write_model(out / "global_step_30", weights=False)  # never finished: reported, not waited for
    old = time.time() - 60
    for path in out.rglob("*"):
        os.utime(path, (old, old))
    result = CliRunner().invoke(
        app,
        [
            "checkpoints",
            "watch",
            str(out),
            "-f",
            str(spec),
            "--training-run",
            "v",
            "--serve",
            "vllm",
            "--vllm-bin",
            str(vllm_bin),
            "--log-dir",
            str(tmp_path / "logs"),
            "--settle",
            "5",
            "--once",
            "-q",
        ],
    )
    assert result.exit_code == 1, result.output  # step 30 holds no model
    starts = [e for e in read_log(log) if e["event"] == "start"]
    assert [e["argv"][1] for e in starts] == [str(out / "global_step_10"), str(out / "global_step_20")]
    stops = {e["pid"] for e in read_log(log) if e["event"] == "stop"}
    assert {e["pid"] for e in starts} == stops
    for pid in stops:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    files = sorted(p.name for p in (tmp_path / "logs" / "v" / "forgetting").iterdir())
    assert files == ["step-10.json", "step-20.json"]
