"""``evaluation-test``: an evaluation test's scoring function as a reward component.

``ref: evaluation-test/<module>::<function>`` (or ``.../path/to/test_file.py::function``) scores each rollout
with the function of that ``@evaluation_test``, so the CI check and the RL reward are one piece of code. The
rollout becomes an :class:`EvaluationRow` (its prompt messages, then the completion as the assistant's reply;
the reference as ``ground_truth``); ``pointwise`` tests see one row at a time, ``groupwise`` tests the
completions of one prompt together (a GRPO group), ``all`` tests the whole batch.

It imports and runs Python code named in the spec, so it is for in-process use; the evalsi server refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from evalsi.evaluators import Evaluator, Params, Score, ScoreContext, register
from evalsi.records import Record
from evalsi.testing._decorator import find_evaluation_test
from evalsi.testing._row import EvaluationRow, Message
from evalsi.testing._scoring import score_rollouts


class EvaluationTestParams(Params):
    """Which evaluation test scores the rollouts."""

    test: str = Field(min_length=3)
    """``module::function`` or ``path/to/test_file.py::function`` (relative to the current directory)."""


@register
class EvaluationTestEvaluator(Evaluator[EvaluationTestParams]):
    """Scores rollouts with an ``@evaluation_test`` function."""

    name = "evaluation-test"
    summary = "An @evaluation_test's scoring function as a reward component (ref: evaluation-test/module::test)."
    params_model = EvaluationTestParams
    reads = ("prompt", "completion", "reference", "metadata")
    pack = "testing"
    ref_argument: ClassVar[str | None] = "test"
    in_process_only: ClassVar[bool] = True

    def score_batch(self, records: Sequence[Record], params: EvaluationTestParams, ctx: ScoreContext) -> list[Score]:
        """Build a row per record, score them with the test's function in its mode, read the scores back."""
        declared = find_evaluation_test(params.test)
        rows = [_row(record) for record in records]
        scored = score_rollouts(declared.function, declared.mode, rows)
        by_identity = {id(row): row for row in scored}
        out: list[Score] = []
        for row in rows:
            done = by_identity.get(id(row), row)
            out.append(Score.ok(float(done.score or 0.0), done.reason))
        return out


def _row(record: Record) -> EvaluationRow:
    prompt = record.prompt
    messages = [Message(role="user", content=prompt)] if isinstance(prompt, str) else [Message(m) for m in prompt or []]
    messages.append(Message(role="assistant", content=record.completion_text))
    group = record.pairing_key if record.id is None else record.id
    return EvaluationRow(messages, record.reference, group, metadata=dict(record.metadata))
