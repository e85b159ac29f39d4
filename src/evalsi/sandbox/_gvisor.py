"""The ``gvisor`` rung: the fork server runs on gVisor's user-space kernel (``runsc``), from an OCI bundle.

The bundle's root is an empty read-only directory holding only ``/usr`` (and the interpreter's bin and lib), a
private tmpfs work dir and a fresh ``/dev``, no ``/proc``: the host's files, secrets and the project checkout
are not there. No network (``--network=none``); rootless ``runsc`` started as the sandbox's unprivileged uid;
the program runs as uid 1000 inside, non-dumpable, with no capabilities and the same seccomp deny list as the
``namespaced`` rung. With a writable mount it runs as uid 0 inside instead, still with no capabilities: rootless
runsc maps only that uid to a host uid (the sandbox's), and a file can be created in a mount only by a uid the
host knows. Debian and Ubuntu package runsc (``apt-get install runsc``).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from typing import Any

from evalsi.sandbox._host import PROBE_SLOT, drop_to, interpreter_dirs, running_as_root, sandbox_python, sandbox_uid
from evalsi.sandbox._rungs import SANDBOX_WORKDIR, TMPFS_BYTES, Availability, Launch, Rung, probe
from evalsi.sandbox._seccomp import X86_64_DENIED
from evalsi.sandbox._types import Isolation

GVISOR_RUNTIME_BYTES = 256 << 20
"""Memory gVisor's own processes (the sentry, the gofer) hold besides the program's budget."""
_FIX = (
    "install gVisor's runsc (Debian/Ubuntu: `apt-get install runsc`; else https://gvisor.dev/docs/user_guide/install/)"
)


class GvisorRung(Rung):
    """gVisor (``runsc run``) around the fork server; see the module docstring for what the sandbox sees."""

    name: Isolation = "gvisor"
    binds: tuple[tuple[str, str, bool], ...] = ()
    """Extra ``(host path, sandbox path, writable)`` mounts (a workspace's)."""
    scratch: tuple[tuple[str, int], ...] = ()
    """Extra ``(sandbox path, bytes)`` writable tmpfs mounts of at most that size (a workspace's)."""

    def availability(self) -> Availability:
        """Runsc installed, and a probe sandbox starts."""
        return _gvisor_availability()

    def memory_overhead(self) -> int:
        """The work dir and scratch (tmpfs in the sentry's memory) and gVisor's own runtime."""
        return TMPFS_BYTES + sum(size for _, size in self.scratch) + GVISOR_RUNTIME_BYTES

    def extra_tasks(self) -> int | None:
        """The sentry and gofer run threads of their own: no ``pids.max`` (gVisor applies RLIMIT_NPROC inside)."""
        return None

    def launch(self, server_source: str, slot: int, memory_bytes: int | None = None) -> Launch:
        """A fresh bundle and state dir, owned by the sandbox uid; ``runsc run`` attached to our stdio.

        ``memory_bytes`` is passed as gVisor's ``--total-memory`` where this runsc has the flag.
        """
        uid = sandbox_uid(slot)
        python = self._python(slot)
        bundle = tempfile.mkdtemp(prefix="evalsi-gvisor-")
        state = os.path.join(bundle, "state")
        os.mkdir(state, 0o700)
        argv = [python, "-I", "-S", "-c", server_source, SANDBOX_WORKDIR, "all", "harden"]
        _write_bundle(bundle, argv, python, self.binds, self.scratch)
        if running_as_root():
            os.chown(state, uid, uid)
        runsc = shutil.which("runsc") or "runsc"
        container = "evalsi-" + secrets.token_hex(6)
        flags = ["--rootless", "--network=none", "--ignore-cgroups", "--oci-seccomp", "--root", state]
        if memory_bytes is not None and has_total_memory():
            flags.append(f"--total-memory={memory_bytes}")
        return Launch(
            [runsc, *flags, "run", "--bundle", bundle, container],
            uid=drop_to(uid),
            remove_after=[bundle],
            sweep_uid=uid if running_as_root() else None,
            cleanup=[[runsc, *flags, "delete", "--force", container]],
        )


def _write_bundle(
    bundle: str,
    args: list[str],
    python: str,
    binds: tuple[tuple[str, str, bool], ...] = (),
    scratch: tuple[tuple[str, int], ...] = (),
) -> None:
    """The OCI bundle: an empty read-only root with mount points, and ``config.json``."""
    os.chmod(bundle, 0o755)
    root = os.path.join(bundle, "rootfs")
    for name in ("usr", "work", "dev", "proc"):
        os.makedirs(os.path.join(root, name))
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
        os.symlink(target, os.path.join(root, link))
    os.symlink("work", os.path.join(root, "tmp"))
    mounts: list[dict[str, Any]] = [
        # runsc mounts a /proc of its own unless one is given: an empty read-only tmpfs hides every process
        {"destination": "/proc", "type": "tmpfs", "source": "tmpfs", "options": ["ro", "nosuid", "nodev", "noexec"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "noexec", "mode=755"]},
        {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
        {"destination": SANDBOX_WORKDIR, "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", f"size={TMPFS_BYTES}", "mode=1777"]},
    ]  # fmt: skip
    for source, target, writable in binds:
        os.makedirs(os.path.join(root, target.lstrip("/")), exist_ok=True)
        mounts.append({"destination": target, "type": "bind", "source": source,
                       "options": ["rbind", "rw" if writable else "ro"]})  # fmt: skip
    for target, size in scratch:
        os.makedirs(os.path.join(root, target.lstrip("/")), exist_ok=True)
        mounts.append({"destination": target, "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", f"size={size}", "mode=1777"]})  # fmt: skip
    for path in interpreter_dirs(python):
        os.makedirs(os.path.join(root, path.lstrip("/")), exist_ok=True)
        mounts.append({"destination": path, "type": "bind", "source": path, "options": ["rbind", "ro"]})
    # uid 0 of rootless runsc is the host's sandbox uid: the one uid that can create files in a writable mount
    uid = 0 if any(writable for _, _, writable in binds) else 1000
    config = {
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": uid, "gid": uid},
            "capabilities": {name: [] for name in ("bounding", "effective", "inheritable", "permitted", "ambient")},
            "args": args,
            "env": ["PATH=/usr/bin:/bin", f"HOME={SANDBOX_WORKDIR}", "LANG=C.UTF-8", f"TMPDIR={SANDBOX_WORKDIR}"],
            "cwd": SANDBOX_WORKDIR,
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            # the same deny list as bubblewrap's filter, applied by gVisor to the program (--oci-seccomp)
            "seccomp": {
                "defaultAction": "SCMP_ACT_ALLOW",
                "architectures": ["SCMP_ARCH_X86_64"],
                "syscalls": [{"names": sorted(X86_64_DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
            },
        },
    }
    with open(os.path.join(bundle, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    for dirpath, dirnames, _ in os.walk(bundle):
        for name in dirnames:
            if name != "state":
                os.chmod(os.path.join(dirpath, name), 0o755)


@functools.lru_cache(maxsize=1)
def has_total_memory() -> bool:
    """Whether this runsc has ``--total-memory`` (the sandbox's memory as its kernel reports and keeps it)."""
    try:
        done = subprocess.run(["runsc", "flags"], capture_output=True, timeout=10, check=False, text=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return "total-memory" in done.stdout + done.stderr


@functools.lru_cache(maxsize=1)
def _gvisor_availability() -> Availability:
    if shutil.which("runsc") is None:
        return Availability("gvisor", False, "gVisor (`runsc`) is not installed", _FIX)
    python = sandbox_python(sandbox_uid(PROBE_SLOT))
    if python is None:
        return Availability("gvisor", False, "no interpreter the sandbox user can start", "install python3")
    error = probe(GvisorRung().launch("import sys; sys.exit(0)", PROBE_SLOT))
    if error:
        return Availability("gvisor", False, f"a probe sandbox failed: {error}", _FIX)
    return Availability("gvisor", True, f"runsc (rootless), minimal root, no network; interpreter {python}")
