"""`evalsi checkpoints watch mlflow:<model>` as a real process against a real tracking server and the vLLM
stand-in (LoRA): each version evaluated once from its downloaded files, a version registered while watching
picked up, nothing evaluated twice after a restart; `eval mlflow:<model>/<version>`; errors on the command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training._vllm import stop_process
from tests.helpers.vllm_standin import read_log, standin_executable
from tests.integrations.mlflow.conftest import register
from tests.training.conftest import RunningVLLM, answers, lora_arguments, start_standin, write_adapter, write_model
from tests.training.conftest import write_spec as write_spec_file


@pytest.fixture
def vllm(tmp_path: Path) -> Iterator[RunningVLLM]:
    running = start_standin(
        standin_executable(tmp_path / "bin"), write_model(tmp_path / "base-model", answers()), tmp_path / "vllm.log"
    )
    try:
        yield running
    finally:
        stop_process(running.process, 5)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def complete(path: Path) -> bool:
    return path.exists() and orjson.loads(path.read_bytes()).get("status") == "complete"


def exact_match(path: Path) -> float:
    return float(orjson.loads(path.read_bytes())["summary"]["metrics"]["exact-match"]["mean"])


def loads(vllm: RunningVLLM) -> list[tuple[str, str]]:
    """(adapter name, adapter path) of every adapter the stand-in was asked to load."""
    return [
        (e["body"]["lora_name"], e["body"]["lora_path"])
        for e in read_log(vllm.log)
        if e.get("path") == "/v1/load_lora_adapter"
    ]


def watch(model: str, spec: Path, tmp_path: Path, vllm: RunningVLLM, *extra: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "evalsi", "checkpoints", "watch", f"mlflow:{model}"]
    args += [*lora_arguments(spec, tmp_path / "logs", vllm.base_url), "--poll", "0.2", "-q", *extra]
    log = (tmp_path / "watcher.log").open("ab")
    return subprocess.Popen(args, cwd=tmp_path, stdout=log, stderr=log, start_new_session=True, env=os.environ.copy())


def test_watch_picks_up_each_version_once(tracking_uri: str, tmp_path: Path, vllm: RunningVLLM) -> None:
    model = f"grpo-{uuid.uuid4().hex[:8]}"
    register(tracking_uri, model, write_adapter(tmp_path / "v1", answers()), {"step": "100"})
    register(tracking_uri, model, write_adapter(tmp_path / "v2", answers(wrong=3)), {"step": "200"})
    spec = write_spec_file(tmp_path / "specs")
    results = tmp_path / "logs" / "grpo-1" / "forgetting"
    watcher = watch(model, spec, tmp_path, vllm)
    try:
        wait_for(lambda: complete(results / "step-100.json") and complete(results / "step-200.json"), "steps 100, 200")
        register(tracking_uri, model, write_adapter(tmp_path / "v3", answers(wrong=6)), {"step": "300"})
        wait_for(lambda: complete(results / "step-300.json"), "the version registered while watching")
    finally:
        watcher.send_signal(signal.SIGTERM)
        code = watcher.wait(30)
    assert code == 0, (tmp_path / "watcher.log").read_text()
    # Each version's own downloaded files were served: its answers give its score.
    assert [exact_match(results / f"step-{s}.json") for s in (100, 200, 300)] == [1.0, 0.9, 0.8]
    loaded = loads(vllm)
    assert sorted(name.split("-")[3] for name, _ in loaded) == ["100", "200", "300"]  # each version once
    downloads = (tmp_path / "logs" / "downloads" / "grpo-1").resolve()
    assert all(Path(path).is_relative_to(downloads) for _, path in loaded)

    again = watch(model, spec, tmp_path, vllm, "--once")
    assert again.wait(120) == 0, (tmp_path / "watcher.log").read_text()
    assert loads(vllm) == loaded  # a restarted watcher evaluates nothing twice


def test_eval_one_version(tracking_uri: str, tmp_path: Path, vllm: RunningVLLM) -> None:
    model = f"one-{uuid.uuid4().hex[:8]}"
    register(tracking_uri, model, write_adapter(tmp_path / "v1", answers()), {"step": "100"})
    register(tracking_uri, model, write_adapter(tmp_path / "v2", answers(wrong=15)))
    spec = write_spec_file(tmp_path / "specs")
    args = lora_arguments(spec, tmp_path / "logs", vllm.base_url)
    cli = CliRunner()
    result = cli.invoke(app, ["checkpoints", "eval", f"mlflow:{model}/2", "--step", "2", *args, "-q"])
    assert result.exit_code == 0, result.output
    assert exact_match(tmp_path / "logs" / "grpo-1" / "forgetting" / "step-2.json") == 0.5

    wrong_step = cli.invoke(app, ["checkpoints", "eval", f"mlflow:{model}/1", "--step", "300", *args, "-q"])
    assert wrong_step.exit_code == 2 and "--step 300 but version 1 is tagged step 100" in wrong_step.stderr
    missing = cli.invoke(app, ["checkpoints", "eval", f"mlflow:{model}/9", "--step", "9", *args, "-q"])
    assert missing.exit_code == 2 and f"model {model!r} has no version 9 (versions: 1, 2)" in missing.stderr
    assert not (tmp_path / "logs" / "grpo-1" / "forgetting" / "step-300.json").exists()


def test_watch_errors(tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write_spec_file(tmp_path / "specs")
    args = [*lora_arguments(spec, tmp_path / "logs", "http://127.0.0.1:9/v1"), "--once", "-q"]
    cli = CliRunner()
    unknown = cli.invoke(app, ["checkpoints", "watch", "mlflow:no-such-model", *args])
    assert unknown.exit_code == 2 and "no registered model named 'no-such-model'" in unknown.stderr

    model = f"tags-{uuid.uuid4().hex[:8]}"
    register(tracking_uri, model, write_adapter(tmp_path / "v1", answers()), {"step": "1e3"})
    bad = cli.invoke(app, ["checkpoints", "watch", f"mlflow:{model}", *args])
    assert bad.exit_code == 2 and "version 1 has step tag '1e3'" in bad.stderr, bad.output

    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    unset = cli.invoke(app, ["checkpoints", "watch", f"mlflow:{model}", *args])
    assert unset.exit_code == 2 and "set MLFLOW_TRACKING_URI" in unset.stderr
    assert "Traceback" not in unknown.output + bad.output + unset.output
