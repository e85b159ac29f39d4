"""The names of the isolation rungs, shared by the specs that ask for one and the sandbox that provides it.

They live below both so the data layer (specs) can type a ``minIsolation`` field without importing the sandbox.
"""

from __future__ import annotations

from typing import Literal

Isolation = Literal["process", "namespaced", "gvisor"]
"""An isolation rung: ``process`` (a plain child process), ``namespaced`` (bubblewrap) or ``gvisor`` (runsc)."""
ISOLATION_ORDER: tuple[Isolation, ...] = ("process", "namespaced", "gvisor")
"""Rungs from lowest to highest isolation."""
