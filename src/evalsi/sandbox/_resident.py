"""A resident process: one long-lived program in its own sandbox, started once and fed requests one at a time.

It is how a warm worker (an uploaded evaluator's interpreter, its module imported once) runs: the sandbox's fork
server starts the program under the sandbox's limits with a channel on its fd 3, a socketpair whose other end
only the fork server holds. Each request goes host -> fork server -> program, and the one answer comes back the
same way, with this request's nonce added by the fork server: whatever the program writes, on its channel or
elsewhere, it never writes to the host, and an answer past its byte cap is cut off unread. A request not
answered within its wall time kills the program; so does :meth:`Resident.kill`, from any thread, at once.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from evalsi.errors import SandboxError
from evalsi.sandbox._calls import recv_exact
from evalsi.sandbox._rungs import Rung
from evalsi.sandbox._sandbox import Sandbox, _recv, _send
from evalsi.sandbox._types import Limits

Status = Literal["ok", "timeout", "output", "exited", "memory", "sandbox"]
"""How a request ended: answered; no answer in time; an answer past its cap; the program ended (or was never
there); the sandbox's cgroup killed it for memory; the sandbox itself failed."""
MARGIN = 10.0
"""Seconds the host waits for the fork server past a request's own wall time before it gives the sandbox up."""


@dataclass(frozen=True)
class Answer:
    """One request's outcome: the program's answer (``body``) when ``ok``, else why not."""

    status: Status
    body: bytes = b""
    exit_code: int | None = None
    """How the program ended, when it did (negative: the signal that killed it)."""
    stderr: str = ""
    """The last bytes the program wrote to stdout and stderr, when it ended."""
    detail: str = ""

    @property
    def ok(self) -> bool:
        """The program answered, within its time and its cap."""
        return self.status == "ok"


class Resident:
    """``argv`` running in a sandbox of ``rung`` under ``limits``, started by :meth:`start`, fed by :meth:`call`.

    ``limits.wall_time`` bounds its start (until its first frame, its hello) and is the default time of a
    request; ``limits.cpu_time`` is not applied (a long-lived program's CPU time only grows: the wall time of
    each request bounds it instead). The program ends, and its sandbox with it, when a request fails or on
    :meth:`kill`; :attr:`alive` then turns false and the owner starts a new one.
    """

    def __init__(self, rung: Rung, argv: list[str], limits: Limits) -> None:
        """Describe a resident program; nothing runs until :meth:`start`.

        Args:
            rung: The isolation rung to run it under.
            argv: The program and its arguments.
            limits: Its time, memory and process limits.

        """
        self.argv = list(argv)
        self.limits = limits
        self._sandbox = Sandbox(rung)
        self._lock = threading.Lock()
        self._killed = threading.Event()
        self._running = False

    @property
    def alive(self) -> bool:
        """The program runs and has answered every request so far."""
        return self._running and not self._killed.is_set() and self._sandbox.alive

    def start(self, cap: int) -> Answer:
        """Start the sandbox and the program; its first frame (a hello of at most ``cap`` bytes) is the answer.

        Args:
            cap: The most bytes the hello may take.

        """
        if self._killed.is_set():
            return Answer("exited", detail="the worker was stopped")
        try:
            with self._lock:
                self._sandbox.start(self.limits)
        except SandboxError as exc:
            self.kill()
            return Answer("sandbox", detail=str(exc))
        shared = self._sandbox._cgroup is not None
        wire = {**self.limits.to_wire(shared_memory=shared), "cpu": 0}
        request = {"op": "resident", "argv": self.argv, "limits": wire, "wall": self.limits.wall_time, "cap": cap}
        answer = self._exchange(request, b"", self.limits.wall_time)
        self._running = answer.ok
        return answer

    def call(self, payload: bytes, cap: int, wall: float | None = None) -> Answer:
        """Give the program ``payload`` and return its one answer, of at most ``cap`` bytes within ``wall`` s.

        Args:
            payload: The request, one frame.
            cap: The most bytes the answer may take.
            wall: Seconds to wait for it; None for the limits' wall time.

        """
        if not self.alive:
            return Answer("exited", detail="the worker is not running")
        seconds = self.limits.wall_time if wall is None else wall
        answer = self._exchange({"op": "call", "size": len(payload), "wall": seconds, "cap": cap}, payload, seconds)
        if not answer.ok:
            self._running = False
        return answer

    def memory_bytes(self) -> int | None:
        """Memory the sandbox holds as a whole now (its cgroup's count); None where no cgroup bounds it."""
        cgroup = self._sandbox._cgroup
        return None if cgroup is None else cgroup.memory_bytes()

    def kill(self) -> None:
        """Kill the sandbox, the program and everything it started, now; a request waiting ends at once."""
        self._killed.set()
        self._running = False
        self._sandbox.kill()
        with self._lock:
            self._sandbox.close()

    def _exchange(self, request: dict[str, Any], payload: bytes, wall: float) -> Answer:
        ctl = self._sandbox._ctl
        if ctl is None:
            return Answer("exited", detail="the worker's sandbox is closed")
        nonce = secrets.token_hex(16)
        deadline = time.monotonic() + wall + MARGIN
        try:
            _send(ctl, {**request, "nonce": nonce}, [])
            if payload:
                ctl.sendall(payload)
            reply = _recv(ctl, deadline)
            size = int(reply.get("size", 0)) if reply.get("status") == "ok" else 0
            body = recv_exact(ctl, size, deadline, "the sandbox")
        except (OSError, EOFError, ValueError) as exc:
            stopped = self._killed.is_set()  # by another thread (a cancel): not the sandbox's failure
            self.kill()
            if stopped:
                return Answer("exited", detail="the worker was stopped")
            return Answer("sandbox", detail=f"the sandbox failed: {type(exc).__name__}: {exc}")
        if not isinstance(reply, dict) or not secrets.compare_digest(str(reply.get("nonce", "")), nonce):
            self.kill()
            return Answer("sandbox", detail="the sandbox's answer did not carry this request's nonce")
        status = str(reply.get("status"))
        if status == "ok":
            return Answer("ok", body)
        exit_code = reply.get("exit")
        answer = Answer(
            status if status in ("timeout", "output", "exited") else "sandbox",  # type: ignore[arg-type]
            exit_code=exit_code if isinstance(exit_code, int) else None,
            stderr=str(reply.get("stderr", "")),
            detail=str(reply.get("detail", "")),
        )
        if answer.status == "exited" and self._sandbox.oom_killed():
            answer = dataclasses.replace(answer, status="memory")
        self.kill()  # the program is gone: its sandbox goes too, and the next request gets a fresh one
        return answer
