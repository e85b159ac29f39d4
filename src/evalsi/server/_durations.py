"""The one duration syntax of the server config: seconds, or a number with a unit (``90s``, ``30m``, ``7d``).

Every section reads its durations through :func:`parse_duration`, so a window, a timeout or a grace period is
written the same way wherever it appears.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as ``90s``, ``30m``, ``12h``, ``7d``, ``1w``.

    Raises:
        ValueError: Not a non-negative duration.

    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '7d', '12h', '30m'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ValueError(f"a duration is a number of seconds or a string like '7d', '12h', '30m' (got {value!r})")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A config field in seconds that also reads ``90s``, ``30m``, ``7d`` (:func:`parse_duration`)."""
