"""``CreateRun``'s check of a results document: the library's loader, applied before anything is stored.

:func:`evalsi.runs._result_file.result_from_json` reads the uploaded document as ``evalsi`` reads a results file:
an older layout (no ``version``) is migrated, a newer version is refused, and the header
(:class:`evalsi.runs.RunResult`) and every record are validated, so a run the Run Service stores is one the viewer
under ``/ui`` can list and open (a gate that is not an object, a mean that is text, a record without a key are
refused here, naming the field). The trust limits (depth, sizes, names, records) are the store's and the
transport's.
"""

from __future__ import annotations

from typing import Any

from evalsi.errors import DataError
from evalsi.runs._result_file import result_from_json
from evalsi.server._errors import ServiceError


def check_results(document: Any) -> dict[str, Any]:
    """The results document at the current schema version, or a refusal naming what the viewer could not read.

    Args:
        document: The request's ``results`` (untrusted JSON).

    Returns:
        The document migrated to the current schema version, as the run stores it.

    Raises:
        ServiceError: ``invalid_argument`` naming the field (``invalid_record`` when it is in a record).

    """
    try:
        result = result_from_json(document, "request", prefix="results")
    except DataError as exc:
        message = str(exc.detail)
        path = message[1 : message.index("`", 1)] if message.startswith("`") else "results"
        code = "invalid_record" if path.startswith("results.records[") else None
        raise ServiceError("invalid_argument", message, code, path=path) from None
    return result.to_json()
