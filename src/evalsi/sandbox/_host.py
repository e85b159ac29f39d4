"""Host facts the rungs depend on: which uid runs sandboxed code, and which interpreter it can start."""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import sys
import threading

SANDBOX_UID_BASE = 61000
"""When evalsi runs as root, sandboxed code runs as ``SANDBOX_UID_BASE + slot``: never root, and one uid per
pool slot so process limits (RLIMIT_NPROC) and ``kill(-1)`` reach only that slot's processes."""


def running_as_root() -> bool:
    """True when evalsi itself runs as root (CI and these machines do)."""
    return os.geteuid() == 0


def sandbox_uid(slot: int) -> int:
    """The host uid (and gid) that a pool slot's sandbox runs as."""
    return SANDBOX_UID_BASE + slot % 1000 if running_as_root() else os.getuid()


PROBE_SLOT = 999
"""The slot (uid) of availability probes and interpreter checks: never given to a sandbox, so a process-rung
sandbox's ``kill(-1)`` (all of its uid's processes) can never hit a probe, nor a probe's uid a sandbox."""
_slots_in_use: dict[int, int | None] = {}
_slots_lock = threading.Lock()


def acquire_slot() -> int:
    """A slot no other live sandbox uses, in this process or any other.

    As root, a lock file per slot is held for the sandbox's life, so sandbox uids never collide: a process-rung
    ``kill(-1)`` reaches only its own processes.
    """
    with _slots_lock:
        for slot in range(PROBE_SLOT):
            if slot in _slots_in_use:
                continue
            lock = _lock_slot(slot) if running_as_root() else None
            if running_as_root() and lock is None:
                continue  # another evalsi process has it
            _slots_in_use[slot] = lock
            return slot
    raise RuntimeError(f"all {PROBE_SLOT} sandbox slots are in use")


def release_slot(slot: int) -> None:
    """Give a slot back once its sandbox is closed for good."""
    with _slots_lock:
        lock = _slots_in_use.pop(slot, None)
    if lock is not None:
        os.close(lock)


SLOT_LOCK_DIRS = ("/run/evalsi-sandbox-slots", "/tmp/evalsi-sandbox-slots")
"""Where slot lock files live: a fixed, machine-wide path (the first whose parent is writable), never under
``$TMPDIR``: two evalsi processes with different temporary folders (a Ray worker's, a test's) must still see each
other's slots, or both could give one uid to two sandboxes, and one sandbox's cleanup (``kill(-1)`` as its uid)
would end the other's program."""


def slot_lock_dir() -> str:
    """The machine-wide folder of slot lock files (see :data:`SLOT_LOCK_DIRS`)."""
    for folder in SLOT_LOCK_DIRS:
        if os.access(os.path.dirname(folder), os.W_OK):
            return folder
    return SLOT_LOCK_DIRS[-1]


def _lock_slot(slot: int) -> int | None:
    folder = slot_lock_dir()
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(folder, f"{slot}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


_SETUID_SHIM = (
    "import os, sys; u = int(sys.argv[1]); os.setgroups([]); os.setgid(u); os.setuid(u); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def as_user(argv: list[str], uid: int | None) -> list[str]:
    """``argv`` that runs as host ``uid`` (and gid, no supplementary groups), or as we are when ``uid`` is None.

    The switch happens in a small program that then execs ``argv`` (coreutils ``chroot --userspec`` onto ``/``,
    which drops groups, gid and uid before exec exactly as ``subprocess``'s ``user=`` does; a minimal Python
    shim where it is missing), never in a forked copy of this process: ``subprocess`` can then start the child
    with ``vfork``, which runs no fork handlers. A forked copy of a process whose threads are inside gRPC (the
    server) inherits gRPC's broken pollers, and the sandbox does not start. (``setpriv`` would not do: it keeps
    its capabilities until exec, so the program would be found with root's rights.)
    """
    if uid is None:
        return argv
    chroot = _chroot()
    if chroot is not None:
        return [chroot, "--skip-chdir", f"--userspec={uid}:{uid}", "/", *argv]
    return [sys.executable, "-I", "-S", "-c", _SETUID_SHIM, str(uid), *argv]


@functools.cache
def _chroot() -> str | None:
    found = shutil.which("chroot") or next(
        (path for path in ("/usr/sbin/chroot", "/usr/bin/chroot") if os.access(path, os.X_OK)), None
    )
    return found


def drop_to(uid: int) -> int | None:
    """The uid to switch to when starting sandboxed processes: ``uid`` as root, else None (stay as we are)."""
    return uid if running_as_root() else None


_PROBE = "import json, os, socket, resource, select; os.pidfd_open, os.memfd_create, os.waitstatus_to_exitcode"
"""What the fork server needs of an interpreter (Python >= 3.9 on Linux)."""


def _candidates() -> list[str]:
    seen: list[str] = []
    for path in (
        getattr(sys, "_base_executable", sys.executable),
        sys.executable,
        "/usr/bin/python3",
        "/usr/local/bin/python3",
        shutil.which("python3") or "",
    ):
        real = os.path.realpath(path) if path else ""
        if real and os.path.isfile(real) and real not in seen and "shims" not in real.split(os.sep):
            seen.append(real)
    return seen


_found: dict[int, str] = {}
PROBE_FAILURES: list[str] = []
"""Why candidate interpreters were refused (the last few), for error messages."""


def sandbox_python(uid: int) -> str | None:
    """The real path of a Python interpreter that ``uid`` can start with only the standard library.

    evalsi's own interpreter comes first; when it lives where the sandbox uid cannot read it (pyenv under a
    0700 ``/root``), a system interpreter is used instead. Never a pyenv shim (≈180 ms per start). Only a
    success is remembered (once for all sandbox uids): a probe that failed by accident (a loaded machine) is
    tried again next time.
    """
    found = _found.get(_probe_key(uid))
    if found is not None:
        return found
    for path in _candidates():
        if _starts(path, uid):
            _found[_probe_key(uid)] = path
            return path
    return None


def _probe_key(uid: int) -> int:
    """The key a probe's answer is kept under: one for every sandbox uid.

    Sandbox uids have no groups and own none of an interpreter's files, so what one starts every one starts:
    one probe serves them all (a new pool slot does not pay for an interpreter start).
    """
    if running_as_root() and SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + 1000:
        return SANDBOX_UID_BASE
    return uid


def _starts(path: str, uid: int) -> bool:
    who = drop_to(uid)
    for _ in range(2):
        try:
            done = subprocess.run(
                as_user([path, "-I", "-S", "-c", _PROBE], who), env={}, capture_output=True, timeout=30, check=False
            )
        except PermissionError as exc:
            PROBE_FAILURES[:] = [*PROBE_FAILURES[-4:], f"{path}: {exc.strerror}"]
            return False  # not readable by this uid: retrying will not help
        except (OSError, subprocess.SubprocessError) as exc:
            PROBE_FAILURES[:] = [*PROBE_FAILURES[-4:], f"{path}: {exc}"]
            continue
        if done.returncode == 0:
            return True
        detail = done.stderr.decode(errors="replace").strip()[-200:]
        PROBE_FAILURES[:] = [*PROBE_FAILURES[-4:], f"{path}: exit {done.returncode} {detail}"]
    return False


def python_prefix(python: str) -> str:
    """The install root of an interpreter (``/usr`` for ``/usr/bin/python3.11``)."""
    return os.path.dirname(os.path.dirname(python))


def interpreter_dirs(python: str) -> list[str]:
    """Host dirs a sandbox must mount read-only for ``python`` to start, besides the system's ``/usr``.

    Only the install's ``bin`` and ``lib`` (never the whole prefix, which may be a home dir or ``/``): nothing
    else of the host is mounted.
    """
    prefix = python_prefix(python)
    if prefix in ("", "/") or prefix == "/usr" or prefix.startswith("/usr/"):
        return []
    return [path for path in (os.path.join(prefix, "bin"), os.path.join(prefix, "lib")) if os.path.isdir(path)]
