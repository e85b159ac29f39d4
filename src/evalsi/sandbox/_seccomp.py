"""A small seccomp-BPF builder: the deny list bubblewrap loads (``--seccomp FD``) for the ``namespaced`` rung.

Why our own builder rather than a library: the maintained route (libseccomp's Python bindings) does not install
from PyPI here, and ``pyseccomp`` is an unmaintained (2021) ctypes shim needing ``libseccomp.so`` at run time.
The filter we need is a straight line of comparisons (~60 instructions), so a builder that is tested by running
the denied calls inside a real sandbox is smaller and safer than a new native dependency.

Policy (default allow, as Flatpak does; namespaces and rlimits do the rest):

- a foreign architecture or the x32 ABI is refused, so a syscall number cannot be smuggled through another ABI;
- calls that reach other processes' memory, the kernel, mounts, keys or new namespaces fail with ``EPERM``, and
  so do System V IPC and POSIX message queues, whose objects would outlive a program in a reused sandbox;
- ``clone`` with any namespace flag fails with ``EPERM``; ``clone3`` fails with ``ENOSYS`` (libc falls back to
  ``clone``, whose flags we can inspect);
- ``socket`` for any family but ``AF_UNIX`` fails with ``EAFNOSUPPORT``: no network, even inside the empty netns.
"""

from __future__ import annotations

import errno
import platform
import struct

from evalsi.errors import SandboxUnavailableError

# BPF opcodes (linux/filter.h, linux/seccomp.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16

_CLONE_NS_FLAGS = 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00020000
"""CLONE_NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWNS."""

X86_64_DENIED: dict[str, int] = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135, "vhangup": 153, "pivot_root": 155,
    "adjtimex": 159, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212, "clock_settime": 227,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "migrate_pages": 256, "unshare": 272,
    "move_pages": 279, "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "mount_setattr": 442, "quotactl_fd": 443,
    # System V IPC objects outlive the process that made them: a sandbox reused across programs must not
    # carry anything from one program to the next
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240,
}  # fmt: skip
"""Syscalls that fail with EPERM, by x86-64 number."""
_X86_64_CLONE, _X86_64_CLONE3, _X86_64_SOCKET = 56, 435, 41
_AF_UNIX = 1


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    """One ``struct sock_filter``: u16 code, u8 jt, u8 jf, u32 k (native byte order)."""
    return struct.pack("=HBBI", code, jt, jf, k)


def deny_filter() -> bytes:
    """The compiled filter for this machine's architecture, as bubblewrap's ``--seccomp`` expects it.

    Raises:
        SandboxUnavailableError: No filter is defined for this architecture.

    """
    machine = platform.machine()
    if machine not in ("x86_64", "AMD64"):
        raise SandboxUnavailableError(f"evalsi's seccomp filter is defined for x86_64 only, not {machine}")
    prog = [
        _ins(_LD_W_ABS, _OFF_ARCH),
        _ins(_JEQ_K, _AUDIT_ARCH_X86_64, jt=1, jf=0),
        _ins(_RET_K, _RET_KILL_PROCESS),
        _ins(_LD_W_ABS, _OFF_NR),
        _ins(_JGE_K, _X32_SYSCALL_BIT, jt=0, jf=1),
        _ins(_RET_K, _RET_ERRNO | errno.EPERM),
        # clone with namespace flags
        _ins(_JEQ_K, _X86_64_CLONE, jt=0, jf=4),
        _ins(_LD_W_ABS, _OFF_ARG0),
        _ins(_JSET_K, _CLONE_NS_FLAGS, jt=0, jf=1),
        _ins(_RET_K, _RET_ERRNO | errno.EPERM),
        _ins(_RET_K, _RET_ALLOW),
        # socket: AF_UNIX only
        _ins(_JEQ_K, _X86_64_SOCKET, jt=0, jf=4),
        _ins(_LD_W_ABS, _OFF_ARG0),
        _ins(_JEQ_K, _AF_UNIX, jt=0, jf=1),
        _ins(_RET_K, _RET_ALLOW),
        _ins(_RET_K, _RET_ERRNO | errno.EAFNOSUPPORT),
        _ins(_JEQ_K, _X86_64_CLONE3, jt=0, jf=1),
        _ins(_RET_K, _RET_ERRNO | errno.ENOSYS),
    ]
    for number in sorted(X86_64_DENIED.values()):
        prog.append(_ins(_JEQ_K, number, jt=0, jf=1))
        prog.append(_ins(_RET_K, _RET_ERRNO | errno.EPERM))
    prog.append(_ins(_RET_K, _RET_ALLOW))
    return b"".join(prog)
