"""The warm fork server that runs *inside* a sandbox (stdlib only; started as ``python -I -S -c <this file>``).

Why a fork server: a fresh interpreter costs ~16 ms (~25 ms inside bubblewrap) per test case, a fork of this
small process ~2 ms. The server never imports evalsi and never sees expected outputs or test code, so a forked
case cannot find them in memory.

Protocol, on the control socket (fd 0 at start, moved away so model code cannot inherit it): frames of a 4-byte
big-endian length and UTF-8 JSON. The host sends ``{"op": "program", ...}`` with the program's source and its
cases, plus (SCM_RIGHTS) one socket per ``call`` case; the server answers ``{"op": "results", "nonce": ...}``.

Per case, in a fresh process (the *program* P): new session, stdio on memfds, fds closed, rlimits set, then the
program's code runs in fresh globals. ``stdio`` cases end there (the host compares the output outside).
``call`` cases also fork a *tester* T, which reads the test payload directly from the host's socket (so the
server never holds it), calls P's functions over a socketpair with plain data only (no objects, so no
``__eq__`` tricks), and writes its verdict, with the host's nonce, on that socket: P never holds it. After each
case every process the case started is killed (``kill(-1)`` in the sandbox's pid namespace, or in the
dedicated uid of the process rung).
"""

# ruff: noqa: SIM105  (no contextlib: the fork server imports as little as it can)
from __future__ import annotations

import builtins
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

if __name__ != "__main__":  # imported by the host or tests; when the server runs, _calls.py is prepended
    from evalsi.sandbox._calls import recv_exact, send_frame, serve_calls, tester_main

WORKDIR = "/work"
KILL_ALL = True
STDIO: tuple[Any, Any, Any] = (None, None, None)
"""The text streams of a case's fds 0, 1 and 2, made once by the server (see :func:`make_stdio`)."""
_LIMIT_NAMES = {
    "cpu": resource.RLIMIT_CPU,
    "memory": resource.RLIMIT_AS,
    "processes": resource.RLIMIT_NPROC,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
}


def recv_request(ctl: socket.socket) -> tuple[Any, list[int]]:
    """A frame plus any fds sent with its first bytes."""
    fds: list[int] = []
    head = b""
    while len(head) < 4:
        data, anc, _flags, _addr = ctl.recvmsg(4 - len(head), socket.CMSG_SPACE(253 * 4))
        if not data:
            raise EOFError("host closed")
        head += data
        for level, kind, blob in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(blob) // 4}i", blob[: len(blob) - len(blob) % 4]))
    (n,) = struct.unpack(">I", head)
    return json.loads(recv_exact(ctl, n)), fds


# ---- the case processes -----------------------------------------------------------------------------------------


def close_fds_except(keep: set[int]) -> None:
    """Close every file descriptor from 3 up, except those in ``keep``.

    Args:
        keep: The descriptors to leave open.

    """
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 65536)


def make_stdio() -> tuple[Any, Any, Any]:
    """Text streams over fds 0, 1 and 2 that a case inherits unused: its own fds are dup'ed onto those numbers.

    Made once in the server rather than in every case: every object a forked process creates or touches costs it
    a copied page, and three fresh streams were a third of a trivial case's page copies.
    """
    return (
        open(0, encoding="utf-8", errors="replace", closefd=False),
        open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
        open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
    )


def rlimits(limits: dict[str, int]) -> list[tuple[int, int, int]]:
    """``(resource, soft, hard)`` for each limit a case sets, worked out once per program (not in each case)."""
    out = []
    for name, value in limits.items():
        which = _LIMIT_NAMES.get(name)
        if which is not None and value > 0:
            out.append((which, value, value + 1 if name == "cpu" else value))
    out.append((resource.RLIMIT_CORE, 0, 0))
    return out


def enter_case(limits: list[tuple[int, int, int]], stdio: tuple[int, int, int], keep: set[int]) -> None:
    """Common start of P and T: own session, stdio, nothing inherited, limits, the work dir.

    SIGINT is already at its default (the server set it once), and the text streams are the server's unused
    ones over the fds just replaced.
    """
    os.setsid()
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    close_fds_except(keep)
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))
    os.chdir(WORKDIR)
    sys.stdin, sys.stdout, sys.stderr = STDIO


def run_program(code: Any, name: str) -> dict[str, Any]:
    """Run the program's module code in fresh globals; returns them. SystemExit ends the process as Python would.

    A stdin/stdout program runs as ``__main__``; a program whose functions are tested does not, so its demo
    block (``if __name__ == "__main__": main()``) stays quiet, as in HumanEval's and MBPP's own harnesses.
    """
    g: dict[str, Any] = {"__name__": name, "__builtins__": builtins, "__file__": "main.py"}
    exec(code, g)
    return g


def exit_with(status: int) -> None:
    """Flush stdout and stderr (ignoring any error) and end the process at once with ``status``.

    Args:
        status: The exit status.

    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)


def program_main(code: Any, mode: str, peer: int) -> None:
    """Body of P: run the program; in call mode then answer calls on ``peer`` with plain data."""
    status = 0
    try:
        g = run_program(code, "solution" if mode == "call" else "__main__")
        if mode == "call":
            serve_calls(g, socket.socket(fileno=peer))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    exit_with(status & 0xFF)


# ---- running cases ---------------------------------------------------------------------------------------------


def memfd(name: str, data: bytes = b"") -> int:
    """A new memory file holding ``data``.

    Args:
        name: The memory file's name (for ``/proc``).
        data: Its first contents.

    """
    fd = os.memfd_create(name, 0)
    if data:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def read_capped(fd: int, cap: int) -> tuple[str, bool]:
    """The text of memory file ``fd`` (from its start, at most ``cap`` bytes) and whether it was longer.

    Args:
        fd: The file descriptor.
        cap: The most bytes read.

    """
    # sized by the file, not the cap: a read of cap + 1 bytes allocates (and frees) a buffer that big every case
    data = os.pread(fd, min(os.fstat(fd).st_size, cap) + 1, 0)
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


def wait_deadline(pids: list[int], deadline: float) -> bool:
    """Wait until every pid exited or the deadline passed; True when they all exited in time (none is reaped)."""
    try:
        fds = {os.pidfd_open(p): p for p in pids}
    except OSError:  # no pidfd (gVisor): poll, leaving the zombies for wait4
        return poll_deadline(pids, deadline)
    try:
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select(list(fds), [], [], left)
            for fd in ready:
                fds.pop(fd)
                os.close(fd)
        return True
    finally:
        for fd in fds:
            os.close(fd)


def poll_deadline(pids: list[int], deadline: float) -> bool:
    """Wait, without reaping, until every process in ``pids`` has exited; False when ``deadline`` comes first.

    Args:
        pids: The processes.
        deadline: The ``time.monotonic()`` to give up at.

    """
    pause = 0.0002
    left = list(pids)
    while left:
        left = [p for p in left if os.waitid(os.P_PID, p, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None]
        if not left:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.005)
    return True


def kill_everything(pgids: list[int]) -> bool:
    """Kill every process the case started; True when none remain.

    The case's own processes are killed by group and waited for first, so the sweep of whatever escaped its
    group usually finds nothing at its first try rather than a process still dying.
    """
    for pg in pgids:
        try:
            os.killpg(pg, signal.SIGKILL)
        except OSError:
            pass
    wait_killed(pgids)
    if not KILL_ALL:
        reap()
        return True
    for _ in range(2000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            reap()
            return True
        except PermissionError:
            pass
        reap()
        time.sleep(0.0005)
    return False


def wait_killed(pids: list[int]) -> None:
    """Wait (a few seconds at most) for processes just sent SIGKILL to be gone; none is reaped."""
    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except OSError:
            pass  # reaped already; or no pidfd (gVisor), where the sweep after waits instead
    try:
        deadline = time.monotonic() + 5.0
        while fds and time.monotonic() < deadline:
            ready, _, _ = select.select(fds, [], [], max(0.0, deadline - time.monotonic()))
            for fd in ready:
                fds.remove(fd)
                os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)


def reap() -> None:
    """Reap every child that has exited, without waiting for any other."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def case_limits(limits: dict[str, int]) -> list[tuple[int, int, int]]:
    """The rlimits of a program's cases: the request's, with room for the whole output in a file."""
    out_cap = int(limits.get("output", 1 << 20))
    proc_limits = {k: v for k, v in limits.items() if k in _LIMIT_NAMES}
    if proc_limits.get("file_size", 0) > 0:
        proc_limits["file_size"] = max(proc_limits["file_size"], out_cap + 1)
    return rlimits(proc_limits)


def run_case(
    code: Any,
    case: dict[str, Any],
    limits: dict[str, int],
    proc_limits: list[tuple[int, int, int]],
    host_fd: int | None,
) -> dict[str, Any]:
    """Run one case in its own process (and its tester's, for a call case); report how it ended."""
    out_cap = int(limits.get("output", 1 << 20))
    fds = (memfd("stdin", case.get("stdin", "").encode()), memfd("stdout"), memfd("stderr"))
    start, ru0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if case["kind"] == "call" and host_fd is not None:
        pid, tester = fork_call(code, proc_limits, fds, host_fd, out_cap)
        # the tester's end is the case's end: the program may still be waiting for calls, and is killed
        in_time = wait_deadline([tester], start + limits.get("wall", 10))
        pids = [pid, tester]
    else:
        pid = fork_case(proc_limits, fds, lambda: program_or_exec(code, case, -1))
        in_time = wait_deadline([pid], start + limits.get("wall", 10))
        pids = [pid]
    elapsed = time.monotonic() - start
    exit_code = exit_status(pid)
    clean = kill_everything(pids)
    reap()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    stdout, out_trunc = read_capped(fds[1], out_cap)
    stderr, err_trunc = read_capped(fds[2], min(out_cap, 64 << 10))
    for fd in fds:
        os.close(fd)
    return {
        "timed_out": not in_time,
        "exit": exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": out_trunc,
        "stderr_truncated": err_trunc,
        "wall": elapsed,
        "cpu": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
        "clean": clean,
    }


def fork_case(
    limits: list[tuple[int, int, int]], stdio: tuple[int, int, int], body: Any, keep: frozenset[int] = frozenset()
) -> int:
    """Fork a case process that enters its limits and runs ``body``; it never returns into the server."""
    pid = os.fork()
    if pid == 0:
        try:
            enter_case(limits, stdio, set(keep))
            body()
        finally:
            os._exit(120)
    return pid


def fork_call(
    code: Any, limits: list[tuple[int, int, int]], fds: tuple[int, int, int], host_fd: int, cap: int
) -> tuple[int, int]:
    """Fork the program P and its tester T, joined by a socketpair; only T holds the host's socket."""
    ends = socket.socketpair()
    program, tester = ends[0].fileno(), ends[1].fileno()
    pid = fork_case(limits, fds, lambda: program_main(code, "call", program), frozenset({program}))
    null = os.open(os.devnull, os.O_RDWR)
    tpid = fork_case(
        limits, (null, null, null), lambda: tester_main(host_fd, tester, cap), frozenset({host_fd, tester})
    )
    for closing in (ends[0], ends[1]):
        closing.close()
    os.close(null)
    os.close(host_fd)
    return pid, tpid


def program_or_exec(code: Any, case: dict[str, Any], peer: int) -> None:
    """In a case's forked process: exec the case's command, or run the program.

    Args:
        code: The compiled program (None for an ``exec`` case).
        case: The case.
        peer: The socket to the tester (``call`` cases).

    """
    if case["kind"] == "exec":
        os.execve(case["argv"][0], case["argv"], {"PATH": "/usr/bin:/bin", "HOME": WORKDIR})
    program_main(code, case["kind"], peer)


def exit_status(pid: int) -> int | None:
    """The exit status of a case that ended by itself, without reaping others; None if it still runs."""
    try:
        got, status, _ = os.wait4(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if got == pid else None


def wipe(path: str) -> None:
    """Empty the directory ``path`` (its own permissions restored first), leaving the directory itself.

    Args:
        path: The directory.

    """
    try:
        os.chmod(path, 0o700)  # a program may have taken its own permissions away
    except PermissionError:
        pass  # the work dir's own mount point (root's, under gVisor): its entries are still ours to remove
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            wipe(entry.path)
            os.rmdir(entry.path)
        else:
            os.unlink(entry.path)


def handle_program(req: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    """Run one program's cases in order and answer with their results; stops after a case that was not clean.

    Args:
        req: The ``program`` request.
        fds: The sockets passed with it, one per ``call`` case.

    """
    results: list[dict[str, Any]] = []
    try:
        code = compile(req.get("source", ""), "main.py", "exec") if req.get("source") is not None else None
    except (SyntaxError, ValueError) as exc:
        for fd in fds:
            os.close(fd)
        return {"op": "results", "nonce": req["nonce"], "compile_error": f"{type(exc).__name__}: {exc}"}
    workdir = req.get("workdir", "wipe")  # "keep" it for the next program, "reset" (wipe) it first, or "wipe" after
    if workdir == "reset":
        try:
            wipe(WORKDIR)
        except OSError:
            return {"op": "results", "nonce": req["nonce"], "results": [], "dirty": True}
    for name, text in req.get("files", {}).items():
        with open(os.path.join(WORKDIR, os.path.basename(name)), "w", encoding="utf-8") as fh:
            fh.write(text)
    fd_iter = iter(fds)
    proc_limits = case_limits(req["limits"])
    gc.freeze()  # what this request allocated too: a case's collections never walk (and copy) the server's objects
    for case in req["cases"]:
        host_fd = next(fd_iter, None) if case["kind"] == "call" else None
        result = run_case(code, case, req["limits"], proc_limits, host_fd)
        results.append(result)
        if not result["clean"]:
            break
    if workdir != "wipe":
        return {"op": "results", "nonce": req["nonce"], "results": results, "dirty": False}
    try:
        wipe(WORKDIR)
        dirty = False
    except OSError:
        dirty = True  # the host restarts this sandbox rather than show the files to the next program
    return {"op": "results", "nonce": req["nonce"], "results": results, "dirty": dirty}


# ---- a resident process: one long-lived process fed requests (a warm evaluator worker) -----------------------

RESIDENT: dict[str, Any] = {}
"""The resident process, while one runs: its pid, the server's end of its channel, its stderr pipe and tail."""
RESIDENT_FD = 3
"""The resident's end of its channel, in the resident."""
STDERR_TAIL = 8192


def handle_resident(req: dict[str, Any]) -> dict[str, Any]:
    """Start the resident process (``argv`` under the case limits, in a wiped work dir) and wait for its hello.

    It talks only to this server, over a socketpair whose other end the host never sees: the host's requests and
    its answers go through :func:`handle_call`, so whatever the resident writes, it cannot answer the host itself.
    Its stdout and stderr go to a pipe of which the server keeps the last bytes (for the reason it stopped).
    """
    nonce = req["nonce"]
    if RESIDENT:
        return {"op": "answer", "nonce": nonce, "status": "refused", "detail": "a resident process runs already"}
    try:
        wipe(WORKDIR)
    except OSError:
        return {"op": "answer", "nonce": nonce, "status": "refused", "detail": "the work dir could not be wiped"}
    ours, theirs = socket.socketpair()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    argv = [str(a) for a in req["argv"]]
    limits = case_limits(req["limits"])
    pid = fork_case(
        limits, (null, err_w, err_w), lambda: exec_resident(argv, theirs.fileno()), frozenset({theirs.fileno()})
    )
    theirs.close()
    os.close(err_w)
    os.close(null)
    RESIDENT.update(pid=pid, chan=ours, err=err_r, tail=bytearray())
    return exchange(nonce, None, time.monotonic() + float(req["wall"]), int(req["cap"]))


def exec_resident(argv: list[str], channel: int) -> None:
    """In the resident: its channel on fd 3, then the program."""
    if channel != RESIDENT_FD:
        os.dup2(channel, RESIDENT_FD)
        os.close(channel)
    os.set_inheritable(RESIDENT_FD, True)
    os.execve(argv[0], argv, {"PATH": "/usr/bin:/bin", "HOME": WORKDIR, "LANG": "C.UTF-8"})


def handle_call(req: dict[str, Any], payload: bytes) -> dict[str, Any]:
    """Give the resident one request and bring back its one answer, within ``wall`` seconds and ``cap`` bytes."""
    nonce = req["nonce"]
    if not RESIDENT:
        return {"op": "answer", "nonce": nonce, "status": "exited", "detail": "no resident process runs"}
    return exchange(nonce, payload, time.monotonic() + float(req["wall"]), int(req["cap"]))


def exchange(nonce: str, payload: bytes | None, deadline: float, cap: int) -> dict[str, Any]:
    """Send ``payload`` (when given) to the resident and read one frame back; on any failure the resident is killed.

    The answer's frame is never parsed here: its bytes go to the host as they came (``size`` in the reply, then
    the bytes). Past ``cap`` bytes, the answer is cut off unread (``output``); past the deadline, ``timeout``; a
    closed channel, ``exited``. Meanwhile the resident's stderr is drained into its tail.
    """
    chan, err, tail = RESIDENT["chan"], RESIDENT["err"], RESIDENT["tail"]
    status, body = "ok", b""
    try:
        if payload is not None:
            chan.settimeout(max(0.001, deadline - time.monotonic()))
            chan.sendall(struct.pack(">I", len(payload)) + payload)
        chan.setblocking(False)
        data = bytearray()
        need = 4
        size = -1
        watched = [chan.fileno(), err]
        while status == "ok":
            left = deadline - time.monotonic()
            if left <= 0:
                status = "timeout"
                break
            ready, _, _ = select.select(watched, [], [], left)
            if err in ready:
                chunk = os.read(err, 65536)
                if chunk:
                    tail += chunk
                    del tail[:-STDERR_TAIL]
                else:
                    watched.remove(err)
            if chan.fileno() in ready:
                chunk = chan.recv(min(need - len(data), 1 << 20))
                if not chunk:
                    status = "exited"
                    break
                data += chunk
                if len(data) < need:
                    continue
                if size < 0:
                    (size,) = struct.unpack(">I", bytes(data[:4]))
                    if size > cap:
                        status = "output"
                        break
                    data, need = bytearray(), size
                    if size:
                        continue
                body = bytes(data)
                break
    except (TimeoutError, socket.timeout):  # noqa: UP041 (one class from Python 3.10; the sandbox may run 3.9)
        status = "timeout"
    except OSError:
        status = "exited"
    if status == "ok":
        return {"op": "answer", "nonce": nonce, "status": "ok", "size": len(body), "body": body}
    return {"op": "answer", "nonce": nonce, **stop_resident(), "status": status}


def stop_resident() -> dict[str, Any]:
    """Kill the resident and everything it started; how it had ended, and the tail of what it wrote."""
    if not RESIDENT:
        return {}
    pid = RESIDENT["pid"]
    code = exit_status(pid)
    kill_everything([pid])
    reap()
    RESIDENT["chan"].close()
    try:
        while True:
            chunk = os.read(RESIDENT["err"], 65536) if select.select([RESIDENT["err"]], [], [], 0)[0] else b""
            if not chunk:
                break
            RESIDENT["tail"] += chunk
            del RESIDENT["tail"][:-STDERR_TAIL]
    except OSError:
        pass
    os.close(RESIDENT["err"])
    stderr = bytes(RESIDENT["tail"]).decode("utf-8", "replace")
    RESIDENT.clear()
    return {"exit": code, "stderr": stderr}


def send_answer(ctl: socket.socket, reply: dict[str, Any]) -> None:
    """A resident's answer: the reply's frame, then its body's bytes as they came (``size`` of them)."""
    body = reply.pop("body", b"")
    send_frame(ctl, reply)
    if body:
        ctl.sendall(body)


def harden() -> None:
    """Make the server, and so every fork of it, non-dumpable.

    Without namespaces a case could otherwise read the server's or the tester's memory (the nonce) or take
    their fds through ``/proc`` or ``pidfd_getfd``.
    """
    import ctypes

    pr_set_dumpable = 4
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main() -> None:
    """Serve the control socket: one ``program`` request after another, until the host closes it."""
    global WORKDIR, KILL_ALL
    WORKDIR = sys.argv[1] if len(sys.argv) > 1 else WORKDIR
    KILL_ALL = (sys.argv[2] if len(sys.argv) > 2 else "all") == "all"
    if "harden" in sys.argv[3:]:
        harden()
    global STDIO
    ctl = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    STDIO = make_stdio()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # once here: every case inherits it
    sys.argv = ["main.py"]  # what a program sees; the server read its own arguments above
    gc.freeze()  # the server's objects move to a permanent generation: a case's GC never touches (copies) them
    send_frame(ctl, {"op": "ready", "pid": os.getpid()})
    while True:
        try:
            req, fds = recv_request(ctl)
        except EOFError:
            return
        if req.get("op") == "program":
            send_frame(ctl, handle_program(req, fds))
        elif req.get("op") == "resident":
            send_answer(ctl, handle_resident(req))
        elif req.get("op") == "call":
            payload = recv_exact(ctl, int(req["size"]))
            send_answer(ctl, handle_call(req, payload))
        else:
            send_frame(ctl, {"op": "error", "error": f"unknown op {req.get('op')!r}"})


if __name__ == "__main__":
    main()
