"""``every: N`` in a RunSpec: each spec is evaluated at the steps N divides, and every spec at the base and the
final step, in ``CheckpointRunner`` (what the trainer hooks use), the watcher and ``checkpoints eval``; a step no
spec is due at is not served. The curve copes with specs evaluated at different steps."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.runs._curve import step_files
from evalsi.training import CheckpointEvaluator, CheckpointRunner, Endpoint, ModelRef, Served, Watcher
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import QUESTIONS, answers, write_model, write_spec


class CountingEndpoint(Endpoint):
    """An already served model; remembers each step it was asked to serve."""

    def __init__(self, base_url: str, model: str | None = None) -> None:
        super().__init__(base_url, model)
        self.steps: list[int | None] = []

    @contextlib.contextmanager
    def serve(self, ref: ModelRef) -> Iterator[Served]:
        self.steps.append(ref.step)
        with super().serve(ref) as served:
            yield served


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers=answers(), default="?") as srv:
        yield srv


def settled(folder: Path) -> Path:
    """A model directory whose files are long unchanged."""
    write_model(folder)
    for path in (folder, *folder.iterdir()):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    return folder


def steps_of(logs: Path, spec: str, run: str = "r") -> list[int | None]:
    return list(step_files(logs, run, spec))


def test_the_runner_evaluates_each_spec_at_its_cadence_and_every_spec_at_the_final_step(
    tmp_path: Path, server: OpenAIServer
) -> None:
    specs = [write_spec(tmp_path / "specs", "often", every=10), write_spec(tmp_path / "specs", "rare", every=20)]
    serving = CountingEndpoint(server.base_url, "m")
    evaluator = CheckpointEvaluator(specs, "r", serving, log_dir=tmp_path / "logs")
    with CheckpointRunner(evaluator) as runner:
        futures = {step: runner.submit(settled(tmp_path / f"checkpoint-{step}"), step) for step in (5, 10, 20, 25)}
        skipped = futures[5].result(timeout=60)
    assert serving.steps == [10, 20, 25]  # step 5 is served for no one; 25, the last, owes both specs
    assert steps_of(tmp_path / "logs", "often") == [10, 20, 25]
    assert steps_of(tmp_path / "logs", "rare") == [20, 25]
    assert [step for step, _ in runner.results] == [10, 20, 25]
    assert not skipped.evaluated and skipped.log_metrics() == {}  # type: ignore[attr-defined]
    first, final = runner.results[0][1], runner.results[-1][1]
    assert first.log_metrics() == {"eval/often/exact-match": 1.0}
    assert set(final.log_metrics()) == {"eval/often/exact-match", "eval/rare/exact-match"}
    assert len(server.requests) == 30 * 5  # often at 10, 20, 25; rare at 20, 25


def test_inline_evaluation_and_the_base_follow_the_same_cadence(tmp_path: Path, server: OpenAIServer) -> None:
    serving = CountingEndpoint(server.base_url, "m")
    evaluator = CheckpointEvaluator(write_spec(tmp_path, every=50), "r", serving, log_dir=tmp_path / "logs")
    runner = CheckpointRunner(evaluator, wait=True)
    runner.submit("base-model", None)  # the base: always
    runner.submit(settled(tmp_path / "checkpoint-50"), 50)
    runner.submit(settled(tmp_path / "checkpoint-60"), 60)
    assert serving.steps == [None, 50]
    runner.close()
    assert serving.steps == [None, 50, 60]  # training ended: its last step is the final one
    assert steps_of(tmp_path / "logs", "forgetting") == [None, 50, 60]


def test_a_training_that_failed_has_no_final_step(tmp_path: Path, server: OpenAIServer) -> None:
    serving = CountingEndpoint(server.base_url, "m")
    evaluator = CheckpointEvaluator(write_spec(tmp_path, every=50), "r", serving, log_dir=tmp_path / "logs")
    with pytest.raises(KeyboardInterrupt), CheckpointRunner(evaluator) as runner:
        runner.submit(settled(tmp_path / "checkpoint-50"), 50)
        runner.submit(settled(tmp_path / "checkpoint-60"), 60)
        raise KeyboardInterrupt
    assert serving.steps == [50]


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["checkpoints", *args], terminal_width=200)


def endpoint(spec: Path, logs: Path, server: OpenAIServer, model: str = "m") -> list[str]:
    return ["-f", str(spec), "--training-run", "r", "--serve", "endpoint", "--base-url", server.base_url,
            "--model", model, "--log-dir", str(logs)]  # fmt: skip


def test_watch_once_skips_steps_no_spec_is_due_at_and_ends_on_the_final_one(
    tmp_path: Path, server: OpenAIServer
) -> None:
    spec, logs = write_spec(tmp_path / "specs", every=10), tmp_path / "logs"
    for step in (10, 15, 25):
        settled(tmp_path / "out" / f"checkpoint-{step}")
    result = cli("watch", str(tmp_path / "out"), *endpoint(spec, logs, server), "--once", "--settle", "1")
    assert result.exit_code == 0, result.output
    assert "checkpoint-15: not evaluated: no run spec is due at step 15 (forgetting every 10)" in result.output
    assert steps_of(logs, "forgetting") == [10, 25]  # 25 is the highest there: the final step
    assert len(server.requests) == 60  # checkpoint-15 was never served


def test_a_continuous_watch_knows_the_final_step_from_the_trainer_state(tmp_path: Path, server: OpenAIServer) -> None:
    serving = CountingEndpoint(server.base_url, "m")
    evaluator = CheckpointEvaluator(write_spec(tmp_path / "specs", every=10), "r", serving, log_dir=tmp_path / "logs")
    for step in (10, 12, 15):
        settled(tmp_path / "out" / f"checkpoint-{step}")
    (tmp_path / "out" / "checkpoint-15" / "trainer_state.json").write_text(
        json.dumps({"global_step": 15, "max_steps": 15})
    )
    watcher = Watcher(evaluator, tmp_path / "out", settle=0, poll=0.05)
    report = watcher.run(until=lambda: len(watcher.report.evaluated) + len(watcher.report.skipped) >= 3)
    assert serving.steps == [10, 15]
    assert [c.step for c in report.skipped] == [12]
    again = Watcher(evaluator, tmp_path / "out", settle=0, once=True).run()  # restarted: nothing is left to do
    assert serving.steps == [10, 15] and not again.evaluated and [c.step for c in again.skipped] == [10, 12, 15]


def test_eval_honours_the_cadence_and_final_evaluates_every_spec(tmp_path: Path, server: OpenAIServer) -> None:
    spec, logs = write_spec(tmp_path / "specs", every=10), tmp_path / "logs"
    checkpoint = settled(tmp_path / "checkpoint-15")
    skipped = cli("eval", str(checkpoint), "--step", "15", *endpoint(spec, logs, server))
    assert skipped.exit_code == 0, skipped.output
    assert "step 15: not evaluated: no run spec is due at this step (forgetting every 10)" in skipped.output
    assert not server.requests and not logs.exists()
    final = cli("eval", str(checkpoint), "--step", "15", "--final", *endpoint(spec, logs, server), "--json")
    assert final.exit_code == 0, final.output
    assert orjson.loads(final.stdout)["specs"][0]["metrics"]["exact-match"]["mean"] == 1.0
    assert steps_of(logs, "forgetting") == [15]


def test_the_curve_of_each_spec_has_its_own_steps_and_its_own_latest(tmp_path: Path) -> None:
    often, rare = write_spec(tmp_path / "specs", "often", every=10), write_spec(tmp_path / "specs", "rare", every=20)
    logs = tmp_path / "logs"
    right = dict(QUESTIONS)

    def answer(prompt: str, body: dict[str, Any]) -> str:
        return "wrong" if body["model"] == "bad" else right[prompt]

    rules = ["--regression", "exact-match:0.1"]
    with OpenAIServer(answers={q: answer for q in QUESTIONS}, default="?") as server:
        for step, model in (("base", "good"), ("10", "good"), ("20", "bad"), ("30", "good")):
            location = "base-model" if step == "base" else str(settled(tmp_path / f"checkpoint-{step}"))
            args = endpoint(often, logs, server, model)
            result = cli("eval", location, "--step", step, *args, "-f", str(rare), *rules, "-q")
            assert result.exit_code == (3 if step == "20" else 0), result.output
    curve = cli("curve", "-f", str(often), "-f", str(rare), "--training-run", "r", "--log-dir", str(logs), *rules)
    data = orjson.loads(cli("curve", "-f", str(often), "-f", str(rare), "--training-run", "r", "--log-dir", str(logs),
                            "--json", *rules).stdout)  # fmt: skip
    assert [p["label"] for p in data[0]["points"]] == ["base", "10", "20", "30"]
    assert [p["label"] for p in data[1]["points"]] == ["base", "20"]
    assert (data[0]["latest"], data[0]["failed"]) == ("30", False)
    assert (data[1]["latest"], data[1]["failed"]) == ("20", True)  # rare's latest evaluation regressed
    assert curve.exit_code == 3, curve.output
    rows = [line.split() for line in curve.stdout.splitlines()]
    assert ["30", "1.000", "(+0.000)", "ok"] in rows and ["20", "0.000", "(-1.000!)", "regressed"] in rows
