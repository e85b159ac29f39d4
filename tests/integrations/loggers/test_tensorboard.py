"""``--log-to tensorboard`` and ``loggers: {tensorboard: ...}``: event files written by tensorboardX, read back
with TensorBoard's own reader; each metric with its interval at the checkpoint's step, the results file linked,
the per-record table beside them."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evalsi.runs._loggers import LoggedRun, log_step, make_loggers
from evalsi.specs import LoggersSpec, TensorBoardLoggerSpec
from evalsi.stats import Estimate
from tests.helpers.openai_server import OpenAIServer
from tests.integrations.loggers.conftest import add_loggers, endpoint, invoke, settled
from tests.training.conftest import answers, write_spec


def events(folder: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def scalars(accumulator: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    """(step, value) of a scalar, values rounded to 6 places (event files hold 32-bit floats)."""
    return [(e.step, round(e.value, 6)) for e in accumulator.Scalars(tag)]


def text(accumulator: EventAccumulator, tag: str) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in accumulator.Tensors(f"{tag}/text_summary")]


def summary(path: Path) -> dict[str, Any]:
    metrics: dict[str, Any] = orjson.loads(path.read_bytes())["summary"]["metrics"]["exact-match"]
    return metrics


def test_evalsi_run_logs_its_metrics_table_and_results_file(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.answers = answers(wrong=6)  # type: ignore[assignment]  # 24 of 30 right: an interval around 0.8
    spec = write_spec(tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "-f", str(spec), "--set", f"target.baseUrl={server.base_url}", "--set",
                    "target.model=m", "-o", "out.json", "--log-to", "tensorboard", "-q")  # fmt: skip
    assert result.exit_code == 0, result.output
    board = events(tmp_path / "evalsi-logs" / "tensorboard" / "forgetting")  # the default dir, one run per spec
    expected = summary(tmp_path / "out.json")
    assert scalars(board, "eval/forgetting/exact-match") == [(0, 0.8)]
    for bound in ("ci_low", "ci_high"):
        [(step, value)] = scalars(board, f"eval/forgetting/exact-match/{bound}")
        assert step == 0 and value == pytest.approx(expected[bound], abs=1e-6)
    assert expected["ci_low"] < 0.8 < expected["ci_high"]
    assert scalars(board, "eval/step") == [(0, 0.0)]
    [(step, link)] = text(board, "eval/forgetting/results")
    assert step == 0 and (tmp_path / "out.json").as_uri() in link
    [(_, table)] = text(board, "eval/forgetting/records")
    assert table.startswith("30 records") and "| key | id | prompt | reference | completion | exact-match |" in table
    rows = list(csv.DictReader((tmp_path / "evalsi-logs/tensorboard/forgetting/records/forgetting/step-0.csv").open()))
    assert len(rows) == 30 and sum(float(r["exact-match"]) for r in rows) == 24
    completions = {r["id"]: r["completion"] for r in rows}
    assert completions["r0"] == "wrong" and completions["r29"] == "a29"  # the first six are answered wrong


def test_checkpoints_log_each_step_at_its_number_into_one_training_run(server: OpenAIServer, tmp_path: Path) -> None:
    spec = add_loggers(write_spec(tmp_path / "specs"), {"tensorboard": {"dir": "../tb"}})  # relative to the spec
    logs = tmp_path / "logs"
    base = invoke("checkpoints", "eval", "base-model", "--step", "base", *endpoint(spec, logs, server))
    assert base.exit_code == 0, base.output
    server.answers = answers(wrong=3)  # type: ignore[assignment]
    settled(tmp_path / "out" / "checkpoint-10")
    settled(tmp_path / "out" / "checkpoint-20")
    watched = invoke("checkpoints", "watch", str(tmp_path / "out"), *endpoint(spec, logs, server), "--once")
    assert watched.exit_code == 0, watched.output
    board = events(tmp_path / "tb" / "r")  # one TensorBoard run: the training run
    assert scalars(board, "eval/forgetting/exact-match") == [(0, 1.0), (10, 0.9), (20, 0.9)]
    assert [s for s, _ in scalars(board, "eval/forgetting/exact-match/ci_low")] == [0, 10, 20]
    assert scalars(board, "eval/step") == [(0, 0.0), (10, 10.0), (20, 20.0)]
    links = text(board, "eval/forgetting/results")
    assert [step for step, _ in links] == [0, 10, 20]
    assert (logs / "r" / "forgetting" / "step-20.json").as_uri() in links[-1][1]
    table = tmp_path / "tb" / "r" / "records" / "forgetting" / "step-10.csv"
    assert sum(float(r["exact-match"]) for r in csv.DictReader(table.open())) == 27


def test_log_to_and_the_spec_section_name_one_logger_once(tmp_path: Path) -> None:
    section = LoggersSpec(tensorboard=TensorBoardLoggerSpec(dir="tb"))
    loggers = make_loggers(["tensorboard"], [(section, tmp_path, "a.yaml"), (section, tmp_path, "b.yaml")])
    assert [logger.name for logger in loggers] == ["tensorboard"]
    assert loggers[0].dir == tmp_path / "tb"  # type: ignore[attr-defined]


def test_a_directory_that_cannot_be_written_fails_the_command_after_saving_results(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = add_loggers(write_spec(tmp_path / "specs"), {"tensorboard": {"dir": "blocked"}})
    (tmp_path / "specs" / "blocked").write_text("a file where the log directory would go")
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "-f", str(spec), "--set", f"target.baseUrl={server.base_url}", "--set",
                    "target.model=m", "-o", "out.json", "-q")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "the results are saved, but logging them failed: tensorboard" in result.output
    assert json.loads((tmp_path / "out.json").read_text())["status"] == "complete"


def test_steps_logged_within_one_second_are_all_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)  # every event file is opened in the same second
    [logger] = make_loggers(["tensorboard"], [(LoggersSpec(tensorboard=TensorBoardLoggerSpec(dir="tb")), tmp_path, "")])
    for step in (10, 20, 100):
        estimate = Estimate(step / 1000, 0.01, step / 1000 - 0.02, step / 1000 + 0.02, 30, 30)
        log_step([logger], "r", step, [LoggedRun("s", {"m": estimate}, tmp_path / "s.json")])
    assert scalars(events(tmp_path / "tb" / "r"), "eval/s/m") == [(10, 0.01), (20, 0.02), (100, 0.1)]
