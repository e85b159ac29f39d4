"""The rungs by name, lowest isolation first."""

from __future__ import annotations

from evalsi.sandbox._gvisor import GvisorRung
from evalsi.sandbox._rungs import NamespacedRung, ProcessRung, Rung
from evalsi.sandbox._types import Isolation

RUNGS: dict[Isolation, Rung] = {"process": ProcessRung(), "namespaced": NamespacedRung(), "gvisor": GvisorRung()}
"""Each rung's implementation, by name, lowest isolation first."""
