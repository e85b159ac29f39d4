"""The retry policy every HTTP client of evalsi shares: which answers to retry, and how long to wait."""

from __future__ import annotations

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
"""Answers worth another try: timeouts, rate limits and server-side failures."""

MAX_DELAY = 30.0
"""No wait between tries exceeds this many seconds, whatever the backoff or a server's ``Retry-After``."""


def retry_delay(attempt: int, backoff: float, retry_after: str | None = None, cap: float = MAX_DELAY) -> float:
    """Seconds to wait before try ``attempt + 1``: exponential backoff, or the server's ``Retry-After`` seconds.

    Example:
        >>> retry_delay(0, 0.5), retry_delay(3, 0.5), retry_delay(1, 0.5, "2"), retry_delay(9, 1.0)
        (0.5, 4.0, 2.0, 30.0)

    """
    if retry_after is not None:
        try:
            return min(max(float(retry_after), 0.0), cap)
        except ValueError:
            pass  # an HTTP date or garbage: fall back to backoff
    return float(min(backoff * 2**attempt, cap))
