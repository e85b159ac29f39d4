"""Evaluation runs: generate completions from a target over a dataset, score them, keep per-record results.

The results file (:class:`RunResult`, read back with :func:`load_run_result`) holds every record's samples, for
statistics, gates and paired comparisons.

Example:
    >>> import json, pathlib, tempfile
    >>> from evalsi.runs import Runner, run_from_mapping
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "data.jsonl").write_text(json.dumps({"prompt": "echo", "answer": "echo"}))
    >>> run = run_from_mapping({
    ...     "target": {"callable": "os.path:basename"},
    ...     "dataset": {"path": str(folder / "data.jsonl")},
    ...     "evaluators": [{"ref": "exact-match"}],
    ...     "output": str(folder / "run.results.json"),
    ... })
    >>> outcome = Runner(run).run()
    >>> outcome.verdict, outcome.summary.metrics["exact-match"].mean
    ('ok', 1.0)

"""

from typing import TYPE_CHECKING, Any

from evalsi._util.public import lazy_names, publish
from evalsi.runs._bind import BoundRun, load_run, run_from_mapping
from evalsi.runs._builtin import BUILTINS, load_builtin
from evalsi.runs._compare import LoadedRun, MetricComparison, compare_runs, load_results
from evalsi.runs._document import RunHeader, RunResult, Summary
from evalsi.runs._driver import ComponentScorer, Runner, RunOutcome, RunVerdict, run_shard
from evalsi.runs._loggers import LoggerError
from evalsi.runs._result_file import load_run_result
from evalsi.runs._results import RecordResult, ResumeError, SampleResult
from evalsi.runs._sharding import Shard, ShardReport, ShardRunner
from evalsi.runs._summary import GateResult, MetricInfo, RunSummary
from evalsi.runs._targets import CallableTarget, Generation, GenerationError, OpenAITarget, Target

if TYPE_CHECKING:
    from evalsi.runs._remote import RunNotFoundError, RunsClient, RunServiceError

__all__ = [
    "BUILTINS",
    "BoundRun",
    "CallableTarget",
    "ComponentScorer",
    "GateResult",
    "Generation",
    "GenerationError",
    "LoadedRun",
    "LoggerError",
    "MetricComparison",
    "MetricInfo",
    "OpenAITarget",
    "RecordResult",
    "ResumeError",
    "RunHeader",
    "RunNotFoundError",
    "RunOutcome",
    "RunResult",
    "RunServiceError",
    "RunSummary",
    "RunVerdict",
    "Runner",
    "RunsClient",
    "SampleResult",
    "Shard",
    "ShardReport",
    "ShardRunner",
    "Summary",
    "Target",
    "compare_runs",
    "load_builtin",
    "load_results",
    "load_run",
    "load_run_result",
    "run_from_mapping",
    "run_shard",
]

publish(__name__)

_REMOTE = "evalsi.runs._remote"
_lazy = lazy_names(__name__, dict.fromkeys(("RunNotFoundError", "RunServiceError", "RunsClient"), _REMOTE))


def __getattr__(name: str) -> Any:
    """The runs service's client and its errors, imported on first use: a local run never loads httpx."""
    return _lazy(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
