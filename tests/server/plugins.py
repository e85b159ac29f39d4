"""Evaluators the test servers import (``imports: [tests.server.plugins]`` in their config).

They run inside the server process, so they report through files: ``test-server-count`` appends one line per
record it scores to ``params.log``; ``test-server-gate`` blocks until ``params.gate`` exists; ``test-server-code``
claims to run code, so scoring it needs ``resource.runs_code``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import evalsi.evaluators as ev
from evalsi.records import Record


class CountParams(ev.Params):
    log: str
    """File that gets one line per scored record."""


@ev.register
class CountEvaluator(ev.Evaluator[CountParams]):
    """Exact match of completion and reference, logging every record it scores."""

    name = "test-server-count"
    summary = "Test: exact match that logs each scored record to a file."
    params_model = CountParams
    reads = ("completion", "reference")
    pack = "test"

    def score_batch(self, records: Sequence[Record], params: CountParams, ctx: ev.ScoreContext) -> list[ev.Score]:
        with open(params.log, "a", encoding="utf-8") as handle:
            handle.write("".join(f"{r.completion_text}\n" for r in records))
        return [ev.Score.ok(r.completion_text == str(r.reference)) for r in records]


class GateParams(ev.Params):
    gate: str
    """Scoring blocks until this file exists."""
    timeout: float = 60.0
    entered: str | None = None
    """Created when scoring starts, so a test can wait for the call to be in flight."""


@ev.register
class GateEvaluator(ev.Evaluator[GateParams]):
    """Blocks until a file appears, then scores 1: holds calls in flight for as long as a test needs."""

    name = "test-server-gate"
    summary = "Test: waits for a file, then scores 1."
    params_model = GateParams
    pack = "test"

    def score_batch(self, records: Sequence[Record], params: GateParams, ctx: ev.ScoreContext) -> list[ev.Score]:
        if params.entered is not None:
            Path(params.entered).touch()
        deadline = time.monotonic() + params.timeout
        while not Path(params.gate).exists():
            if time.monotonic() > deadline:
                return [ev.Score.error("gate file never appeared")] * len(records)
            time.sleep(0.01)
        return [ev.Score.ok(1.0) for _ in records]


@ev.register
class CodeEvaluator(ev.Evaluator[ev.NoParams]):
    """Declares that it runs code (it does not): the server must demand resource.runs_code for it."""

    name = "test-server-code"
    summary = "Test: a code component (scores the completion's length parity)."
    runs_code = True
    pack = "test"

    def score(self, record: Record, params: ev.NoParams, ctx: ev.ScoreContext) -> ev.Score:
        return ev.Score.ok(float(len(record.completion_text) % 2))


class JudgeParams(ev.Params):
    judge: dict[str, Any]
    """JudgeConfig fields (on a server: filled in from the judge named in the spec)."""


@ev.register
class JudgeEvaluator(ev.Evaluator[JudgeParams]):
    """Scores 1 when its judge's model is the one the test configured: proves named judges are resolved."""

    name = "test-server-judge"
    summary = "Test: reports which judge model it was given."
    params_model = JudgeParams
    pack = "test"

    def score(self, record: Record, params: JudgeParams, ctx: ev.ScoreContext) -> ev.Score:
        return ev.Score.ok(1.0 if params.judge.get("model") == "m" else 0.0, reason=str(params.judge.get("model")))
