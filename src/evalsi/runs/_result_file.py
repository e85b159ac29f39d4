"""Reading a results file: one loader that migrates older layouts and checks every field it reads.

:func:`load_run_result` is how a results file is read (the CLI, training, the viewer's fallback, the loggers): the
JSON is parsed, brought to the current schema version (:data:`RESULTS_VERSION`) by :func:`migrate_result`, and
validated as a :class:`RunResult` (its header, then each record), so bad input fails with the file and the field
(`` `records[3].key`: is missing``) rather than a ``KeyError`` later.

Versions: a file without ``version`` was written before the layout carried one (the same keys otherwise) and is
read as version 1; a version newer than this evalsi knows is refused with a message saying to upgrade.

Example:
    >>> migrate_result({"kind": "RunResults", "name": "r", "records": []}, "r.json")["version"]
    1
    >>> migrate_result({"version": 9, "kind": "RunResults"}, "r.json")
    Traceback (most recent call last):
    ...
    evalsi.errors.DataError: r.json: `version`: 9 is newer than this evalsi reads (1); upgrade evalsi to read it

"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from evalsi.errors import DataError
from evalsi.runs._document import RECORD, RESULTS_KIND, RESULTS_VERSION, RunResult, error_path, validation_message

Migration = Callable[[dict[str, Any], str], dict[str, Any]]
"""Brings a results document from one schema version to the next (``file`` names it in errors)."""


def _from_unversioned(data: dict[str, Any], file: str) -> dict[str, Any]:
    """Version 0 (no ``version`` key) to 1: the same layout; ``kind`` may be missing where records say what it is."""
    kind = data.get("kind", RESULTS_KIND if isinstance(data.get("records"), list) else None)
    if kind != RESULTS_KIND:
        raise DataError("not an evalsi results file (no kind: RunResults and no records)", file=file)
    return {"version": 1, "kind": RESULTS_KIND, **{k: v for k, v in data.items() if k not in ("version", "kind")}}


MIGRATIONS: dict[int, Migration] = {0: _from_unversioned}
"""Version -> what brings a document of that version to the next one."""


def _named(prefix: str, *field: str) -> str:
    """The start of a message about ``field`` of a document nested under ``prefix`` (no prefix: a whole file)."""
    return f"`{error_path(field, prefix)}`: " if prefix else ""


def schema_version(data: dict[str, Any], file: str, *, prefix: str = "") -> int:
    """A results document's schema version: its ``version`` key, 0 when it has none.

    Args:
        data: The results document.
        file: Where it came from, for messages.
        prefix: The document's field path in a larger one (``results`` in a request), for messages.

    Raises:
        DataError: ``version`` is not a whole number from 0 to :data:`RESULTS_VERSION`.

    """
    if "version" not in data:
        return 0
    version = data["version"]
    where = error_path(("version",), prefix)
    if isinstance(version, float) and version.is_integer():
        version = int(version)  # a protobuf Struct number
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise DataError(
            f"`{where}`: must be a whole number (the schema version, {RESULTS_VERSION}), got {version!r}", file=file
        )
    if version > RESULTS_VERSION:
        raise DataError(
            f"`{where}`: {version} is newer than this evalsi reads ({RESULTS_VERSION}); upgrade evalsi to read it",
            file=file,
        )
    return version


def migrate_result(data: Any, file: str, *, prefix: str = "") -> dict[str, Any]:
    """A results document brought to the current schema version (the input is not changed).

    Args:
        data: The parsed results document.
        file: Where it came from, for messages.
        prefix: The document's field path in a larger one (``results`` in a request), for messages.

    Returns:
        The document at :data:`RESULTS_VERSION` (``data`` itself when it already is).

    Raises:
        DataError: The document is not a JSON object, not a results file, or of an unknown version.

    """
    if not isinstance(data, dict):
        raise DataError(f"{_named(prefix)}not an evalsi results file (not a JSON object)", file=file)
    document: dict[str, Any] = data
    version = schema_version(document, file, prefix=prefix)
    if version == RESULTS_VERSION and document.get("kind") != RESULTS_KIND:
        raise DataError(f"{_named(prefix, 'kind')}not an evalsi results file (no kind: RunResults)", file=file)
    while version < RESULTS_VERSION:
        try:
            document = MIGRATIONS[version](document, file)
        except DataError as exc:
            raise DataError(f"{_named(prefix, 'kind')}{exc.detail}", file=file) from None
        version += 1
    return document


def result_from_json(data: Any, file: str, *, records: bool = True, prefix: str = "") -> RunResult:
    """A results document (parsed JSON, or one in memory) migrated and validated: the header, then every record.

    Records are checked one at a time and kept as they are (not copied), so a large document is validated in
    place; the server's ``CreateRun`` checks an uploaded document this way.

    Args:
        data: The parsed results document.
        file: Where it came from, for messages (a path, or ``request``).
        records: Check and keep the records (false: neither, for a reader that needs the header alone).
        prefix: The document's field path in a larger one (``results`` in a request): messages name fields under
            it (`` `results.records[3].key`: is missing``).

    Returns:
        The run's results, at the current schema version.

    Raises:
        DataError: The document is not a results file, is of a newer version, or a field has the wrong shape; the
            message names the file and the field.

    """
    document = migrate_result(data, file, prefix=prefix)
    entries = document.get("records") if records else None
    if entries is None:
        entries = []
    where = error_path(("records",), prefix)
    if not isinstance(entries, list):
        raise DataError(f"`{where}`: must be a list", file=file)
    try:
        result = RunResult.model_validate({k: v for k, v in document.items() if k != "records"})
    except ValidationError as exc:
        raise DataError(validation_message(exc, prefix), file=file) from None
    for position, record in enumerate(entries):
        try:
            RECORD.validate_python(record)
        except ValidationError as exc:
            raise DataError(validation_message(exc, f"{where}[{position}]"), file=file) from None
    result.records = entries
    return result


def load_run_result(path: str | Path, *, records: bool = True) -> RunResult:
    """Read a results file: parsed, migrated to the current schema version, and validated.

    Args:
        path: The results file.
        records: Check and keep the records (false: the header alone, e.g. to see whether a run is complete).

    Returns:
        The run's results.

    Raises:
        DataError: The file is missing, not JSON, not a results file, of a newer version, or a field has the wrong
            shape (the message names the file and the field).

    """
    file = str(path)
    try:
        data = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise DataError("no such results file", file=file) from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise DataError(f"not a readable results file: {exc}", file=file) from None
    return result_from_json(data, file, records=records)
