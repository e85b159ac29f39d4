"""The ``runs:`` section of the server config: the Run Service's limits."""

from __future__ import annotations

from pydantic import Field

from evalsi.specs._model import SpecModel as _Model


class RunsConfig(_Model):
    """Limits of the Run Service."""

    max_compare_bytes: int = Field(default=512 << 20, ge=1024)
    """Most stored bytes (both runs together) one ``CompareRuns`` reads; a larger comparison is refused
    ``resource_exhausted`` (HTTP 413) naming this limit. The bytes read are held in the project's share of
    ``rewards.max_inflight_bytes`` while it runs."""
