"""Evaluation tests: scoring functions over model rollouts, run by pytest, with a pass threshold.

``@evaluation_test`` turns a function that scores an :class:`EvaluationRow` into a pytest test (see
:mod:`evalsi.testing._decorator`); ``evaluation_test.from_spec("reward.yaml", ...)`` makes the RL reward spec
itself the check. Rollouts come from a :class:`SingleTurn` endpoint, are pre-generated (:class:`NoOp`), or are
run by a service of yours (:class:`Remote`). Results are stored locally in the run results form.

A test written for Eval Protocol runs with only its import changed: ``SingleTurnRolloutProcessor`` and
``NoOpRolloutProcessor`` are :class:`SingleTurn` and :class:`NoOp`, messages read as attributes
(``row.messages[-1].content``), and ``row.evaluation_result = EvaluateResult(score=..., reason=...)`` is the
row's score (see :mod:`evalsi.testing._models`).
"""

from evalsi._util.public import publish
from evalsi.testing._config import EvaluationSetupError, Threshold
from evalsi.testing._decorator import (
    EvaluationFailed,
    EvaluationOutcome,
    EvaluationTest,
    evaluation_test,
    find_evaluation_test,
)
from evalsi.testing._rollout import (
    NoOp,
    NoOpRolloutProcessor,
    Remote,
    RolloutProcessor,
    SingleTurn,
    SingleTurnRolloutProcessor,
)
from evalsi.testing._row import EvaluateResult, EvaluationRow, Message, MetricResult
from evalsi.testing._store import results_db, stored_results

__all__ = [
    "EvaluateResult",
    "EvaluationFailed",
    "EvaluationOutcome",
    "EvaluationRow",
    "EvaluationSetupError",
    "EvaluationTest",
    "Message",
    "MetricResult",
    "NoOp",
    "NoOpRolloutProcessor",
    "Remote",
    "RolloutProcessor",
    "SingleTurn",
    "SingleTurnRolloutProcessor",
    "Threshold",
    "evaluation_test",
    "find_evaluation_test",
    "results_db",
    "stored_results",
]

publish(__name__)
