"""The results document as one pydantic model: what a run writes, the server accepts in ``CreateRun``, readers read.

A results document (``kind: RunResults``, ``version: 1``) is what ``evalsi run`` writes and the Run Service stores.
:class:`RunHeader` is everything but the records (what a run list shows); :class:`RunResult` adds them. The
server validates a document against :class:`RunResult` before storing it, and the viewer reads every header
through :class:`RunHeader`, so a run the server accepted is a run the viewer can show, and a file the viewer
cannot read is listed with the reason instead of breaking the page.

Fields are typed by what readers rely on (a gate is an object with ``passed: true|false``, a mean a number); other
fields are kept as they are (``extra="allow"``), so newer sections pass through. Numbers accept what JSON and
protobuf ``Struct`` give (a whole number may arrive as ``3.0``), never text.

Example:
    >>> header = RunHeader.model_validate({"version": 1, "kind": "RunResults", "name": "r",
    ...                                    "summary": {"gates": [{"metric": "acc", "passed": True}]}})
    >>> header.summary.gates[0].passed
    True
    >>> validation_message(validation_error(RunHeader, {"version": 1, "kind": "RunResults", "name": "r",
    ...                                       "summary": {"gates": [5]}}))
    '`summary.gates[0]`: must be an object'

"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Required

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    with_config,
)
from typing_extensions import TypedDict

from evalsi._util.atomic import atomic_writer
from evalsi.errors import DataError
from evalsi.specs._yaml import format_path

RESULTS_KIND = "RunResults"


def _no_text(value: Any) -> Any:
    """Refuse text and booleans where a number belongs (pydantic's lax mode would read ``"3"`` or ``True``)."""
    if isinstance(value, str | bytes | bool):
        raise ValueError("must be a number")
    return value


Number = Annotated[float, Strict()]
"""A JSON number (an int is taken as a float; text and booleans are refused)."""
Whole = Annotated[int, BeforeValidator(_no_text)]
"""A whole number; ``3.0`` (a protobuf ``Struct`` number) is taken as 3, ``3.5`` and text are refused."""


class _Open(BaseModel):
    """A JSON object whose known fields are typed and whose other fields are kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class EstimateSummary(_Open):
    """One metric's estimate in a summary: mean, standard error, 95% interval, samples and records."""

    mean: Number | None = None
    se: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    n: Whole | None = None
    clusters: Whole | None = None


class GateSummary(_Open):
    """One gate's verdict in a summary."""

    metric: StrictStr
    value: Number | None = None
    min: Number | None = None
    max: Number | None = None
    passed: StrictBool
    reason: StrictStr = ""


class Summary(_Open):
    """A run's summary: every metric's estimate, score status counts per metric, gates, unscored reasons."""

    metrics: dict[str, EstimateSummary] = Field(default_factory=dict)
    counts: dict[str, dict[str, Whole]] = Field(default_factory=dict)
    gates: list[GateSummary] = Field(default_factory=list)
    unscored: dict[str, StrictStr] = Field(default_factory=dict)


class MetricEntry(_Open):
    """A scored metric and the value at which one of its samples counts as correct."""

    name: StrictStr
    threshold: Number = 1.0


class Timings(_Open):
    """When the run started and finished (ISO 8601 text)."""

    started: StrictStr | None = None
    finished: StrictStr | None = None


class CheckpointSection(_Open):
    """The checkpoint a run evaluated (``evalsi checkpoints`` writes it): its training run and step."""

    training_run: StrictStr | None = Field(default=None, alias="trainingRun")
    step: Whole | None = None


def _score_value(value: Any) -> Any:
    if value is not None and not isinstance(value, int | float):
        raise ValueError("must be a number, true, false or null")
    return value


def _key(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("must be a string (the record's pairing key)")
    return value


def _record_id(value: Any) -> Any:
    return value if value is None else _key(value)


def _prompt(value: Any) -> Any:
    if value is not None and not isinstance(value, str | list):
        raise ValueError("must be text or a list of chat messages")
    return value


# Records are TypedDicts (validated as the dicts they are, several times faster than model instances: a run
# holds 100,000 records or more); unknown keys are kept.


@with_config(ConfigDict(extra="allow"))
class ScoreEntry(TypedDict, total=False):
    """One score of a sample: its value (a number, true/false or null), status and reason."""

    value: Annotated[Any, AfterValidator(_score_value)]
    status: Literal["ok", "error", "skipped"]
    reason: StrictStr | None


@with_config(ConfigDict(extra="allow"))
class SampleEntry(TypedDict, total=False):
    """One completion of a record and its scores by metric."""

    completion: StrictStr
    finishReason: StrictStr | None
    tokens: Whole | None
    latency: Number | None
    scores: dict[str, ScoreEntry]


@with_config(ConfigDict(extra="allow"))
class RecordEntry(TypedDict, total=False):
    """Every sample of one dataset record, with its pairing key (``key`` is required)."""

    key: Required[Annotated[Any, AfterValidator(_key)]]
    index: Whole
    id: Annotated[Any, AfterValidator(_record_id)]
    prompt: Annotated[Any, AfterValidator(_prompt)]
    reference: Any
    samples: list[SampleEntry]


RECORD: TypeAdapter[RecordEntry] = TypeAdapter(RecordEntry)
"""Validates one record of a results document."""


RESULTS_VERSION = 1
"""The results file's schema version (its ``version`` key); older files are migrated on read."""


class RunHeader(_Open):
    """A results document without its records: what a run list shows and a run page heads with."""

    schema_version: Literal[1] = Field(alias="version")
    """The layout's version (``version`` in the JSON): files of older versions are migrated when read."""
    kind: Literal["RunResults"]
    name: StrictStr = Field(min_length=1)
    status: StrictStr = "complete"
    spec: dict[str, Any] = Field(default_factory=dict)
    target: dict[str, Any] | None = None
    fingerprints: dict[str, Any] | None = None
    metrics: list[MetricEntry] = Field(default_factory=list)
    on_error: Literal["zero", "none", "raise"] | None = Field(default=None, alias="onError")
    timings: Timings | None = None
    summary: Summary | None = None
    checkpoint: CheckpointSection | None = None

    @field_validator("schema_version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be 1")
        return 1 if value == 1 else value  # a protobuf Struct sends 1.0


class RunResult(RunHeader):
    """A run's results: the header and every record, as a results file holds them.

    What ``evalsi run`` (and a checkpoint's evaluation) builds in memory and writes once, and what every reader
    gets from :func:`evalsi.runs.load_run_result`. Records stay in their JSON form (a run holds 100,000 records or
    more: :data:`RECORD` checks each one; :class:`evalsi.runs.RecordResult` reads one for statistics).
    """

    model: dict[str, Any] | None = None
    """What the target served, when the caller knew it (a checkpoint's files fingerprint and how it was served)."""
    failed: dict[str, StrictStr] | None = None
    """Pairing key -> why the record's generation failed (retried on the next run)."""
    aborted: StrictStr | None = None
    """Why the run stopped early (``onError: raise``), if it did."""
    records: list[RecordEntry] = Field(default_factory=list)

    def header_json(self) -> dict[str, Any]:
        """The JSON form of everything but the records: the fields the results file holds, and those it kept."""
        fields = self.model_dump(by_alias=True, exclude_unset=True, exclude={"schema_version", "kind", "records"})
        return {"version": self.schema_version, "kind": self.kind, **fields}

    def to_json(self) -> dict[str, Any]:
        """The results file's JSON form: the header, then the records (last, so a header reads on its own)."""
        return {**self.header_json(), "records": self.records}

    def dumps(self) -> bytes:
        """The results file's bytes: indented JSON, records last."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2, default=str)

    def write(self, path: str | Path) -> None:
        """Write the results file atomically (a reader sees the old file or the whole new one).

        Args:
            path: Where to write it.

        """
        with atomic_writer(path) as handle:
            handle.write(self.dumps())


RunDocument = RunResult
"""The former name of :class:`RunResult` (what the server accepts in ``CreateRun``)."""


def check_document(document: Any, prefix: str = "") -> RunHeader:
    """Validate a whole results document as :class:`RunResult` does, a record at a time; its header.

    Each record is checked and let go in turn, so a large document is never copied whole.

    Args:
        document: The parsed JSON document (untrusted).
        prefix: What the error paths start with, such as ``results``.

    Raises:
        DataError: A field has the wrong shape; the message names it (`results.records[3].key`: is missing).

    """
    if not isinstance(document, Mapping):
        raise DataError(f"`{prefix or 'the document'}`: must be a results document (an object)")
    try:
        header = header_of(document)
    except ValidationError as exc:
        raise DataError(validation_message(exc, prefix)) from None
    records = document.get("records")
    if records is None:
        return header
    where = error_path(("records",), prefix)
    if not isinstance(records, list):
        raise DataError(f"`{where}`: must be a list")
    for position, record in enumerate(records):
        try:
            RECORD.validate_python(record)
        except ValidationError as exc:
            raise DataError(validation_message(exc, f"{where}[{position}]")) from None
    return header


_MESSAGES = {
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "float_type": "must be a number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "int_parsing": "must be a whole number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "missing": "is missing",
}


def validation_error(model: type[BaseModel], data: Any) -> ValidationError:
    """The error validating ``data`` against ``model`` raises (for doctests and callers that report it).

    Raises:
        ValueError: ``data`` is valid.

    """
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return exc
    raise ValueError("the data is valid")


def error_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """A pydantic error location as a field path: ``summary.gates[0]``, ``records[3].samples[0].tokens``."""
    return format_path((prefix, *loc) if prefix else loc)


def validation_message(exc: ValidationError, prefix: str = "") -> str:
    """The first problem of a validation error as one line, e.g. `results.summary.gates[0]`: must be an object.

    Args:
        exc: pydantic's error.
        prefix: What the field path starts with, such as ``results``.

    """
    error = exc.errors(include_url=False)[0]
    where = error_path(tuple(error["loc"]), prefix) or prefix or "the document"
    kind = error["type"]
    if kind == "literal_error":
        message = f"must be {error['ctx']['expected']}" if "ctx" in error else error["msg"]
    elif kind == "value_error":
        message = str(error["msg"]).removeprefix("Value error, ")
    else:
        message = _MESSAGES.get(kind, str(error["msg"]))
    return f"`{where}`: {message}"


def header_of(document: Mapping[str, Any]) -> RunHeader:
    """A results document's header, validated (its records, if any, are not read).

    Args:
        document: A results document, with or without its records.

    Raises:
        pydantic.ValidationError: A header field has the wrong shape (:func:`validation_message` says which).

    """
    return RunHeader.model_validate({k: v for k, v in document.items() if k != "records"})
