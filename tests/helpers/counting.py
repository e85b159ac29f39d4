"""A counting evaluator, registered for tests: proves when the engine does (or does not) call an evaluator."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import ClassVar

import evalsi.evaluators as ev
from evalsi.records import Record


class CountingParams(ev.Params):
    """Options of the counting evaluator."""

    fail_on: str | None = None
    """A completion text that makes the evaluator return an error score."""
    raise_on: str | None = None
    """A completion text that makes score_batch raise."""


@ev.register
class Counting(ev.Evaluator[CountingParams]):
    """Scores len(completion) % 2 and counts every record it is asked to score."""

    name = "test-counting"
    summary = "Test evaluator that counts calls."
    params_model = CountingParams
    reads = ("completion",)
    pack = "test"
    calls: ClassVar[list[int]] = []
    lock = threading.Lock()

    def score_batch(self, records: Sequence[Record], params: CountingParams, ctx: ev.ScoreContext) -> list[ev.Score]:
        with self.lock:
            type(self).calls.append(len(records))
        texts = [r.completion_text for r in records]
        if params.raise_on is not None and params.raise_on in texts:
            raise RuntimeError("evaluator exploded")
        return [
            ev.Score.error("asked to fail") if t == params.fail_on else ev.Score.ok(float(len(t) % 2)) for t in texts
        ]

    @classmethod
    def scored(cls) -> int:
        return sum(cls.calls)

    @classmethod
    def reset(cls) -> None:
        cls.calls.clear()
