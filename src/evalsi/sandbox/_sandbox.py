"""One running sandbox: the fork server started under a rung, and the host's side of its protocol.

The host owns the only ends of every channel that carries a verdict: the control socket (the server's answers,
with the request's nonce) and, per ``call`` case, a socket whose other end goes to the tester process. Model
code never holds either, so whatever it prints, however it exits, it cannot write a verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from evalsi.errors import SandboxError
from evalsi.sandbox._calls import frame, recv_frame
from evalsi.sandbox._cgroups import SandboxCgroup, new_cgroup
from evalsi.sandbox._host import acquire_slot, as_user, release_slot, sandbox_python
from evalsi.sandbox._rungs import Launch, Rung, run_cleanup
from evalsi.sandbox._types import Limits, RunResult, classify

MAX_CALL_CASES_PER_REQUEST = 200
"""SCM_RIGHTS carries at most 253 fds per message; larger programs are sent in several requests."""
START_TIMEOUT = 30.0
GRACE = 1.0
"""Seconds a closing sandbox has to exit by itself before it is killed."""
MAX_REPLY = 256 << 20
WorkdirMode = Literal["wipe", "keep", "reset"]


@functools.cache
def server_source() -> str:
    """The fork server's source: ``_calls.py`` then ``_server.py``, as one script.

    It is passed on the command line because the project checkout is never mounted in the sandbox.
    """
    package = resources.files("evalsi.sandbox")
    parts = [package.joinpath(name).read_text(encoding="utf-8") for name in ("_calls.py", "_server.py")]
    body = [line for part in parts for line in part.splitlines() if not line.startswith("from __future__")]
    return "\n".join(["from __future__ import annotations", *body])


@dataclass(frozen=True)
class Case:
    """One test case to run in its own process.

    ``stdio``: the program runs with ``stdin``; the host compares its stdout. ``call``: the program's functions
    are called by a tester process running ``payload`` (asserts, a ``check`` script or one call); the payload
    goes to the tester only. ``exec``: run ``argv`` (the generic rung interface).
    """

    kind: Literal["stdio", "call", "exec"]
    stdin: str = ""
    payload: dict[str, Any] | None = None
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class CaseOutcome:
    """How a case's process ended, and for ``call`` cases the tester's verdict (None when there is none)."""

    run: RunResult
    verdict: dict[str, Any] | None = None


@dataclass
class Pending:
    """A request sent to a sandbox whose answer is not read yet (see :meth:`Sandbox.submit`)."""

    nonce: str
    cases: list[Case]
    limits: Limits
    deadline: float = 0.0
    host_ends: list[socket.socket | None] = field(default_factory=list)
    tester_ends: list[int] = field(default_factory=list)
    """The testers' ends of the call cases' sockets, closed once the answer is read."""
    failure: str | None = None
    """Why sending the request failed, if it did."""


class Sandbox:
    """A fork server under one rung, reused across programs (each program gets a wiped work dir)."""

    def __init__(self, rung: Rung, slot: int | None = None) -> None:
        """Prepare a sandbox; nothing runs until :meth:`start`.

        Args:
            rung: The isolation rung.
            slot: The pool slot it fills; None for a sandbox of its own.

        """
        self.rung = rung
        self.slot = acquire_slot() if slot is None else slot
        if slot is None:
            # A finalizer, not __del__: it also runs at interpreter exit, before the module's globals are torn down.
            weakref.finalize(self, release_slot, self.slot)
        self.programs_run = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._launch: Launch | None = None
        self._cgroup: SandboxCgroup | None = None
        self._oom_kills = 0
        """The sandbox cgroup's OOM kills when last looked at (a new cgroup has none)."""

    @property
    def alive(self) -> bool:
        """The server process is running."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, limits: Limits | None = None) -> None:
        """Start the server and wait for its ``ready``; raises :class:`SandboxError` with the rung's stderr.

        The sandbox gets its own cgroup where the host allows one (see :mod:`._cgroups`), and everything it
        starts is in it; ``limits`` (the first program's) give a rung that takes its memory at start its budget.

        Args:
            limits: The limits the server applies; None for the defaults.

        """
        self.close()
        memory = None if limits is None else limits.memory_bytes + self.rung.memory_overhead()
        launch = self.rung.launch(server_source(), self.slot, memory)
        self._cgroup = new_cgroup()
        self._oom_kills = 0
        argv = as_user(launch.argv, launch.uid)  # no uid switch in a forked copy of this process: see as_user
        if self._cgroup is not None:
            argv = self._cgroup.wrap(argv)
            if limits is not None:
                self._bound(limits)
        host, child = socket.socketpair()
        errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, once the server answered)
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=child.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=errors,
                pass_fds=launch.pass_fds,
                cwd=launch.cwd,
                env={},
                start_new_session=True,
            )
        finally:
            child.close()
            for fd in launch.close_after_start:
                os.close(fd)
        self._ctl, self._launch = host, launch
        try:
            hello = _recv(host, time.monotonic() + START_TIMEOUT)
        except (OSError, EOFError, ValueError) as exc:
            errors.seek(0)
            message = errors.read().decode(errors="replace").strip()[-500:]
            self.close()
            raise SandboxError(f"the {self.rung.name} sandbox did not start: {message or exc}") from None
        finally:
            errors.close()
        if hello.get("op") != "ready":
            self.close()
            raise SandboxError(f"the {self.rung.name} sandbox answered {hello!r} instead of ready")

    def run(
        self,
        source: str | None,
        cases: list[Case],
        limits: Limits,
        files: dict[str, str] | None = None,
        workdir: WorkdirMode = "wipe",
    ) -> list[CaseOutcome]:
        """Run every case of one program, in order. A failed sandbox fails only the cases it had not finished.

        The work dir is wiped after the program (``wipe``), kept for the next one (``keep``), or wiped before
        it and kept after (``reset``).

        Args:
            source: The program's source; None when ``files`` hold it.
            cases: The test cases, run in order.
            limits: Limits per case.
            files: Further files written into the work dir.
            workdir: ``wipe`` empties the work dir after the run, ``keep`` leaves it for the next program,
                ``reset`` empties it first and keeps it after.

        """
        out: list[CaseOutcome] = []
        for chunk in _chunks(cases):
            out.extend(self.collect(self.submit(source, chunk, limits, files or {}, workdir)))
        self.programs_run += 1
        return out

    def submit(
        self, source: str | None, cases: list[Case], limits: Limits, files: dict[str, str], workdir: WorkdirMode
    ) -> Pending:
        """Send one request (at most one message's call cases) and return without waiting for its answer.

        Its answer must be read with :meth:`collect` before anything else is sent to this sandbox. The server is
        started first when it does not run. Several sandboxes can so run one program's cases at once from one
        thread: each is sent its share, then each answer is read.

        Args:
            source: The program's source; None when ``files`` hold it.
            cases: The test cases, run in order (at most ``MAX_CALL_CASES_PER_REQUEST`` of them ``call`` cases).
            limits: Limits per case.
            files: Further files written into the work dir.
            workdir: What becomes of the work dir, as for :meth:`run`.

        Returns:
            The request in flight.

        Raises:
            SandboxError: The server could not be started, or its cgroup refused the limits.

        """
        if not self.alive:
            self.start(limits)
        assert self._ctl is not None
        pending = Pending(secrets.token_hex(16), cases, limits)
        for case in cases:
            if case.kind != "call":
                pending.host_ends.append(None)
                continue
            host_end, tester_end = socket.socketpair()
            _send_async(host_end, {**(case.payload or {}), "nonce": pending.nonce})
            pending.host_ends.append(host_end)
            pending.tester_ends.append(tester_end.detach())
        wire_cases = [{"kind": c.kind, "stdin": c.stdin, "argv": list(c.argv)} for c in cases]
        request: dict[str, Any] = {"op": "program", "nonce": pending.nonce, "source": source, "cases": wire_cases}
        shared = self._cgroup is not None
        request.update(limits=limits.to_wire(shared_memory=shared), files=files, workdir=workdir)
        if self._cgroup is not None:
            try:
                self._bound(limits)
            except SandboxError:
                self._release(pending)
                raise
        pending.deadline = time.monotonic() + sum(limits.wall_time + 2.0 for _ in cases) + 5.0
        try:
            _send(self._ctl, request, pending.tester_ends)
        except (OSError, ValueError) as exc:
            pending.failure = f"sandbox failed: {type(exc).__name__}: {exc}"
        return pending

    def collect(self, pending: Pending) -> list[CaseOutcome]:
        """Wait for the answer to a request sent with :meth:`submit`; the cases' outcomes, in order.

        Args:
            pending: The request in flight.

        Returns:
            One outcome per case; a failed sandbox fails only the cases it had not finished.

        """
        try:
            if pending.failure is not None or self._ctl is None:
                reply: dict[str, Any] = {"error": pending.failure or "sandbox failed: it was closed"}
            else:
                reply = _recv(self._ctl, pending.deadline)
        except (OSError, EOFError, ValueError) as exc:
            reply = {"error": f"sandbox failed: {type(exc).__name__}: {exc}"}
        finally:
            for fd in pending.tester_ends:
                os.close(fd)
            pending.tester_ends.clear()
        # read before the answer is handled: a sandbox whose runtime was killed is closed there, cgroup and all
        out_of_memory = self._oom_killed(reply, len(pending.cases))
        out = self._collect(pending, reply, pending.limits)
        return [_out_of_memory(o) for o in out] if out_of_memory else out

    @staticmethod
    def _release(pending: Pending) -> None:
        """Close a request's sockets when it was never sent."""
        for fd in pending.tester_ends:
            os.close(fd)
        pending.tester_ends.clear()
        _close_all(pending.host_ends)

    def _oom_killed(self, reply: dict[str, Any], cases: int) -> bool:
        """Whether the cgroup's OOM killer killed in the sandbox since the last look.

        Looked at only when something was killed (a case ended by a signal, or the sandbox failed): a program
        whose cases all exited by themselves costs no read of the cgroup's files.
        """
        if self._cgroup is None:
            return False
        results = reply.get("results")
        if isinstance(results, list) and len(results) == cases and "compile_error" not in reply:
            if all(isinstance(r, dict) and isinstance(r.get("exit"), int) and r["exit"] >= 0 for r in results):
                return False
        elif "compile_error" in reply:
            return False
        return self.oom_killed()

    def oom_killed(self) -> bool:
        """Whether the sandbox cgroup's OOM killer killed in it since the last look (False without a cgroup)."""
        if self._cgroup is None:
            return False
        kills = self._cgroup.oom_kills()
        seen, self._oom_kills = self._oom_kills, kills
        return kills > seen

    def _bound(self, limits: Limits) -> None:
        """Write the program's budget to the sandbox's cgroup: its memory and its tasks, all processes together."""
        assert self._cgroup is not None
        extra = self.rung.extra_tasks()
        tasks = None if extra is None else limits.to_wire()["processes"] + extra
        try:
            self._cgroup.limit(limits.memory_bytes + self.rung.memory_overhead(), tasks)
        except OSError as exc:
            self.close()
            raise SandboxError(f"the sandbox's cgroup refused its limits: {exc.strerror}") from None

    def _collect(self, pending: Pending, reply: dict[str, Any], limits: Limits) -> list[CaseOutcome]:
        if reply.get("nonce") != pending.nonce:
            self.close()
            detail = str(reply.get("error") or "the sandbox's answer did not carry this run's nonce")
            return [_sandbox_failure(detail) for _ in pending.cases]
        if "compile_error" in reply:
            failed = RunResult(1, "", str(reply["compile_error"]), 0.0, 0.0, "exit", detail="compile error")
            _close_all(pending.host_ends)
            return [CaseOutcome(failed) for _ in pending.cases]
        raw_results = reply.get("results", [])
        out: list[CaseOutcome] = []
        for index, host_end in enumerate(pending.host_ends):
            if index >= len(raw_results):
                self.close()  # the server could not clean up after a case: never reuse it
                out.append(_sandbox_failure("an earlier case left processes the sandbox could not kill"))
                continue
            verdict = _read_verdict(host_end, pending.nonce) if host_end is not None else None
            out.append(CaseOutcome(classify(raw_results[index], limits), verdict))
        _close_all(pending.host_ends)
        if reply.get("dirty"):
            self.close()  # its work dir could not be wiped: the next program gets a new sandbox
        return out

    def kill(self) -> None:
        """Kill the sandbox's processes now, whatever they are doing; :meth:`close` still cleans up after.

        Safe from another thread: a request waiting on the sandbox ends at once (its channel is shut down).
        """
        ctl, proc, cgroup = self._ctl, self._proc, self._cgroup
        if ctl is not None:
            with contextlib.suppress(OSError):
                ctl.shutdown(socket.SHUT_RDWR)
        if proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill()

    def close(self) -> None:
        """Kill the sandbox and everything in it; remove its host work dir. It restarts on its next use."""
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None
        if self._launch is not None:
            run_cleanup(self._launch)
            if self._launch.sweep_uid is not None:
                _sweep_uid(self._launch.sweep_uid)
            for path in self._launch.remove_after:
                shutil.rmtree(path, ignore_errors=True)
            self._launch = None
        if self._cgroup is not None:
            self._cgroup.close()
            self._cgroup = None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a sandbox whose control socket was just closed.

    An idle server exits on EOF and every wrapper (bubblewrap's init, runsc) exits after it, leaving no orphan
    behind; a busy or stuck one has its process group killed, and bubblewrap's pid namespace dies with it
    (``--die-with-parent``).
    """
    try:
        proc.wait(timeout=GRACE)
        return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _sweep_uid(uid: int) -> None:
    """Kill every process of the sandbox's dedicated uid (cases escape the server's group with setsid)."""
    python = sandbox_python(uid)
    if python is None:
        return
    kill_all = "import os, signal\nfor _ in range(3): os.kill(-1, signal.SIGKILL)"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            as_user([python, "-I", "-S", "-c", kill_all], uid),
            env={},
            timeout=10,
            check=False,
        )


def _chunks(cases: list[Case]) -> list[list[Case]]:
    chunks: list[list[Case]] = [[]]
    calls = 0
    for case in cases:
        if case.kind == "call":
            if calls == MAX_CALL_CASES_PER_REQUEST:
                chunks.append([])
                calls = 0
            calls += 1
        chunks[-1].append(case)
    return [c for c in chunks if c]


def _out_of_memory(outcome: CaseOutcome) -> CaseOutcome:
    """A case killed by a signal while its sandbox's cgroup killed for memory ran out of memory."""
    if outcome.run.reason not in ("signal", "sandbox"):
        return outcome
    return CaseOutcome(dataclasses.replace(outcome.run, reason="memory"), outcome.verdict)


def _sandbox_failure(detail: str) -> CaseOutcome:
    return CaseOutcome(RunResult(None, "", "", 0.0, 0.0, "sandbox", detail=detail))


def _close_all(socks: list[socket.socket | None]) -> None:
    for sock in socks:
        if sock is not None:
            sock.close()


def _read_verdict(sock: socket.socket, nonce: str) -> dict[str, Any] | None:
    """The tester's verdict, if it wrote one carrying this run's nonce; the tester has exited by now."""
    try:
        verdict = _recv(sock, time.monotonic() + 2.0, limit=MAX_REPLY)
    except (OSError, EOFError, ValueError):
        return None
    if not isinstance(verdict, dict) or not secrets.compare_digest(str(verdict.get("nonce", "")), nonce):
        return None
    return verdict


def _send(sock: socket.socket, obj: Any, fds: list[int]) -> None:
    data = frame(obj)
    if fds:
        sent = sock.sendmsg([data[:4]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
        data = data[sent:]
    sock.settimeout(60.0)
    sock.sendall(data)


def _send_async(sock: socket.socket, obj: Any) -> None:
    """Queue a payload for a tester; big payloads go from a thread so they never block the request."""
    data = frame(obj)
    if len(data) <= 64 << 10:
        sock.sendall(data)
        return
    threading.Thread(target=_sendall_quietly, args=(sock, data), daemon=True).start()


def _sendall_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the tester died or the case ended: nothing to deliver
        sock.sendall(data)


def _recv(sock: socket.socket, deadline: float, limit: int = MAX_REPLY) -> Any:
    """The sandbox's next answer (a frame), before ``deadline``."""
    return recv_frame(sock, limit, deadline, "the sandbox")
