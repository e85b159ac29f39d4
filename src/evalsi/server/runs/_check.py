"""``CreateRun``'s check of a results document: the model the results viewer reads, applied before anything is stored.

:func:`evalsi.runs.check_document` validates the header (:class:`evalsi.runs.RunHeader`) and every record, so a
run the Run Service stores is one the viewer under ``/ui`` can list and open (a gate that is not an object, a mean
that is text, a record without a key are refused here, naming the field).
"""

from __future__ import annotations

from typing import Any

from evalsi.errors import DataError
from evalsi.runs import check_document
from evalsi.server._errors import ServiceError


def check_results(document: Any) -> None:
    """Refuse a results document the viewer could not read.

    Raises:
        ServiceError: ``invalid_argument`` naming the field (``invalid_record`` when it is in a record).

    """
    try:
        check_document(document, "results")
    except DataError as exc:
        message = str(exc.detail)
        path = message[1 : message.index("`", 1)] if message.startswith("`") else "results"
        code = "invalid_record" if path.startswith("results.records[") else None
        raise ServiceError("invalid_argument", message, code, path=path) from None
