"""The isolation rungs ``process`` and ``namespaced`` (bubblewrap), and what every rung shares.

A rung knows whether it works here (and if not, what is missing and how to install it) and how to start the
fork server under its isolation. Everything else (cases, limits, verdicts) is shared by every rung.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from evalsi.errors import SandboxUnavailableError
from evalsi.sandbox._host import (
    PROBE_FAILURES,
    PROBE_SLOT,
    as_user,
    drop_to,
    interpreter_dirs,
    running_as_root,
    sandbox_python,
    sandbox_uid,
)
from evalsi.sandbox._seccomp import deny_filter
from evalsi.sandbox._types import Isolation

SANDBOX_WORKDIR = "/work"
TMPFS_BYTES = 256 << 20
"""Size of the sandbox's private writable work dir (a tmpfs)."""
RUNTIME_BYTES = 64 << 20
"""Memory a sandbox's own processes hold (the fork server, bubblewrap), besides its program's budget."""


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether a rung works on this machine; if not, why and how to fix it."""

    rung: Isolation
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class Launch:
    """How to start one sandboxed fork server: argv, inherited fds, identity; and what to clean up after."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    uid: int | None = None
    """Host uid (and gid) to run as, without supplementary groups; None keeps ours."""
    cwd: str | None = None
    close_after_start: list[int] = field(default_factory=list)
    remove_after: list[str] = field(default_factory=list)
    sweep_uid: int | None = None
    """A dedicated uid whose every process is killed when the sandbox closes (as root)."""
    cleanup: list[list[str]] = field(default_factory=list)
    """Commands run (as ``uid``) when the sandbox closes, before its dirs are removed."""


class Rung(ABC):
    """One isolation level; see :data:`evalsi.sandbox.ISOLATION_ORDER`."""

    name: Isolation

    @abstractmethod
    def availability(self) -> Availability:
        """Whether this rung works here; probes once and caches."""

    @abstractmethod
    def launch(self, server_source: str, slot: int, memory_bytes: int | None = None) -> Launch:
        """The command that starts the fork server under this rung for pool slot ``slot``.

        ``memory_bytes`` is the sandbox's memory budget, for a rung whose runtime takes it at start (gVisor).

        Args:
            server_source: The fork server's Python source.
            slot: The pool slot; as root, it picks the unprivileged uid the sandbox runs as.
            memory_bytes: The sandbox's memory budget, for a rung whose runtime takes it at start.

        """

    def memory_overhead(self) -> int:
        """Memory a sandbox of this rung holds besides its program's budget (its cgroup's limit adds this).

        Its memory filesystems (work dir, scratch) and its runtime (the fork server, bubblewrap or gVisor).
        """
        return RUNTIME_BYTES

    def extra_tasks(self) -> int | None:
        """Tasks of the sandbox's own besides the fork server's and its cases'.

        None: too many to count (gVisor's runtime threads), so no ``pids.max``.
        """
        return 0

    def require(self) -> None:
        """Raise :class:`SandboxUnavailableError` naming what is missing when the rung does not work here."""
        found = self.availability()
        if not found.ok:
            raise SandboxUnavailableError(f"the {self.name!r} sandbox is unavailable: {found.detail}. {found.fix}")

    def _python(self, slot: int) -> str:
        python = sandbox_python(sandbox_uid(slot))
        if python is None:
            tried = "; ".join(PROBE_FAILURES) or "no candidate found"
            raise SandboxUnavailableError(f"no Python interpreter the sandbox user can start ({tried})")
        return python


class ProcessRung(Rung):
    """Own session and process group, clean environment, private temporary work dir, rlimits.

    As root, a dedicated unprivileged uid per slot. No namespaces: not a security boundary against a hostile
    program (it can see the host's files and network); use it only for trusted code or where nothing else runs.
    """

    name: Isolation = "process"

    def availability(self) -> Availability:
        """Available wherever a Python interpreter can be started."""
        python = sandbox_python(sandbox_uid(PROBE_SLOT))
        if python is None:
            return Availability("process", False, "no interpreter the sandbox user can start", "install python3")
        return Availability("process", True, f"rlimits, own session, clean env; interpreter {python}")

    def launch(self, server_source: str, slot: int, memory_bytes: int | None = None) -> Launch:
        """Run the server in a fresh 0700 temp dir owned by the sandbox uid."""
        uid = sandbox_uid(slot)
        workdir = tempfile.mkdtemp(prefix="evalsi-sandbox-")
        if running_as_root():
            os.chown(workdir, uid, uid)
        # kill(-1) is safe only when the uid is ours alone (root gave the slot a dedicated uid)
        kill_mode = "all" if running_as_root() else "group"
        argv = [self._python(slot), "-I", "-S", "-c", server_source, workdir, kill_mode, "harden"]
        sweep = uid if running_as_root() else None
        return Launch(argv, uid=drop_to(uid), cwd=workdir, remove_after=[workdir], sweep_uid=sweep)


class NamespacedRung(Rung):
    """bubblewrap: new user, pid, net, ipc, uts (and cgroup) namespaces, no network, seccomp.

    The system is read-only, the work dir a private tmpfs; the sandbox dies with its parent and runs as an
    unprivileged uid with no capabilities (as root, bubblewrap itself is started as a dedicated uid).
    """

    name: Isolation = "namespaced"
    scratch: tuple[tuple[str, int], ...] = ()
    """``(sandbox path, bytes)`` size-capped tmpfs mounts (a workspace's)."""

    def availability(self) -> Availability:
        """Bubblewrap installed, the filter defined for this CPU, and a probe sandbox starts."""
        return _namespaced_availability()

    def memory_overhead(self) -> int:
        """The work dir (a tmpfs: its files are memory) and the runtime."""
        return TMPFS_BYTES + sum(size for _, size in self.scratch) + RUNTIME_BYTES

    def extra_tasks(self) -> int | None:
        """Bubblewrap outside the namespace and its init inside."""
        return 2

    def launch(self, server_source: str, slot: int, memory_bytes: int | None = None) -> Launch:
        """The bubblewrap command line around the server; the seccomp program travels in a memfd."""
        python = self._python(slot)
        seccomp = os.memfd_create("evalsi-seccomp", 0)
        os.write(seccomp, deny_filter())
        os.lseek(seccomp, 0, os.SEEK_SET)
        argv = [*bwrap_argv(python, seccomp), python, "-I", "-S", "-c", server_source, SANDBOX_WORKDIR, "all"]
        uid = sandbox_uid(slot)
        return Launch(argv, pass_fds=(seccomp,), uid=drop_to(uid), close_after_start=[seccomp])


def bwrap_argv(
    python: str,
    seccomp_fd: int,
    binds: Sequence[tuple[str, str, bool]] = (),
    root: str | None = None,
    scratch: Sequence[tuple[str, int]] = (),
) -> list[str]:
    """Bubblewrap options: what the sandbox sees and which namespaces it gets (the command follows ``--``).

    ``binds`` adds ``(host path, sandbox path, writable)`` mounts; ``root`` takes the system directories from a
    root filesystem directory instead of the host's; ``scratch`` adds ``(sandbox path, bytes)`` writable tmpfs
    mounts of at most that size (the kernel refuses writes past it).

    Raises:
        SandboxUnavailableError: ``scratch`` is asked for but this bubblewrap cannot cap a tmpfs (before 0.7).

    """
    args = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", *_if_supported("--disable-userns"),
        "--uid", "1000", "--gid", "1000", "--hostname", "sandbox",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", SANDBOX_WORKDIR,
        "--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", SANDBOX_WORKDIR,
    ]  # fmt: skip
    tops = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32") + (("/etc",) if root else ())
    for top in tops:
        source = os.path.join(root, top.lstrip("/")) if root else top
        if os.path.islink(source):
            args += ["--symlink", os.readlink(source), top]
        elif os.path.isdir(source):
            args += ["--ro-bind", source, top]
    if root is None:
        for path in interpreter_dirs(python):
            args += ["--ro-bind", path, path]
    args += [
        "--dev", "/dev", "--remount-ro", "/dev",
        *_if_supported("--size", str(TMPFS_BYTES)), "--perms", "0700", "--tmpfs", SANDBOX_WORKDIR,
        "--symlink", SANDBOX_WORKDIR, "/tmp",
    ]  # fmt: skip
    for source, target, writable in binds:
        args += ["--bind" if writable else "--ro-bind", source, target]
    for target, size in scratch:
        if not _if_supported("--size"):
            raise SandboxUnavailableError("a size-capped scratch directory needs bubblewrap 0.7 or later (--size)")
        args += ["--size", str(size), "--perms", "0755", "--tmpfs", target]
    args += [
        "--remount-ro", "/",
        "--chdir", SANDBOX_WORKDIR,
        "--seccomp", str(seccomp_fd),
        "--",
    ]  # fmt: skip
    return args


def _if_supported(flag: str, *values: str) -> list[str]:
    """``[flag, *values]`` when this bubblewrap knows the flag, else nothing.

    ``--disable-userns`` and ``--size`` are from bubblewrap 0.8 and 0.7; the seccomp filter refuses new user
    namespaces either way.
    """
    return [flag, *values] if flag in _bwrap_help() else []


@functools.lru_cache(maxsize=1)
def _bwrap_help() -> str:
    try:
        done = subprocess.run(["bwrap", "--help"], capture_output=True, timeout=10, check=False, text=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout + done.stderr


@functools.lru_cache(maxsize=1)
def _namespaced_availability() -> Availability:
    fix = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`)"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Availability("namespaced", False, "bubblewrap (`bwrap`) is not on PATH", fix)
    try:
        deny_filter()
    except SandboxUnavailableError as exc:
        return Availability("namespaced", False, str(exc), "use the 'process' rung or run on x86_64")
    python = sandbox_python(sandbox_uid(PROBE_SLOT))
    if python is None:
        return Availability("namespaced", False, "no interpreter the sandbox user can start", "install python3")
    error = probe(NamespacedRung().launch("import sys; sys.exit(0)", PROBE_SLOT))
    if error:
        hint = "unprivileged user namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1)"
        return Availability("namespaced", False, f"a probe sandbox failed: {error}", hint)
    return Availability("namespaced", True, f"bubblewrap {bwrap}, seccomp, no network; interpreter {python}")


def probe(launch: Launch) -> str:
    """Run a launch's command once (the 'server' is a one-liner that exits); '' when it worked."""
    try:
        done = subprocess.run(
            as_user(launch.argv, launch.uid),
            pass_fds=launch.pass_fds,
            cwd=launch.cwd,
            env={},
            capture_output=True,
            timeout=30,
            check=False,
        )
        return "" if done.returncode == 0 else done.stderr.decode(errors="replace").strip()[-300:] or "failed"
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        for fd in launch.close_after_start:
            os.close(fd)
        finish(launch)


def finish(launch: Launch) -> None:
    """Run a launch's cleanup commands and remove its host dirs (the sandbox's processes are already gone)."""
    run_cleanup(launch)
    for path in launch.remove_after:
        shutil.rmtree(path, ignore_errors=True)


def run_cleanup(launch: Launch) -> None:
    """Run a launch's cleanup commands, as its uid (e.g. ``runsc delete --force``)."""
    for command in launch.cleanup:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                as_user(command, launch.uid),
                env={},
                capture_output=True,
                timeout=30,
                check=False,
            )
