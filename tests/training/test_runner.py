"""CheckpointRunner: background evaluation in submission order, wait mode, failures kept from the trainer."""

from __future__ import annotations

from pathlib import Path

from evalsi.training import CheckpointEvaluator, CheckpointRunner, Endpoint
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import answers, write_model, write_spec


def test_runner_evaluates_in_order_in_the_background_and_flags_regressions(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    with OpenAIServer(answers=answers(), default="?") as server:
        evaluator = CheckpointEvaluator(spec, "t", Endpoint(server.base_url, "m"), regression=["exact-match:0.1"],
                                        log_dir=tmp_path / "logs")
        evaluator.evaluate("base", None)
        runner = CheckpointRunner(evaluator)
        for step in (10, 20):
            runner.submit(write_model(tmp_path / f"checkpoint-{step}"), step)
        assert not runner.regressed
        server.answers = answers(wrong=15)
        runner.submit(write_model(tmp_path / "checkpoint-30"), 30)
        done = runner.drain(timeout=120)
    assert [d.step for d in done] == [10, 20, 30] and all(d.error is None for d in done)
    assert runner.regressed and done[2].result is not None and done[2].result.regressed


def test_wait_mode_and_failures_do_not_raise(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    evaluator = CheckpointEvaluator(spec, "t", Endpoint("http://127.0.0.1:9/v1", "m"), log_dir=tmp_path / "logs",
                                    overrides=["target.maxRetries=0"])
    runner = CheckpointRunner(evaluator, wait=True)
    item = runner.submit(write_model(tmp_path / "checkpoint-1"), 1)  # nothing listens: every record fails
    assert item in runner.done and item.result is not None and not item.result.complete

    class Broken:
        def evaluate(self, checkpoint: str | Path, step: int | None = None) -> object:
            raise RuntimeError("serving broke")

    background = CheckpointRunner(Broken())  # type: ignore[arg-type]
    background.submit(tmp_path, 2)
    [failed] = background.drain(timeout=30)
    assert failed.error == "RuntimeError: serving broke" and failed.result is None
