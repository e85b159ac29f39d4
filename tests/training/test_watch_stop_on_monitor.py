"""`evalsi checkpoints watch --stop-on monitor:<signal>`: a monitor the trainer logged as fired in a checkpoint's
``trainer_state.json`` writes the stop file, before a held-out regression could show."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training._monitoring import fired_in_trainer_state
from tests.training.conftest import answers, write_model, write_spec


def _trainer_state(folder: Path, step: int, fired: float) -> None:
    history = [
        {"step": step - 1, "loss": 0.1, "monitor/length_drift": 1.1, "monitor/length_drift/fired": 0.0},
        {"step": step, "loss": 0.1, "monitor/length_drift": 1.7, "monitor/length_drift/fired": fired},
    ]
    state = {"global_step": step, "max_steps": 100, "log_history": history}
    (folder / "trainer_state.json").write_text(json.dumps(state))


def _watch(tmp_path: Path, vllm_bin: Path, *extra: str) -> tuple[int, str]:
    spec = write_spec(tmp_path / "specs")
    result = CliRunner().invoke(
        app,
        [
            "checkpoints",
            "watch",
            str(tmp_path / "out"),
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
            "1",
            "--once",
            "-q",
            *extra,
        ],
    )
    return result.exit_code, result.output


def test_a_fired_monitor_in_the_trainer_state_writes_the_stop_file(
    tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_STANDIN_LOG", str(tmp_path / "standin.log"))
    out = tmp_path / "out"
    _trainer_state(write_model(out / "global_step_10", answers()), 10, fired=0.0)
    _trainer_state(write_model(out / "global_step_20", answers()), 20, fired=1.0)
    old = time.time() - 60
    for path in out.rglob("*"):
        os.utime(path, (old, old))
    stop = tmp_path / "STOP"
    code, output = _watch(tmp_path, vllm_bin, "--stop-file", str(stop), "--stop-on", "monitor:length_drift")
    assert code == 0, output  # nothing regressed: the held-out results did not move
    body = json.loads(stop.read_text())
    assert body["reason"] == "monitor" and body["monitor"] == "length_drift"
    assert body["step"] == 20 and body["value"] == pytest.approx(1.7)


def test_stop_on_is_checked_before_anything_runs(tmp_path: Path, vllm_bin: Path) -> None:
    (tmp_path / "out").mkdir()
    code, output = _watch(tmp_path, vllm_bin, "--stop-file", "STOP", "--stop-on", "monitor:lenght")
    assert code == 2 and "monitor:length_drift" in output
    code, output = _watch(tmp_path, vllm_bin, "--stop-on", "monitor:length_drift")
    assert code == 2 and "--stop-file" in output


def test_fired_in_trainer_state_reads_the_first_fired_entry(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    assert fired_in_trainer_state(path, ["length_drift"]) is None  # missing
    _trainer_state(tmp_path, 7, fired=0.0)
    assert fired_in_trainer_state(path, ["length_drift"]) is None
    _trainer_state(tmp_path, 7, fired=0.5)  # averaged over a logging step: fired in some batch of it
    signal = fired_in_trainer_state(path, ["zero_variance_groups", "length_drift"])
    assert signal is not None and signal.name == "length_drift" and "step 7" in signal.detail
    path.write_text("{not json")
    assert fired_in_trainer_state(path, ["length_drift"]) is None
