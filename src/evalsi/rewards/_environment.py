"""Environment variables a per-sample reward function reads on every call, decoded again only when they change.

OpenRLHF calls its reward function once per rollout, and ``os.environ.get`` encodes the name and decodes the value
on each read: a few reads cost as much as a tenth of scoring a cached rollout. :class:`EnvironmentValues` looks the
raw values up in ``os.environ``'s own mapping and decodes them again only when one of them is no longer the object
it was, so a variable set or removed between calls (``os.environ[...] = ...``, ``monkeypatch.setenv``) is seen
by the next call, as with ``os.environ.get``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class EnvironmentValues:
    """The current values of a few environment variables, as ``os.environ.get`` reads them."""

    def __init__(self, *names: str) -> None:
        """Watch ``names``.

        Args:
            *names: The variables, read in this order.

        """
        self._names = names
        self._keys = tuple(os.environ.encodekey(name) for name in names)
        # (raw values, decoded values), replaced whole so that threads never see one without the other
        self._state: tuple[tuple[Any, ...], tuple[str | None, ...]] = ((), ())

    def read(self) -> tuple[str | None, ...]:
        """Each variable's value, None where it is not set.

        Returns:
            One value per name, in order.

        """
        data: Mapping[Any, Any] | None = getattr(os.environ, "_data", None)
        if data is None:  # another Python's os.environ: read it plainly
            return tuple(os.environ.get(name) for name in self._names)
        get = data.get
        raw = tuple([get(key) for key in self._keys])
        state = self._state
        if raw != state[0]:  # an unchanged value is the same object: compared by identity first
            state = self._state = (raw, tuple(os.environ.get(name) for name in self._names))
        return state[1]
