"""Small evaluators registered for the trainer-adapter tests: one counts its calls, one errors on demand, one
reads test cases from the rollout's metadata, one blocks until released."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import ClassVar

import evalsi.evaluators
from evalsi.evaluators import Evaluator, NoParams, Score, ScoreContext
from evalsi.records import Record


@evalsi.evaluators.register
class CountingLength(Evaluator[NoParams]):
    """The completion's length in characters; records every batch it is asked to score."""

    name = "test-adapters-length"
    summary = "Length of the completion (test evaluator that counts its calls)."
    reads = ("completion",)
    batches: ClassVar[list[int]] = []

    def score_batch(self, records: Sequence[Record], params: NoParams, ctx: ScoreContext) -> list[Score]:
        type(self).batches.append(len(records))
        return [Score.ok(float(len(r.completion_text))) for r in records]


@evalsi.evaluators.register
class Flaky(Evaluator[NoParams]):
    """Errors on completions containing ``boom``, else passes."""

    name = "test-adapters-flaky"
    summary = "Errors when the completion says boom (test evaluator)."
    reads = ("completion",)

    def score(self, record: Record, params: NoParams, ctx: ScoreContext) -> Score:
        if "boom" in record.completion_text:
            return Score.error("the completion said boom")
        return Score.ok(True)


@evalsi.evaluators.register
class InTests(Evaluator[NoParams]):
    """Pass when the completion is one of ``metadata.tests``; skipped without tests."""

    name = "test-adapters-in-tests"
    summary = "The completion is one of the rollout's test cases (test evaluator)."
    reads = ("completion", "metadata.tests")

    def score(self, record: Record, params: NoParams, ctx: ScoreContext) -> Score:
        tests = record.metadata.get("tests")
        if not tests:
            return Score.skipped("no tests")
        if not isinstance(tests, list):
            return Score.error(f"tests must be a list, got {type(tests).__name__}")
        return Score.ok(record.completion_text in tests)


@evalsi.evaluators.register
class Gate(Evaluator[NoParams]):
    """Blocks each batch until ``release`` is set, after setting ``entered``; records batch sizes."""

    name = "test-adapters-gate"
    summary = "Waits for the test to release it (test evaluator)."
    reads = ("completion",)
    entered: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()
    batches: ClassVar[list[int]] = []

    def score_batch(self, records: Sequence[Record], params: NoParams, ctx: ScoreContext) -> list[Score]:
        type(self).batches.append(len(records))
        type(self).entered.set()
        if not type(self).release.wait(timeout=30):
            return [Score.error("never released")] * len(records)
        return [Score.ok(1.0) for _ in records]

    @classmethod
    def reset(cls) -> None:
        cls.entered.clear()
        cls.release.clear()
        cls.batches.clear()


@evalsi.evaluators.register
class Sleepy(Evaluator[NoParams]):
    """Passes; a completion ``sleep:S`` first sleeps ``S`` seconds (scored one rollout at a time)."""

    name = "test-adapters-sleepy"
    summary = "Sleeps as long as the completion says, then passes (test evaluator)."
    reads = ("completion",)

    def score(self, record: Record, params: NoParams, ctx: ScoreContext) -> Score:
        text = record.completion_text
        if text.startswith("sleep:"):
            threading.Event().wait(float(text.removeprefix("sleep:")))
        return Score.ok(True)


@evalsi.evaluators.register
class SleepyBatch(Evaluator[NoParams]):
    """Passes every rollout after one sleep of 0.3 s for the whole batch (scored a batch at a time)."""

    name = "test-adapters-sleepy-batch"
    summary = "Sleeps 0.3 s per batch, then passes every rollout (test evaluator)."
    reads = ("completion",)

    def score_batch(self, records: Sequence[Record], params: NoParams, ctx: ScoreContext) -> list[Score]:
        threading.Event().wait(0.3)
        return [Score.ok(True) for _ in records]
