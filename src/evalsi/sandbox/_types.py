"""The data of the rung interface: limits in, a result (status, output, timing, why it stopped) out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from evalsi._util.isolation import ISOLATION_ORDER as ISOLATION_ORDER  # re-exported: the rungs are the sandbox's
from evalsi._util.isolation import Isolation as Isolation

StopReason = Literal["exit", "timeout", "cpu", "memory", "output", "signal", "sandbox"]
"""Why a run stopped: it exited by itself, ran past its wall time or CPU time, ran out of memory, overflowed
its output, was killed by another signal, or the sandbox itself failed."""


def isolation_level(name: str) -> int:
    """Position of a rung in :data:`ISOLATION_ORDER` (higher isolates more).

    Args:
        name: A rung name.

    """
    return ISOLATION_ORDER.index(name)


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits applied to every run (each test case is its own run)."""

    wall_time: float = 10.0
    """Seconds of wall-clock time before the run and everything it started are killed."""
    cpu_time: int = 10
    """Seconds of CPU time (RLIMIT_CPU)."""
    memory_bytes: int = 512 << 20
    """Memory of the run, all its processes together: its sandbox's cgroup holds them to this (plus the sandbox's
    own overhead: its memory filesystems and runtime), and each one's address space (RLIMIT_AS) to it too. Where
    no cgroup is usable, each process's RLIMIT_AS is ``memory_bytes / max_processes`` instead."""
    max_processes: int = 32
    """Processes and threads the run may have at once (RLIMIT_NPROC in the sandbox's user namespace, and the
    sandbox cgroup's ``pids.max``)."""
    max_output_bytes: int = 1 << 20
    """stdout and stderr beyond this are truncated, and the run is marked."""
    max_file_bytes: int = 16 << 20
    """Largest file the run may write (RLIMIT_FSIZE)."""
    max_open_files: int = 256
    """Open file descriptors (RLIMIT_NOFILE)."""

    def to_wire(self, shared_memory: bool = False) -> dict[str, Any]:
        """The form the fork server reads. ``processes`` counts the server, its init and the tester too.

        ``shared_memory``: a cgroup bounds the sandbox as a whole, so each process may use the whole budget;
        without one, each process's address space is the budget divided across the processes allowed.

        Args:
            shared_memory: Whether the run needs ``/dev/shm``.

        """
        memory = self.memory_bytes if shared_memory else self.memory_bytes // max(1, self.max_processes)
        return {
            "wall": self.wall_time,
            "cpu": max(1, int(self.cpu_time)),
            "memory": memory,
            "processes": self.max_processes + 4,
            "file_size": self.max_file_bytes,
            "open_files": self.max_open_files,
            "output": self.max_output_bytes,
        }


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one run produced, and why it stopped."""

    exit_code: int | None
    """The exit status; negative is the signal that killed it; None when it did not end by itself."""
    stdout: str
    stderr: str
    wall_time: float
    cpu_time: float
    reason: StopReason
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    detail: str = ""
    """For ``sandbox``: what went wrong with the sandbox itself."""
    infrastructure: bool = False
    """The sandbox could not run the case at all (it did not start): not the program's fault."""

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0 and within every limit."""
        return self.reason == "exit" and self.exit_code == 0 and not self.stdout_truncated


_SIGXCPU, _SIGKILL, _SIGSEGV, _SIGXFSZ = 24, 9, 11, 25


def classify(raw: dict[str, Any], limits: Limits) -> RunResult:
    """Turn the fork server's raw report of one case into a :class:`RunResult` with a stop reason."""
    exit_code = raw.get("exit")
    stderr = str(raw.get("stderr", ""))
    reason: StopReason = "exit"
    if raw.get("timed_out"):
        reason = "timeout"
    elif exit_code == -_SIGXCPU or float(raw.get("cpu", 0.0)) >= limits.cpu_time:
        reason = "cpu" if exit_code != 0 else "exit"
    elif raw.get("stdout_truncated") or exit_code == -_SIGXFSZ:
        reason = "output"
    elif "MemoryError" in stderr[-2000:] or (exit_code == -_SIGSEGV and "Fatal Python error" in stderr):
        reason = "memory"
    elif exit_code is not None and exit_code < 0:
        reason = "signal"
    elif exit_code is None:
        reason = "sandbox"
    return RunResult(
        exit_code=exit_code,
        stdout=str(raw.get("stdout", "")),
        stderr=stderr,
        wall_time=float(raw.get("wall", 0.0)),
        cpu_time=float(raw.get("cpu", 0.0)),
        reason=reason,
        stdout_truncated=bool(raw.get("stdout_truncated")),
        stderr_truncated=bool(raw.get("stderr_truncated")),
    )
