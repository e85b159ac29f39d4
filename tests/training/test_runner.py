"""CheckpointRunner: order, one at a time, background vs inline, failures kept and reported, drain on exit."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evalsi.training import CheckpointEvaluationError, CheckpointRunner


@dataclass
class Outcome:
    step: int | None
    regressed: bool = False
    value: float = 0.0

    def log_metrics(self) -> dict[str, float]:
        return {"eval/spec/metric": self.value}


@dataclass
class ReadingEvaluator:
    """Evaluates a checkpoint by reading the number written in it; fails on a missing file, like a real one."""

    delay: float = 0.0
    regress_below: float | None = None
    active: int = 0
    most_active: int = 0
    seen: list[int | None] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def evaluate(self, checkpoint: str | Path, step: int | None) -> Outcome:
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.delay)
            value = float(Path(checkpoint).read_text())
            self.seen.append(step)
            self.threads.add(threading.current_thread().name)
            regressed = self.regress_below is not None and value < self.regress_below
            return Outcome(step, regressed, value)
        finally:
            with self.lock:
                self.active -= 1


def checkpoints(tmp_path: Path, values: dict[int, float]) -> dict[int, Path]:
    out = {}
    for step, value in values.items():
        path = tmp_path / f"step-{step}.txt"
        path.write_text(str(value))
        out[step] = path
    return out


def test_background_evaluations_run_one_at_a_time_in_submission_order(tmp_path: Path) -> None:
    evaluator = ReadingEvaluator(delay=0.02)
    paths = checkpoints(tmp_path, {300: 0.3, 100: 0.1, 200: 0.2})
    started = time.perf_counter()
    with CheckpointRunner(evaluator) as runner:
        for step, path in paths.items():
            runner.submit(path, step)
        submitted = time.perf_counter() - started
    assert evaluator.seen == [300, 100, 200]
    assert evaluator.most_active == 1
    assert evaluator.threads == {"evalsi-checkpoints"}
    assert submitted < 3 * 0.02  # submit returns before the evaluations run
    assert [o.value for _, o in runner.results] == [0.3, 0.1, 0.2]  # type: ignore[attr-defined]


def test_wait_evaluates_inside_submit_on_the_callers_thread(tmp_path: Path) -> None:
    evaluator = ReadingEvaluator()
    paths = checkpoints(tmp_path, {1: 0.5})
    runner = CheckpointRunner(evaluator, wait=True)
    future = runner.submit(paths[1], 1)
    assert future.done() and future.result().value == 0.5  # type: ignore[attr-defined]
    assert evaluator.threads == {threading.current_thread().name}


def test_a_failed_evaluation_is_logged_and_kept_and_the_next_still_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    evaluator = ReadingEvaluator()
    paths = checkpoints(tmp_path, {2: 0.2})
    with caplog.at_level(logging.ERROR, logger="evalsi.training"), CheckpointRunner(evaluator) as runner:
        failed = runner.submit(tmp_path / "missing", 1)
        runner.submit(paths[2], 2)
    assert evaluator.seen == [2]
    assert [f.step for f in runner.failures] == [1]
    assert isinstance(failed.exception(), FileNotFoundError)
    assert "step 1" in caplog.text and "missing" in caplog.text


def test_raise_errors_makes_drain_raise_once_per_failure(tmp_path: Path) -> None:
    runner = CheckpointRunner(ReadingEvaluator(), raise_errors=True)
    runner.submit(tmp_path / "missing", 7)
    with pytest.raises(CheckpointEvaluationError, match="step 7"):
        runner.drain()
    runner.drain()  # reported once
    runner.close()


def test_an_exception_in_training_still_drains_and_keeps_the_training_error(tmp_path: Path) -> None:
    evaluator = ReadingEvaluator(delay=0.05)
    paths = checkpoints(tmp_path, {1: 0.1, 2: 0.2})
    with pytest.raises(KeyboardInterrupt), CheckpointRunner(evaluator, raise_errors=True) as runner:
        runner.submit(paths[1], 1)
        runner.submit(tmp_path / "missing", 2)
        runner.submit(paths[2], 3)
        raise KeyboardInterrupt
    assert evaluator.seen == [1, 3]
    assert len(runner.failures) == 1


def test_regressed_reflects_finished_results(tmp_path: Path) -> None:
    evaluator = ReadingEvaluator(regress_below=0.5)
    paths = checkpoints(tmp_path, {1: 0.9, 2: 0.4})
    runner = CheckpointRunner(evaluator, wait=True)
    runner.submit(paths[1], 1)
    assert not runner.regressed
    runner.submit(paths[2], 2)
    assert runner.regressed
    assert [step for step, _ in runner.new_results(1)] == [2]
