r"""Running untrusted code, by isolation rung: ``process`` < ``namespaced`` (bubblewrap) < ``gvisor`` (runsc).

Every rung runs a small fork server (``python -I -S``) inside its isolation; each test case is a process forked
from it with its own limits (:class:`Limits`), and the result says how it ended (:class:`RunResult`).
``min_isolation`` is a floor: :func:`require` raises, naming what is missing, when no rung at or above it works.

Example:
    >>> from evalsi.sandbox import run
    >>> run(["/usr/bin/python3", "-c", "print(input()[::-1])"], stdin="abc", rung="namespaced").stdout
    'cba\n'

"""

from __future__ import annotations

from evalsi._util.public import publish
from evalsi.errors import SandboxError, SandboxUnavailableError
from evalsi.sandbox._cgroups import controllers
from evalsi.sandbox._gvisor import has_total_memory
from evalsi.sandbox._ladder import RUNGS
from evalsi.sandbox._pool import SandboxPool, close_shared_pools, shared_pool
from evalsi.sandbox._resident import Answer, Resident
from evalsi.sandbox._rungs import Availability, Rung
from evalsi.sandbox._sandbox import Case, CaseOutcome, Sandbox
from evalsi.sandbox._types import ISOLATION_ORDER, Isolation, Limits, RunResult, StopReason, isolation_level
from evalsi.sandbox._workspace import MAX_SANDBOXES, Mount, Scratch, Workspace, resident

__all__ = [
    "ISOLATION_ORDER",
    "MAX_SANDBOXES",
    "RUNGS",
    "Answer",
    "Availability",
    "Case",
    "CaseOutcome",
    "Isolation",
    "Limits",
    "Mount",
    "Resident",
    "RunResult",
    "Rung",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "Scratch",
    "StopReason",
    "Workspace",
    "available_rungs",
    "best_available",
    "close_shared_pools",
    "doctor",
    "isolation_level",
    "memory_bound",
    "require",
    "resident",
    "run",
    "shared_pool",
]


def doctor() -> list[Availability]:
    """Whether each rung works on this machine, lowest first, with what is missing and how to install it."""
    return [RUNGS[name].availability() for name in ISOLATION_ORDER]


def memory_bound() -> str:
    """Which bound holds a sandbox's memory and processes as a whole here (see :mod:`evalsi.sandbox._cgroups`)."""
    line = controllers().describe()
    if RUNGS["gvisor"].availability().ok:
        line += "; gvisor: " + ("--total-memory and " if has_total_memory() else "") + "runsc inside the same bound"
    return line


def available_rungs() -> list[Isolation]:
    """The rungs that work here, lowest first."""
    return [found.rung for found in doctor() if found.ok]


def best_available() -> Isolation | None:
    """The highest rung that works here, or None."""
    rungs = available_rungs()
    return rungs[-1] if rungs else None


def require(min_isolation: Isolation) -> Isolation:
    """The rung to run at for a floor of ``min_isolation``: the floor itself when it works, else a higher one.

    Args:
        min_isolation: The least isolation acceptable.

    Raises:
        SandboxUnavailableError: No rung at or above the floor works; the message names what is missing for
            each and how to install it. Code never silently runs at a lower rung.

    """
    floor = isolation_level(min_isolation)
    missing: list[str] = []
    for name in ISOLATION_ORDER[floor:]:
        found = RUNGS[name].availability()
        if found.ok:
            return name
        missing.append(f"{name}: {found.detail}" + (f" ({found.fix})" if found.fix else ""))
    raise SandboxUnavailableError(
        f"min_isolation is {min_isolation!r} but no sandbox at or above it works here; " + "; ".join(missing)
    )


def run(
    argv: list[str],
    *,
    stdin: str = "",
    files: dict[str, str] | None = None,
    limits: Limits | None = None,
    rung: Isolation = "namespaced",
) -> RunResult:
    """Run one program in a fresh sandbox of ``rung``, with ``files`` in its work dir, and return how it ended.

    Args:
        argv: The program and its arguments.
        stdin: Its standard input.
        files: Files written into the work dir first (name to text).
        limits: Its limits; None for the defaults.
        rung: The isolation rung.

    Raises:
        SandboxUnavailableError: The rung does not work here.

    """
    RUNGS[rung].require()
    sandbox = Sandbox(RUNGS[rung])
    try:
        (outcome,) = sandbox.run(None, [Case("exec", stdin=stdin, argv=tuple(argv))], limits or Limits(), files)
        return outcome.run
    finally:
        sandbox.close()


publish(__name__)
