"""A job's output dataset as it is written: rows spooled to a file as batches return, counted against a cap.

The server never holds a job's output in memory while the job runs: each output row is encoded and appended to
an unnamed temporary file as its batch returns, and its bytes counted against ``jobs.max_output_bytes``. A row
that would pass the cap fails the job at once, naming the cap; nothing is stored. Only a finished, capped
output is read back, once, to be stored as the dataset.
"""

from __future__ import annotations

import tempfile
from typing import Any

import orjson

from evalsi.server._errors import ServiceError


class OutputSpool:
    """The output rows written so far, on disk, within ``limit`` bytes of JSONL."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.rows = 0
        self._file = tempfile.TemporaryFile(prefix="evalsi-job-output-")  # noqa: SIM115 (closed by close())

    def write(self, row: dict[str, Any]) -> None:
        """Append one output row.

        Raises:
            ServiceError: ``resource_exhausted`` when the output would pass ``jobs.max_output_bytes``.

        """
        line = orjson.dumps(row) + b"\n"
        if self.size + len(line) > self.limit:
            raise ServiceError(
                "resource_exhausted",
                f"the job's output dataset passed jobs.max_output_bytes={self.limit} bytes at row {self.rows + 1} "
                f"(its first {self.rows} rows took {self.size} bytes); nothing was stored: make the evaluator's "
                "reasons shorter, score fewer rows per job, or ask the operator for a larger limit",
                "job_output_too_large",
                limit=self.limit,
            )
        self._file.write(line)
        self.size += len(line)
        self.rows += 1

    def content(self) -> bytes:
        """Every row written, as JSONL (at most ``limit`` bytes)."""
        self._file.flush()
        self._file.seek(0)
        return self._file.read(self.limit)

    def close(self) -> None:
        """Remove the spool file."""
        self._file.close()


def output_row(row: dict[str, Any], result: dict[str, Any], generation: dict[str, Any] | None) -> dict[str, Any]:
    """The input row with its generation record, and its ``evaluation_result`` or ``evaluation_error``."""
    out = dict(row)
    if generation is not None:
        out["generation"] = generation
    if "error" in result:
        out["evaluation_error"] = str(result["error"])
    else:
        out["evaluation_result"] = {
            "score": result.get("score"),
            "reason": result.get("reason"),
            "metrics": result.get("metrics") or {},
        }
    return out
