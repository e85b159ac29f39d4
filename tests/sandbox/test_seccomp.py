"""The seccomp deny filter: its encoding, and the denied calls failing inside a real bubblewrap sandbox."""

from __future__ import annotations

import errno
import struct
import sys

import pytest

from evalsi.sandbox import run
from evalsi.sandbox._host import PROBE_SLOT, sandbox_python, sandbox_uid
from evalsi.sandbox._seccomp import X86_64_DENIED, deny_filter

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(60)]
PY = sandbox_python(sandbox_uid(PROBE_SLOT)) or sys.executable

PROBE = r"""
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(name, ctypes.get_errno() if r == -1 else 'allowed')
sc('ptrace', 101, 16, 1, 0, 0)
sc('unshare', 272, 0x10000000)
sc('mount', 165, 0, 0, 0, 0, 0)
sc('bpf', 321, 0, 0, 0)
sc('keyctl', 250, 0, 0, 0, 0, 0)
sc('process_vm_readv', 310, 1, 0, 0, 0, 0, 0)
sc('pidfd_getfd', 438, 0, 0, 0)
sc('clone3', 435, 0, 0)
sc('io_uring_setup', 425, 1, 0)
sc('shmget', 29, 0, 4096, 0o1600)
sc('msgget', 68, 0, 0o1600)
sc('x32_getpid', 39 | 0x40000000)
for family in ('AF_INET', 'AF_INET6', 'AF_NETLINK', 'AF_PACKET'):
    try:
        kind = socket.SOCK_RAW if family in ('AF_NETLINK', 'AF_PACKET') else socket.SOCK_STREAM
        socket.socket(getattr(socket, family), kind)
        print(family, 'allowed')
    except OSError as e:
        print(family, e.errno)
a, b = socket.socketpair()
a.sendall(b'ok'); print('unix', b.recv(2).decode())
pid = os.fork()
if pid == 0:
    os._exit(7)
print('fork', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print('getpid', 'allowed' if os.getpid() > 0 else 'no')
"""


def test_filter_is_whole_instructions_ending_in_allow():
    program = deny_filter()
    assert len(program) % 8 == 0
    assert len(program) // 8 < 4096  # the kernel's BPF_MAXINSNS
    code, _jt, _jf, k = struct.unpack("=HBBI", program[-8:])
    assert (code, k) == (0x06, 0x7FFF0000)  # RET ALLOW by default
    assert len(program) // 8 >= 2 * len(X86_64_DENIED)


def test_denied_calls_fail_inside_the_sandbox_and_ordinary_ones_work():
    result = run([PY, "-I", "-S", "-c", PROBE], rung="namespaced")
    got = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    eperm, enosys = str(errno.EPERM), str(errno.ENOSYS)
    denied = ["ptrace", "unshare", "mount", "bpf", "keyctl", "process_vm_readv", "pidfd_getfd", "io_uring_setup"]
    for name in [*denied, "shmget", "msgget"]:
        assert got[name] == eperm, (name, result)
    assert got["x32_getpid"] == eperm
    assert got["clone3"] == enosys  # so libc falls back to clone, whose flags the filter checks
    for family in ("AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET"):
        assert got[family] == str(errno.EAFNOSUPPORT), family
    assert got["unix"] == "ok"
    assert got["fork"] == "7"
    assert got["getpid"] == "allowed"
