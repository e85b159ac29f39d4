r"""A workspace: one warm sandbox whose work dir persists from command to command, as an agent's episode needs.

A test case's work dir is wiped after its program; a workspace keeps it, so a command sees what the previous one
wrote. Each command is still its own process with its own limits, and every process it started is killed when
it ends (nothing runs between commands). Host directories can be mounted (read-only, or writable to export
files), and on the ``namespaced`` rung the system can come from a root filesystem directory instead of the host.
Workspaces run on every rung: ``process``, ``namespaced`` and ``gvisor``.

Example:
    >>> with Workspace("namespaced") as ws:
    ...     ws.exec(["/bin/sh", "-c", "echo hi > a.txt"]).ok and ws.exec(["/bin/cat", "a.txt"]).stdout
    'hi\n'

"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from evalsi.errors import SandboxError, SandboxUnavailableError
from evalsi.sandbox._gvisor import GvisorRung
from evalsi.sandbox._host import PROBE_SLOT, drop_to, running_as_root, sandbox_uid
from evalsi.sandbox._ladder import RUNGS
from evalsi.sandbox._resident import Resident
from evalsi.sandbox._rungs import SANDBOX_WORKDIR, Launch, NamespacedRung, ProcessRung, Rung, bwrap_argv
from evalsi.sandbox._sandbox import Case, Sandbox
from evalsi.sandbox._seccomp import deny_filter
from evalsi.sandbox._types import Isolation, Limits, RunResult

MAX_SANDBOXES = PROBE_SLOT
"""Sandboxes (workspaces, pool members) that can be alive at once on this machine: one uid slot each."""
IMAGE_PYTHON = "/usr/bin/python3"
"""Where a root filesystem image must have its interpreter (the sandbox's command runner is a Python process)."""


@dataclass(frozen=True, slots=True)
class Mount:
    """A host directory made visible in a workspace at ``target`` (on the ``process`` rung: at its own path)."""

    source: str
    target: str
    writable: bool = False


@dataclass(frozen=True, slots=True)
class Scratch:
    """A writable directory at ``target`` in memory (a tmpfs) holding at most ``max_bytes``.

    A write past it fails with ``ENOSPC``, whatever the program does. It lives as long as the workspace
    (``namespaced`` and ``gvisor`` rungs).
    """

    target: str
    max_bytes: int


class _NamespacedWorkspace(NamespacedRung):
    """The ``namespaced`` rung with extra mounts and, optionally, a root filesystem directory as the system."""

    def __init__(self, mounts: Sequence[Mount], image: str | None, scratch: Sequence[Scratch] = ()) -> None:
        self.mounts = tuple(mounts)
        self.image = image
        self.scratch = tuple((s.target, s.max_bytes) for s in scratch)

    def launch(self, server_source: str, slot: int, memory_bytes: int | None = None) -> Launch:
        """The bubblewrap command line of the base rung, with this workspace's mounts and system."""
        python = IMAGE_PYTHON if self.image else self._python(slot)
        seccomp = os.memfd_create("evalsi-seccomp", 0)
        os.write(seccomp, deny_filter())
        os.lseek(seccomp, 0, os.SEEK_SET)
        binds = [(m.source, m.target, m.writable) for m in self.mounts]
        options = bwrap_argv(python, seccomp, binds, root=self.image, scratch=self.scratch)
        argv = [*options, python, "-I", "-S", "-c", server_source]
        uid = drop_to(sandbox_uid(slot))
        return Launch([*argv, SANDBOX_WORKDIR, "all"], pass_fds=(seccomp,), uid=uid, close_after_start=[seccomp])


def _workspace_rung(rung: Isolation, mounts: Sequence[Mount], image: str | None, scratch: Sequence[Scratch]) -> Rung:
    RUNGS[rung].require()
    if rung == "namespaced":
        if image is not None:
            _check_image(image)
        return _NamespacedWorkspace(mounts, image, scratch)
    if image is not None:
        raise SandboxUnavailableError(f"a root filesystem image needs the 'namespaced' rung, not {rung!r}")
    if rung == "process":
        if scratch:
            raise SandboxUnavailableError("a size-capped scratch directory needs the 'namespaced' or 'gvisor' rung")
        return ProcessRung()  # no namespaces: a mount is its host path, as is
    gvisor = GvisorRung()
    gvisor.binds = tuple((m.source, m.target, m.writable) for m in mounts)
    gvisor.scratch = tuple((s.target, s.max_bytes) for s in scratch)
    return gvisor


def resident(rung: Isolation, argv: Sequence[str], limits: Limits, *, mounts: Sequence[Mount] = ()) -> Resident:
    """A :class:`~evalsi.sandbox.Resident` running ``argv`` at ``rung``, not started yet.

    ``mounts`` are seen as a workspace sees them (read-only unless marked writable);
    :meth:`~evalsi.sandbox.Resident.start` starts it.

    Args:
        rung: The isolation rung.
        argv: The program and its arguments.
        limits: Its limits.
        mounts: Host directories seen inside (read-only unless marked writable).

    Raises:
        SandboxUnavailableError: The rung does not work here.

    """
    return Resident(_workspace_rung(rung, mounts, None, ()), list(argv), limits)


def _check_image(image: str) -> None:
    if not os.path.isdir(image):
        raise SandboxUnavailableError(f"image {image!r} is not a root filesystem directory")
    if not os.path.lexists(os.path.join(image, IMAGE_PYTHON.lstrip("/"))):
        raise SandboxUnavailableError(
            f"image {image!r} has no {IMAGE_PYTHON}: the sandbox runs its commands from a Python process"
        )


class Workspace:
    """A sandbox whose work dir (its current directory) persists across :meth:`exec` calls until :meth:`close`.

    A writable mount's directory is handed to the workspace's uid (when evalsi runs as root), so commands can
    write to it; a read-only one must be readable by that uid. Under gVisor a workspace with a writable mount runs
    its commands as uid 0 inside (with no capabilities; the host sees the workspace's uid), since rootless runsc
    lets only that uid create files in a mount. ``scratch`` adds size-capped writable directories in memory.

    Raises:
        SandboxUnavailableError: The rung does not work here, or the image is not usable.

    """

    def __init__(
        self,
        rung: Isolation = "namespaced",
        *,
        mounts: Sequence[Mount] = (),
        image: str | None = None,
        scratch: Sequence[Scratch] = (),
    ):
        """Set up the workspace's sandbox at ``rung`` with these mounts.

        Args:
            rung: The isolation rung.
            mounts: Host directories seen inside (read-only unless marked writable).
            image: A root filesystem image; None for the host's.
            scratch: Size-capped writable directories in memory.

        """
        self.isolation = rung
        self.mounts = tuple(mounts)
        self._sandbox = Sandbox(_workspace_rung(rung, self.mounts, image, scratch))
        if running_as_root():
            for mount in self.mounts:
                if mount.writable:
                    os.chown(mount.source, self.uid, self.uid)

    @property
    def uid(self) -> int:
        """The host uid the workspace's processes run as (files a mount must let it read or write)."""
        return sandbox_uid(self._sandbox.slot)

    def path(self, mount: Mount) -> str:
        """Where a mount is seen inside the workspace.

        Args:
            mount: One of the workspace's mounts.

        """
        return mount.source if self.isolation == "process" else mount.target

    def exec(
        self, argv: Sequence[str], *, stdin: str = "", limits: Limits | None = None, reset: bool = False
    ) -> RunResult:
        """Run one command in the work dir and return how it ended.

        ``reset`` empties the work dir first. A sandbox that failed is restarted with an empty work dir, and the
        result is marked ``infrastructure``.

        Args:
            argv: The command and its arguments.
            stdin: Its standard input.
            limits: Its limits; None for the defaults.
            reset: Empty the work dir first.

        """
        case = Case("exec", stdin=stdin, argv=tuple(argv))
        try:
            (outcome,) = self._sandbox.run(None, [case], limits or Limits(), workdir="reset" if reset else "keep")
        except SandboxError as exc:
            return RunResult(None, "", "", 0.0, 0.0, "sandbox", detail=str(exc), infrastructure=True)
        return outcome.run

    @property
    def alive(self) -> bool:
        """The workspace's sandbox is running (it starts on the first command, and after a failure)."""
        return self._sandbox.alive

    def close(self) -> None:
        """Stop the sandbox and everything in it; the work dir is gone."""
        self._sandbox.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
