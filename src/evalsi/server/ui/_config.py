"""The ``ui:`` section of the server config: the results viewer under ``/ui``."""

from __future__ import annotations

from pydantic import Field

from evalsi.server._durations import Duration
from evalsi.specs._model import SpecModel as _Model


class UiConfig(_Model):
    """The results viewer the server serves under ``/ui``."""

    enabled: bool = True
    """Serve ``/ui`` (tokens with ``evaluations.run`` see their own project's results)."""
    cache_bytes: int = Field(default=512 << 20, ge=0)
    """Estimated memory of the runs the viewer keeps open, across projects (about twice a run's JSON, its index
    and search text included); past it the least recently opened are dropped and read again when next opened. The
    run just opened is kept even when it alone is larger."""
    session_ttl: Duration = Field(default=12 * 3600.0, gt=0)
    """How long a browser's sign-in lasts: seconds, or ``12h``, ``30m``. A session also ends when it signs out
    and when its token is revoked."""
