"""Memory and processes of a sandbox as a whole: one cgroup per sandbox where the host lets evalsi make one.

An rlimit bounds one process: a program that forks could hold ``max_processes`` times its memory budget. So
each sandbox gets its own cgroup, made under the cgroup evalsi itself runs in, and everything the sandbox starts
(bubblewrap or runsc, the fork server, every case and its children) is in it from its first instruction: a small
shell moves itself in, then execs the sandbox's command. Before each program the host writes the program's
budget: ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1) and ``pids.max``. Past the memory budget the
kernel's OOM killer kills within the sandbox only; past ``pids.max`` a fork fails.

Which cgroups are used, first that works: cgroup v2 where the cgroup evalsi runs in is delegated (writable, with
``memory`` and ``pids`` in its ``cgroup.subtree_control``); else cgroup v1 where the ``memory`` and ``pids``
hierarchies are mounted and writable (root). Where neither is (or ``EVALSI_SANDBOX_CGROUP=off``), the budget is
divided across the processes a run may have: each gets ``RLIMIT_AS = memory / max_processes``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import time
from dataclasses import dataclass
from typing import Literal

Kind = Literal["cgroup2", "cgroup1", "rlimit"]
_ENTER = 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"'
"""The shell that moves itself into the sandbox's cgroup (its memory and pids ``cgroup.procs``), then execs."""


@dataclass(frozen=True, slots=True)
class Controllers:
    """How sandboxes are bounded on this host: the kind, and the parent directories their cgroups are made in."""

    kind: Kind
    memory_parent: str = ""
    pids_parent: str = ""
    detail: str = ""

    def describe(self) -> str:
        """One line for ``evalsi sandbox doctor``: which memory bound is in force."""
        if self.kind == "cgroup2":
            return f"cgroup v2 per sandbox (memory.max, pids.max) under {self.memory_parent}"
        if self.kind == "cgroup1":
            return (
                f"cgroup v1 per sandbox (memory.limit_in_bytes under {self.memory_parent}, pids.max under "
                f"{self.pids_parent})"
            )
        return f"per process only: RLIMIT_AS = memory budget / max processes ({self.detail})"


def _own_paths() -> dict[str, str]:
    """The cgroup path of evalsi's process by controller (``""`` is the v2 unified hierarchy)."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in open("/proc/self/cgroup", encoding="utf-8").read().splitlines():  # noqa: SIM115
            _, names, path = line.split(":", 2)
            for name in names.split(",") if names else [""]:
                paths[name] = path
    return paths


def _mounts() -> dict[str, str]:
    """Mount points: ``cgroup2`` for the unified hierarchy, and each v1 controller's name."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in open("/proc/self/mounts", encoding="utf-8").read().splitlines():  # noqa: SIM115
            parts = line.split()
            if len(parts) < 4:
                continue
            if parts[2] == "cgroup2":
                found.setdefault("cgroup2", parts[1])
            elif parts[2] == "cgroup":
                for option in parts[3].split(","):
                    if option in ("memory", "pids"):
                        found.setdefault(option, parts[1])
    return found


def _probe(parents: list[str], files: list[str]) -> str:
    """'' when a child cgroup can be made, has ``files``, and removed under every parent; else why not."""
    name = f"evalsi-probe-{os.getpid()}-{secrets.token_hex(3)}"
    made: list[str] = []
    try:
        for parent in parents:
            path = os.path.join(parent, name)
            os.mkdir(path)
            made.append(path)
        for path in made:
            for file in files:
                if os.path.exists(os.path.join(path, file)):
                    break
            else:
                return f"no {' or '.join(files)} in a new cgroup under {os.path.dirname(path)}"
        return ""
    except OSError as exc:
        return f"cannot make a cgroup: {exc.strerror} ({exc.filename})"
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                os.rmdir(path)


@functools.cache
def controllers() -> Controllers:
    """The bound sandboxes get on this host (probed once)."""
    if os.environ.get("EVALSI_SANDBOX_CGROUP", "").lower() in ("off", "0", "no", "false"):
        return Controllers("rlimit", detail="EVALSI_SANDBOX_CGROUP=off")
    mounts, own = _mounts(), _own_paths()
    why: list[str] = []
    if "cgroup2" in mounts and "" in own:
        parent = os.path.join(mounts["cgroup2"], own[""].lstrip("/"))
        try:
            enabled = open(os.path.join(parent, "cgroup.subtree_control"), encoding="utf-8").read().split()  # noqa: SIM115
        except OSError:
            enabled = []
        if {"memory", "pids"} <= set(enabled):
            problem = _probe([parent], ["memory.max"])
            if not problem:
                return Controllers("cgroup2", parent, parent)
            why.append(f"cgroup v2: {problem}")
        else:
            why.append(f"cgroup v2: memory and pids are not delegated to {parent}")
    if "memory" in mounts and "pids" in mounts:
        memory = os.path.join(mounts["memory"], own.get("memory", "/").lstrip("/"))
        pids = os.path.join(mounts["pids"], own.get("pids", "/").lstrip("/"))
        problem = _probe([memory], ["memory.limit_in_bytes"]) or _probe([pids], ["pids.max"])
        if not problem:
            return Controllers("cgroup1", memory, pids)
        why.append(f"cgroup v1: {problem}")
    elif not why:
        why.append("no cgroup v2 with memory and pids, nor cgroup v1 memory and pids hierarchies")
    return Controllers("rlimit", detail="; ".join(why))


class SandboxCgroup:
    """The cgroup(s) of one sandbox: made when it starts, budgets written before each program, removed at close."""

    def __init__(self, found: Controllers) -> None:
        self.kind = found.kind
        name = f"evalsi-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
        self.memory = os.path.join(found.memory_parent, name)
        self.pids = os.path.join(found.pids_parent, name)
        os.mkdir(self.memory)
        if self.pids != self.memory:
            try:
                os.mkdir(self.pids)
            except OSError:
                os.rmdir(self.memory)
                raise
        self._budget: tuple[int, int | None] | None = None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside this cgroup (the shell moves itself in, then execs it)."""
        procs = [os.path.join(self.memory, "cgroup.procs"), os.path.join(self.pids, "cgroup.procs")]
        return ["/bin/sh", "-c", _ENTER, "evalsi-cgroup", *procs, *argv]

    def limit(self, memory_bytes: int, pids: int | None) -> None:
        """Bound everything in the sandbox together: ``memory_bytes`` of memory, at most ``pids`` tasks."""
        if self._budget == (memory_bytes, pids):
            return
        if self.kind == "cgroup2":
            _write(self.memory, "memory.max", str(memory_bytes))
            with contextlib.suppress(OSError):  # no swap to spill into, where the host has swap
                _write(self.memory, "memory.swap.max", "0")
        else:
            # memsw (memory + swap) is never below the memory limit: order the writes so neither is refused
            memsw = os.path.join(self.memory, "memory.memsw.limit_in_bytes")
            has_memsw = os.path.exists(memsw)
            current = int(_read(self.memory, "memory.limit_in_bytes") or 0)
            if has_memsw and memory_bytes > current:
                _write(self.memory, "memory.memsw.limit_in_bytes", str(memory_bytes))
            _write(self.memory, "memory.limit_in_bytes", str(memory_bytes))
            if has_memsw and memory_bytes <= current:
                with contextlib.suppress(OSError):
                    _write(self.memory, "memory.memsw.limit_in_bytes", str(memory_bytes))
        _write(self.pids, "pids.max", "max" if pids is None else str(pids))
        self._budget = (memory_bytes, pids)

    def oom_kills(self) -> int:
        """How many processes of the sandbox the kernel killed for passing its memory budget so far."""
        text = _read(self.memory, "memory.events" if self.kind == "cgroup2" else "memory.oom_control")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def memory_bytes(self) -> int:
        """Memory charged to the sandbox now, all its processes and memory filesystems together."""
        text = _read(self.memory, "memory.current" if self.kind == "cgroup2" else "memory.usage_in_bytes").strip()
        return int(text) if text.isdigit() else 0

    def kill(self) -> None:
        """Send SIGKILL to every process in the cgroup once (no waiting: :meth:`close` waits)."""
        for path in dict.fromkeys((self.memory, self.pids)):
            for pid in _read(path, "cgroup.procs").split():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        """Kill whatever is left in the cgroup, then remove it."""
        for path in dict.fromkeys((self.memory, self.pids)):
            for _ in range(100):
                pids = [int(p) for p in _read(path, "cgroup.procs").split()]
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.02)
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _write(directory: str, name: str, value: str) -> None:
    with open(os.path.join(directory, name), "w", encoding="ascii") as fh:
        fh.write(value)


def _read(directory: str, name: str) -> str:
    try:
        with open(os.path.join(directory, name), encoding="ascii") as fh:
            return fh.read()
    except OSError:
        return ""


def new_cgroup() -> SandboxCgroup | None:
    """A cgroup for a sandbox starting now, or None where sandboxes get per-process rlimits only."""
    found = controllers()
    if found.kind == "rlimit":
        return None
    try:
        return SandboxCgroup(found)
    except OSError:
        return None
