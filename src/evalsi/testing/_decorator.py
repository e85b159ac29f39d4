"""``@evaluation_test``: a scoring function over model rollouts, run by pytest, that fails below a threshold.

Example::

    from evalsi.testing import EvaluationRow, SingleTurn, evaluation_test

    @evaluation_test(
        input_dataset=["capitals.jsonl"],           # rows: {"messages": [...], "ground_truth": "Paris"}
        completion_params=[{"model": "qwen3-8b", "base_url": "http://localhost:8000/v1", "temperature": 0}],
        rollout_processor=SingleTurn(),
        passed_threshold=0.8,                       # or {"success": 0.8, "standard_error": 0.05}
    )
    def test_capitals(row: EvaluationRow) -> EvaluationRow:
        row.score = 1.0 if row.ground_truth.lower() in row.last_text.lower() else 0.0
        return row

The decorated function becomes a pytest test: it loads the rows, rolls each out ``num_runs`` times, scores the
rollouts with the function, aggregates, stores the results (:mod:`evalsi.testing._store`) and fails with a table
of the worst rows when the pass rule is not met. In ``pointwise`` and ``all`` mode each completion-params entry
is its own pytest case (``test_capitals[qwen3-8b]``), with its own verdict and stored results; in ``groupwise``
mode the entries are compared row by row in one case (:mod:`evalsi.testing._cases`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsi._util.modules import import_file
from evalsi.errors import EvalsiError
from evalsi.testing._cases import EvaluationCase, evaluation_cases
from evalsi.testing._config import (
    Aggregation,
    EvaluationSetupError,
    Mode,
    Threshold,
    env_completion_params,
    env_positive,
    env_threshold,
)
from evalsi.testing._inputs import distinct_ids, row_from_mapping, rows_from_dataset, rows_from_messages
from evalsi.testing._report import (
    Verdict,
    case_id,
    results_document,
    summary_line,
    verdict,
    worst_rows_table,
)
from evalsi.testing._rollout import NoOp, RolloutProcessor, SingleTurn
from evalsi.testing._row import EvaluationRow
from evalsi.testing._scoring import ScoringFunction, check_signature, score_rollouts
from evalsi.testing._store import store_result

_MODES = ("pointwise", "groupwise", "all")
_AGGREGATIONS = ("mean", "max", "min")


class EvaluationFailed(EvalsiError, AssertionError):
    """An evaluation test's aggregate score did not meet its pass rule (a pytest failure)."""


@dataclass
class EvaluationOutcome:
    """What one run of an evaluation test case produced."""

    rows: list[EvaluationRow]
    verdict: Verdict
    threshold: Threshold | None
    document: dict[str, Any]
    order: dict[str, int] = field(default_factory=dict)
    """Each input row's position (``row_id`` -> index)."""


@dataclass
class EvaluationTest:
    """An evaluation test's declaration: its inputs, rollouts, scoring function and pass rule."""

    function: ScoringFunction
    input_dataset: list[str] = field(default_factory=list)
    input_messages: list[list[dict[str, Any]]] = field(default_factory=list)
    input_rows: list[EvaluationRow] = field(default_factory=list)
    completion_params: list[dict[str, Any]] = field(default_factory=list)
    rollout_processor: RolloutProcessor | None = None
    passed_threshold: Threshold | None = None
    mode: Mode = "pointwise"
    num_runs: int = 1
    aggregation_method: Aggregation = "mean"
    max_concurrent_rollouts: int = 8
    max_dataset_rows: int | None = None
    base_dir: Path | None = None

    @property
    def test_id(self) -> str:
        """``module::function``."""
        return f"{self.function.__module__}::{self.function.__qualname__}"

    def cases(self) -> list[EvaluationCase]:
        """The pytest cases: one per completion-params entry (after ``EVALSI_COMPLETION_PARAMS``), or one.

        Raises:
            EvaluationSetupError: The override is invalid, two entries are the same, or groupwise has one entry.

        """
        return evaluation_cases(self.test_id, self.mode, env_completion_params(self.completion_params))

    def inputs(self, max_rows: int | None) -> list[EvaluationRow]:
        """The input rows, cut to ``max_rows``; a repeated row gets its own id (``id#2``).

        Args:
            max_rows: The most rows; None for all.

        """
        rows = rows_from_dataset(self.input_dataset, self.base_dir) if self.input_dataset else []
        rows += rows_from_messages(self.input_messages)
        rows += [
            EvaluationRow(
                list(r.messages),
                r.ground_truth,
                r.row_id or f"row-{i}",
                metadata=dict(r.metadata),
                source=r.source or f"input_rows[{i}]",
                dataset_id=r.dataset_id if r.source else (r.row_id or None),  # a row built by hand: its own id
            )
            for i, r in enumerate(self.input_rows)
        ]
        rows = distinct_ids(rows)
        return rows if max_rows is None else rows[:max_rows]

    def run(self, case: EvaluationCase | None = None, *, store: bool = True) -> EvaluationOutcome:
        """Roll out, score, aggregate and store one case, with the environment's overrides applied (no pass check).

        ``case`` is one of :meth:`cases`; it may be left out when there is only one.

        Args:
            case: One parameter combination; None for the only one.
            store: Whether to store the results.

        Raises:
            EvaluationSetupError: The declaration or an override is invalid, or the function misbehaves.

        """
        case = self._the_case(case)
        threshold = env_threshold(self.passed_threshold)
        num_runs = env_positive("EVALSI_NUM_RUNS", self.num_runs) or 1
        max_rows = env_positive("EVALSI_MAX_ROWS", self.max_dataset_rows, allow_all=True)
        rows = self.inputs(max_rows)
        if not rows:
            raise EvaluationSetupError(
                f"{self.test_id}: no input rows (give input_dataset, input_messages or input_rows)"
            )
        order = {row.row_id: index for index, row in enumerate(rows)}
        processor = self.rollout_processor or (SingleTurn() if case.params else NoOp())
        variants = list(zip(case.params, case.params_labels, strict=True)) or [({}, "")]
        rollouts = [row.copy_for(p, run, label) for row in rows for p, label in variants for run in range(num_runs)]
        rolled = asyncio.run(processor.process(rollouts, self.max_concurrent_rollouts))
        scored = score_rollouts(self.function, self.mode, rolled)
        result = verdict(scored, self.aggregation_method, threshold)
        settings = {
            "mode": self.mode,
            "numRuns": num_runs,
            "aggregationMethod": self.aggregation_method,
            "completionParams": [_public(p) for p in case.params],
            "maxRows": max_rows,
            "inputDataset": self.input_dataset,
        }
        document = results_document(self.test_id, case.label, scored, result, threshold, settings, order)
        if store:
            store_result(document)
        return EvaluationOutcome(scored, result, threshold, document, order)

    def check(self, case: EvaluationCase | None = None) -> EvaluationOutcome:
        """:meth:`run`, then fail when the pass rule is not met.

        Args:
            case: One parameter combination; None for the only one.

        Raises:
            EvaluationFailed: The aggregate score (or its standard error) misses the threshold.

        """
        __tracebackhide__ = True  # pytest shows the message, not evalsi's frames
        outcome = self.run(case)
        result, threshold = outcome.verdict, outcome.threshold
        summary = summary_line(str(outcome.document["name"]), result)
        print(summary)  # pytest shows it with -s, and with the failure
        if threshold is not None and not result.passed:
            table = worst_rows_table(outcome.rows, order=outcome.order)
            raise EvaluationFailed(f"{summary}; the pass rule is {threshold.describe()}\nworst rows:\n{table}")
        return outcome

    def _the_case(self, case: EvaluationCase | None) -> EvaluationCase:
        if case is not None:
            return case
        cases = self.cases()
        if len(cases) > 1:
            named = ", ".join(case_id(self.test_id, c.label) for c in cases)
            raise EvaluationSetupError(f"{self.test_id} has {len(cases)} cases ({named}); run one of cases()")
        return cases[0]


def _public(params: Mapping[str, Any]) -> dict[str, Any]:
    """Completion params as recorded: no headers (they may carry credentials)."""
    return {k: v for k, v in params.items() if k != "headers"}


class _EvaluationTestDecorator:
    """``evaluation_test(...)`` makes a pytest test; ``evaluation_test.from_spec(...)`` makes one from a spec."""

    def __call__(
        self,
        *,
        input_dataset: Sequence[str | Path] | None = None,
        input_messages: Sequence[Sequence[Mapping[str, Any]]] | None = None,
        input_rows: Sequence[EvaluationRow | Mapping[str, Any]] | None = None,
        completion_params: Sequence[Mapping[str, Any]] | None = None,
        rollout_processor: RolloutProcessor | None = None,
        passed_threshold: float | Mapping[str, Any] | Threshold | None = None,
        mode: Mode = "pointwise",
        num_runs: int = 1,
        aggregation_method: Aggregation = "mean",
        max_concurrent_rollouts: int = 8,
        max_dataset_rows: int | None = None,
    ) -> Callable[[ScoringFunction], Callable[[], None]]:
        """Declare an evaluation test (see the module doc); every argument is checked here, at import time.

        Args:
            input_dataset: JSONL files of rows (``messages``, and an optional ``ground_truth``); a relative path is
                relative to the directory of the module that defines the scoring function.
            input_messages: Conversations, each one row's ``messages``.
            input_rows: Rows given in the code, as :class:`EvaluationRow` or mappings.
            completion_params: What generates the replies: one entry per model (``model``, ``base_url``,
                ``temperature``, ...). In ``pointwise`` and ``all`` mode each entry is its own pytest case; in
                ``groupwise`` mode the entries are compared row by row in one case.
            rollout_processor: How a row is rolled out. By default ``SingleTurn()`` when ``completion_params``
                are given, else ``NoOp()`` (the rows already end with the reply).
            passed_threshold: The pass rule: a number (the aggregate score to reach), a mapping
                ``{"success": ..., "standard_error": ...}``, or a :class:`Threshold`. Without one the test records
                its results and passes whatever the score.
            mode: ``pointwise`` (the function scores one row), ``groupwise`` (the rollouts of one row across the
                completion params) or ``all`` (the whole dataset at once).
            num_runs: How many times each row is rolled out and scored; a row's runs count as one cluster in the
                standard error.
            aggregation_method: How the scores are aggregated: ``mean``, ``max`` or ``min``.
            max_concurrent_rollouts: How many rollouts run at once.
            max_dataset_rows: Only the first N rows (``EVALSI_MAX_ROWS`` overrides it in CI).

        Returns:
            A decorator that turns the scoring function into the pytest test.

        Raises:
            EvaluationSetupError: An argument is invalid (names it and what would be valid).

        """
        if mode not in _MODES:
            raise EvaluationSetupError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if aggregation_method not in _AGGREGATIONS:
            raise EvaluationSetupError(f"aggregation_method must be one of {', '.join(_AGGREGATIONS)}")
        if num_runs < 1 or max_concurrent_rollouts < 1:
            raise EvaluationSetupError("num_runs and max_concurrent_rollouts must be at least 1")
        threshold = Threshold.parse(passed_threshold, "passed_threshold")
        rows = [
            r if isinstance(r, EvaluationRow) else row_from_mapping(r, f"input_rows[{i}]")
            for i, r in enumerate(input_rows or [])
        ]

        def decorate(function: ScoringFunction) -> Callable[[], None]:
            check_signature(function, mode)
            declared = EvaluationTest(
                function,
                [str(p) for p in input_dataset or []],
                [[dict(m) for m in c] for c in input_messages or []],
                rows,
                [dict(p) for p in completion_params or []],
                rollout_processor,
                threshold,
                mode,
                num_runs,
                aggregation_method,
                max_concurrent_rollouts,
                max_dataset_rows,
                _caller_dir(function),
            )
            return as_pytest_test(declared)

        return decorate

    def from_spec(
        self,
        spec: str | Path,
        *,
        name: str | None = None,
        input_dataset: Sequence[str | Path] | None = None,
        completion_params: Sequence[Mapping[str, Any]] | None = None,
        passed_threshold: float | Mapping[str, Any] | Threshold | None = None,
        **options: Any,
    ) -> Callable[[], None]:
        """An evaluation test that scores each rollout with a RewardSpec's total (or a RunSpec's evaluators).

        A RunSpec also brings its dataset (``input_dataset`` when not given) and its target (``completion_params``
        when not given). Scores are clipped to [0, 1]. Assign the result to a ``test_...`` name in a test module.

        Args:
            spec: The RewardSpec or RunSpec file.
            name: The resource's name, when the file holds several.
            input_dataset: JSONL files of rows, as for :meth:`__call__`; a RunSpec's dataset when not given.
            completion_params: The models to evaluate, as for :meth:`__call__`; a RunSpec's target when not given.
            passed_threshold: The pass rule, as for :meth:`__call__`.
            **options: Any other argument of :meth:`__call__` (``mode`` is ``all`` unless given: the spec scores a
                whole batch in one call).

        Returns:
            The pytest test.

        Raises:
            EvaluationSetupError: The spec or an argument is invalid.

        """
        from evalsi.testing._from_spec import spec_scorer

        scorer, defaults = spec_scorer(Path(spec), name)
        scorer.__module__ = _caller_module()
        inputs: dict[str, Any] = {"input_dataset": input_dataset}
        if input_dataset is None and "input_rows" in defaults and "input_rows" not in options:
            inputs = {"input_rows": defaults["input_rows"]}
        options.setdefault("mode", "all")  # the spec scores a whole batch in one engine call
        return self(
            **inputs,
            completion_params=completion_params if completion_params is not None else defaults.get("completion_params"),
            passed_threshold=passed_threshold,
            **options,
        )(scorer)


def _caller_dir(function: ScoringFunction) -> Path | None:
    """The directory of the module that defines ``function``: relative dataset paths are resolved against it."""
    try:
        source = inspect.getsourcefile(function)
    except TypeError:
        source = None
    return Path(source).resolve().parent if source else None


def _caller_module() -> str:
    frame = sys._getframe(2)
    return str(frame.f_globals.get("__name__", "__main__"))


def as_pytest_test(declared: EvaluationTest) -> Callable[..., None]:
    """The function pytest collects and runs: one case per completion-params entry, as parametrized cases.

    A test of one unnamed case (groupwise, or pre-generated rows) takes no argument; otherwise it takes
    ``evalsi_case``, parametrized with one ``pytest.param`` per case whose id is the case's name. The cases are
    fixed when the module is imported (``EVALSI_COMPLETION_PARAMS``, which the plugin's option sets before
    collection, applies then); it must not look like it wants a ``row`` fixture.
    """
    cases = declared.cases()
    test: Callable[..., None]
    if len(cases) == 1 and not cases[0].label:

        def run_one_case() -> None:
            __tracebackhide__ = True
            declared.check(cases[0])

        test = run_one_case
    else:

        def run_evaluation_test(evalsi_case: EvaluationCase) -> None:
            __tracebackhide__ = True
            declared.check(evalsi_case)

        test = _parametrized(run_evaluation_test, cases)
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(test, attribute, getattr(declared.function, attribute, None))
    marks = list(getattr(declared.function, "pytestmark", []))  # marks put on the scoring function stay
    test.pytestmark = [*marks, *getattr(test, "pytestmark", [])]  # type: ignore[attr-defined]
    test.evaluation = declared  # type: ignore[attr-defined]
    return test


def _parametrized(test: Callable[[EvaluationCase], None], cases: list[EvaluationCase]) -> Callable[..., None]:
    """``test`` parametrized over ``cases`` (each case's label its pytest id); without pytest, runs every case."""
    try:
        import pytest
    except ModuleNotFoundError:  # nothing collects it then; called directly, it checks each case in turn

        def every_case() -> None:
            for case in cases:
                test(case)

        return every_case
    values = [pytest.param(case, id=case.label) for case in cases]
    return pytest.mark.parametrize("evalsi_case", values)(test)


evaluation_test = _EvaluationTestDecorator()
"""Makes a scoring function a pytest test with a pass threshold: ``@evaluation_test(input_dataset=..., ...)``
(see ``__call__``), or a RewardSpec or RunSpec one with ``evaluation_test.from_spec("reward.yaml", ...)``."""


def find_evaluation_test(reference: str, base_dir: Path | None = None) -> EvaluationTest:
    """The evaluation test named ``module::function`` or ``path/to/test_file.py::function``.

    Args:
        reference: ``module::function`` or ``path/to/test_file.py::function``.
        base_dir: The folder a relative path resolves against; None for the working directory.

    Raises:
        EvaluationSetupError: The module or file cannot be imported, or holds no such evaluation test.

    """
    location, sep, name = reference.partition("::")
    if not sep or not name:
        raise EvaluationSetupError(f"{reference!r}: name an evaluation test as module::function or file.py::function")
    module = _load_module(location, base_dir)
    candidate = getattr(module, name, None)
    declared = getattr(candidate, "evaluation", None)
    if not isinstance(declared, EvaluationTest):
        found = sorted(n for n, v in vars(module).items() if isinstance(getattr(v, "evaluation", None), EvaluationTest))
        raise EvaluationSetupError(
            f"{reference!r}: {location} has no evaluation test {name!r} (evaluation tests there: "
            f"{', '.join(found) or 'none'})"
        )
    return declared


@functools.cache
def _load_module(location: str, base_dir: Path | None) -> Any:
    if location.endswith(".py"):
        path = Path(location)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            return import_file(path, "evalsi_evaluation_test")
        except ImportError as exc:
            raise EvaluationSetupError(str(exc)) from None
    try:
        return importlib.import_module(location)
    except ModuleNotFoundError as exc:
        raise EvaluationSetupError(f"cannot import {location!r}: {exc}") from None
