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

from evalsi._util.public import publish
from evalsi.runs._bind import BoundRun, bind_run, load_run, run_from_mapping
from evalsi.runs._builtin import BUILTINS, load_builtin
from evalsi.runs._compare import (
    LoadedRun,
    MetricComparison,
    Overlap,
    compare_runs,
    comparison_to_dict,
    load_results,
    record_overlap,
    run_from_document,
)
from evalsi.runs._datasets import Item, load_items, rows_to_items
from evalsi.runs._document import (
    RECORD,
    RunDocument,
    RunHeader,
    RunResult,
    Summary,
    check_document,
    header_of,
    validation_message,
)
from evalsi.runs._driver import (
    ComponentScorer,
    Runner,
    RunOutcome,
    RunVerdict,
    generated_otherwise,
    load_run_items,
    run_shard,
)
from evalsi.runs._loggers import (
    LoggedRun,
    Logger,
    LoggerError,
    log_outcome,
    log_step,
    make_loggers,
    results_records,
    run_loggers,
)
from evalsi.runs._overrides import apply_overrides
from evalsi.runs._remote import RunNotFoundError, RunsClient, RunServiceError
from evalsi.runs._result_file import load_run_result
from evalsi.runs._results import (
    RecordResult,
    ResultsWriter,
    ResumeError,
    SampleResult,
    fingerprint,
    journal_path,
    read_results,
)
from evalsi.runs._sharding import Shard, ShardReport, ShardRunner
from evalsi.runs._summary import GateResult, MetricInfo, RunSummary, summarize
from evalsi.runs._targets import CallableTarget, Generation, GenerationError, OpenAITarget, Target

__all__ = [
    "BUILTINS",
    "RECORD",
    "BoundRun",
    "CallableTarget",
    "ComponentScorer",
    "GateResult",
    "Generation",
    "GenerationError",
    "Item",
    "LoadedRun",
    "LoggedRun",
    "Logger",
    "LoggerError",
    "MetricComparison",
    "MetricInfo",
    "OpenAITarget",
    "Overlap",
    "RecordResult",
    "ResultsWriter",
    "ResumeError",
    "RunDocument",
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
    "apply_overrides",
    "bind_run",
    "check_document",
    "compare_runs",
    "comparison_to_dict",
    "fingerprint",
    "generated_otherwise",
    "header_of",
    "journal_path",
    "load_builtin",
    "load_items",
    "load_results",
    "load_run",
    "load_run_items",
    "load_run_result",
    "log_outcome",
    "log_step",
    "make_loggers",
    "read_results",
    "record_overlap",
    "results_records",
    "rows_to_items",
    "run_from_document",
    "run_from_mapping",
    "run_loggers",
    "run_shard",
    "summarize",
    "validation_message",
]

publish(__name__)
