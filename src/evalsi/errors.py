"""The evalsi exception tree.

Every error evalsi raises on purpose derives from :class:`EvalsiError` and from the builtin it resembles,
so callers can catch either::

    EvalsiError
    ├── SpecError(ValueError)                   evalsi.errors     a spec is invalid (file, line, field path)
    ├── DataError(ValueError)                   evalsi.errors     input data is invalid (file, line, rollout)
    │   └── ResumeError                         evalsi.runs       a results file holds other records
    ├── UnknownEvaluatorError(KeyError)         evalsi.errors     a `ref` names no registered evaluator
    ├── RewardBatchError(RuntimeError)          evalsi.errors     a component errored under `onError: raise`
    │   └── DatasetBatchError                   evalsi.ray        the same, on a rollout of a Ray Data file
    ├── SandboxUnavailableError(RuntimeError)   evalsi.errors     the requested isolation rung cannot run here
    ├── SandboxError(RuntimeError)              evalsi.errors     the sandbox itself failed (did not start, died)
    ├── RewardServiceError(RuntimeError)        evalsi.errors     the Reward Service failed or refused
    ├── PluginValidationError(TypeError)        evalsi.evaluators an evaluator class breaks the Evaluator contract
    ├── ScoringCancelled                        evalsi.engine     the caller went away before scoring
    ├── GenerationError(RuntimeError)           evalsi.runs       a target produced no completions
    ├── LoggerError(RuntimeError)               evalsi.runs       a logger could not record a step
    ├── RunServiceError                         evalsi.runs       the Run Service failed or refused
    │   └── RunNotFoundError                    evalsi.runs       no such run on the server
    ├── CheckpointEvaluationError(RuntimeError) evalsi.training   checkpoint evaluations failed
    ├── ConversionError(RuntimeError)           evalsi.training   a sharded checkpoint could not be converted
    ├── PlotError(RuntimeError)                 evalsi.training   the curve cannot be drawn as asked
    ├── ServingError(RuntimeError)              evalsi.training   a checkpoint could not be served
    │   └── UnservableError(DataError)          evalsi.training   the checkpoint is not there or not servable
    ├── SourceError(RuntimeError)               evalsi.training   a checkpoint location cannot be read
    │   └── LocationError(DataError)            evalsi.training   a checkpoint location cannot be opened at all
    ├── EvaluationFailed(AssertionError)        evalsi.testing    an evaluation test did not meet its pass rule
    ├── EvaluationSetupError(ValueError)        evalsi.testing    an evaluation test is declared wrongly
    ├── RayUnavailableError(ImportError)        evalsi.ray        Ray is not installed
    ├── RewardPoolError(RuntimeError)           evalsi.ray        the Ray reward pool could not score a rollout
    ├── RewardPoolStartError(RuntimeError)      evalsi.ray        the Ray reward pool did not start
    ├── GroupTooLarge(ValueError)               evalsi.ray._coordinator  whole groups larger than the pool's queue
    ├── ServiceError                            evalsi.server._errors    a refused or failed call, with its status
    ├── ImageError(ValueError)                  evalsi_harness    an agent task's image cannot be used
    ├── TaskEnvError(RuntimeError)              evalsi_harness    a task environment cannot go on
    └── TaskSetupError(RuntimeError)            evalsi_harness    a task's setup failed

Each class is listed under its first evalsi base, with its other bases in parentheses, and the module to
import it from.

A failed *sample* is data, not an exception: evaluators return a ``Score`` with status ``error``.
"""

from __future__ import annotations


class EvalsiError(Exception):
    """Base class of every error evalsi raises on purpose."""


class SpecError(EvalsiError, ValueError):
    """A spec is invalid; the message names the file, line and field path and what would be valid."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, path: str = "") -> None:
        """Locate ``message`` in the spec that caused it.

        Args:
            message: What is wrong and what would be valid.
            file: The spec's file, when it came from one.
            line: The line of the offending field.
            path: The field's path (``spec.components[1].weight``).

        """
        self.file = file
        self.line = line
        self.path = path
        self.detail = message
        super().__init__(_locate(message, file, line, path))


class DataError(EvalsiError, ValueError):
    """Input data is invalid; the message names the file and line, or the rollout index."""

    def __init__(
        self, message: str, *, file: str | None = None, line: int | None = None, index: int | None = None
    ) -> None:
        """Locate ``message`` in the data that caused it.

        Args:
            message: What is wrong and what would be valid.
            file: The data file, when it came from one.
            line: The line of the offending row.
            index: The rollout's position in its batch, when there is no file.

        """
        self.file = file
        self.line = line
        self.index = index
        self.detail = message
        where = f"rollout {index}: " if index is not None else ""
        super().__init__(_locate(where + message, file, line, ""))


class UnknownEvaluatorError(EvalsiError, KeyError):
    """No evaluator is registered under the requested name."""

    def __init__(self, name: str, suggestions: list[str], *, hint: str = "") -> None:
        """Name the evaluator asked for and the closest registered names.

        Args:
            name: The name asked for.
            suggestions: Registered names close to ``name``.
            hint: A message that replaces the suggestions (e.g. the name is server-side only).

        """
        self.name = name
        self.suggestions = suggestions
        if hint:
            super().__init__(f"unknown evaluator {name!r}: {hint}")
            return
        close = f"; did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(f"unknown evaluator {name!r}{close} (`evalsi evaluators list` shows them all)")

    def __str__(self) -> str:
        # KeyError quotes its argument; show the sentence as written.
        return str(self.args[0])


class RewardBatchError(EvalsiError, RuntimeError):
    """A component errored with ``onError: raise``, so the whole batch failed and no reward is returned."""

    def __init__(self, index: int, component: str, cause: str) -> None:
        """Name the rollout and component whose error failed the batch.

        Args:
            index: The rollout's position in the batch.
            component: The component's name.
            cause: The component's error reason.

        """
        self.index = index
        self.component = component
        self.cause = cause
        super().__init__(
            f"rollout {index}: component {component!r} errored: {cause} "
            "(onError: raise fails the batch; set onError to 'zero' or 'none' to score past errors)"
        )


class SandboxUnavailableError(EvalsiError, RuntimeError):
    """The isolation rung a component requires is not available on this machine."""


class SandboxError(EvalsiError, RuntimeError):
    """The sandbox itself failed (did not start, died, answered garbage); it is restarted on next use."""


def _locate(message: str, file: str | None, line: int | None, path: str) -> str:
    """Prefix a message with `file:line: path: ` for whichever parts are known."""
    prefix = ""
    if file:
        prefix = f"{file}:{line}: " if line else f"{file}: "
    elif line:
        prefix = f"line {line}: "
    if path:
        prefix += f"{path}: "
    return prefix + message


class RewardServiceError(EvalsiError, RuntimeError):
    """The Reward Service could not be reached, refused the call, or answered outside its contract."""
