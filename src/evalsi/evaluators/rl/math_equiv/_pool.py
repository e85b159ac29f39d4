"""The killable pool of warm worker processes that runs symbolic comparisons.

Why not ``signal.alarm``: it works only in the main thread of the main interpreter, and a comparison stuck in C
code (a huge integer power) ignores it. Here every comparison runs in a worker process with two bounds:

- a budget of the worker's own CPU time (``ITIMER_PROF``): the verdict of a comparison does not depend on how
  busy the machine is, so a reward computed on a loaded trainer node equals the one computed on an idle one;
- a wall-clock backstop (``pebble``'s per-task timeout, a multiple of the budget): a comparison stuck in C code,
  which no signal handler interrupts, is killed and its worker replaced.

Why a private fork server: importing sympy and math-verify costs about a second. The workers are forked from a
template process that imported them once (and ran a warm-up comparison), so a replacement after a kill costs a
fork (milliseconds), not an import. The template is this module's own fork server, not multiprocessing's global
one, so other parts of evalsi that use a fork server (the code sandbox) never fork from a process with sympy
loaded. Children do not re-import the parent's ``__main__`` (a training script that imports torch, say).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from typing import Any

PRELOAD_MODULE = "evalsi.evaluators.rl.math_equiv._warm"
"""Imported once by the template process: it imports the symbolic backends and warms them up."""

_server = forkserver.ForkServer()
_server.set_forkserver_preload([PRELOAD_MODULE])


class _Popen(popen_forkserver.Popen):
    """``popen_forkserver.Popen`` launching through this module's fork server instead of the global one."""

    def _launch(self, process_obj: Any) -> None:
        # Mirrors CPython 3.11's Popen._launch, with two changes: the private server, and no __main__ re-import.
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_name", None)
        prep_data.pop("init_main_from_path", None)
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w = _server.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(mp_context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:  # the name multiprocessing calls
        return _Popen(process_obj)


class _Context(mp_context.ForkServerContext):
    Process = _Process


def _mp_context() -> Any:
    """The private fork-server context where its launch code is known to match CPython's (3.11 on Linux).

    Elsewhere, plain ``spawn``: correct, but every new worker imports the backends itself (about a second).
    """
    if sys.version_info[:2] == (3, 11) and sys.platform.startswith("linux"):
        return _Context()
    return multiprocessing.get_context("spawn")


def _init_worker(memory_mb: int, warm: bool) -> None:
    """Worker initializer: die with the parent, cap the address space, and warm up unless the template did.

    A worker is a child of the template, not of the scoring process: ``PR_SET_PDEATHSIG`` makes the kernel kill
    it when the template exits, so no worker outlives its pool busy on a runaway comparison. The memory cap makes
    a runaway comparison fail instead of eating the host.
    """
    set_parent_death_signal()
    if warm:
        from evalsi.evaluators.rl.math_equiv._symbolic import warm_up

        warm_up()
    if memory_mb > 0:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def set_parent_death_signal() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (a no-op elsewhere)."""
    libc = load_libc()
    if libc is None:
        return
    parent = os.getppid()
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the call: nobody will send the signal
        os._exit(1)


_libc: Any = None


def load_libc() -> Any:
    """The C library, loaded once (the template loads it before forking, so children do not pay for it)."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


WALL_FACTOR = 4.0
"""The wall-clock backstop is this many times the CPU budget, plus :data:`WALL_SLACK` seconds."""
WALL_SLACK = 5.0


class CpuBudgetExceeded(BaseException):
    """Raised inside a worker when a comparison used up its CPU budget.

    A ``BaseException``, like ``KeyboardInterrupt``: the backends' own ``except Exception`` clauses must not
    swallow it and carry on.
    """


def _on_cpu_budget(signum: int, frame: Any) -> None:
    raise CpuBudgetExceeded


def run_with_cpu_budget(fn: Any, args: tuple[Any, ...], seconds: float) -> Any:
    """Run ``fn(*args)`` in this worker, raising ``TimeoutError`` once it has used ``seconds`` of CPU time."""
    previous = signal.signal(signal.SIGPROF, _on_cpu_budget)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        return fn(*args)
    except CpuBudgetExceeded:
        raise TimeoutError(f"used its {seconds:g}s of CPU time") from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def run_task(fn: Any, args: tuple[Any, ...], seconds: float) -> Any:
    """What a worker runs per comparison: ``fn(*args)`` within its CPU budget, then the prediction cache's turn.

    Outside the budget, the worker writes the parser's prediction cache when it grew, so later processes start
    with it (:mod:`._prediction_cache`); not after a comparison that took longer than its budget in wall time, so
    a write never brings a verdict near the wall-clock backstop.
    """
    started = time.monotonic()
    try:
        return run_with_cpu_budget(fn, args, seconds)
    finally:
        if time.monotonic() - started < seconds:
            from evalsi.evaluators.rl.math_equiv._prediction_cache import save_if_grown

            save_if_grown()


def wall_backstop(seconds: float) -> float:
    """The wall-clock time after which a comparison with a CPU budget of ``seconds`` is killed."""
    return seconds * WALL_FACTOR + WALL_SLACK


class SymbolicPool:
    """A lazily started pool of warm workers; thread-safe; ``close()`` stops the workers."""

    def __init__(self, workers: int, memory_mb: int) -> None:
        self.workers = workers
        self.memory_mb = memory_mb
        self._pool: Any = None
        self._lock = threading.Lock()

    def submit(self, fn: Any, args: tuple[Any, ...], timeout: float) -> Future[Any]:
        """Run ``fn(*args)`` in a worker with ``timeout`` seconds of CPU time.

        The future raises ``TimeoutError`` when the comparison used up its CPU budget, or overran the wall-clock
        backstop and its worker was killed.
        """
        pool = self._started()
        return pool.schedule(  # type: ignore[no-any-return]
            run_task, args=(fn, args, timeout), timeout=wall_backstop(timeout)
        )

    def prestart(self) -> None:
        """Launch the template process now, without waiting for it or starting workers.

        The template's imports and warm-up (seconds) then run while the caller goes on deciding the rest of its
        batch on the fast path; the first ``submit`` waits only for what is left of them. Nothing is launched
        until a record needs the symbolic stage, and a launch that fails here is reported by that ``submit``.
        """
        if isinstance(_mp_context(), _Context):
            with contextlib.suppress(OSError):
                _server.ensure_running()

    def _started(self) -> Any:
        with self._lock:
            if self._pool is None or not self._pool.active:
                from pebble import ProcessPool

                context = _mp_context()
                self._pool = ProcessPool(
                    max_workers=self.workers,
                    initializer=_init_worker,
                    initargs=(self.memory_mb, not isinstance(context, _Context)),
                    context=context,
                )
            return self._pool

    def close(self) -> None:
        """Stop the workers (killing any still running); the next ``submit`` starts a fresh pool."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            pool.join(timeout=5)


_pools: dict[tuple[int, int], SymbolicPool] = {}
_pools_lock = threading.Lock()


def shared_pool(workers: int, memory_mb: int) -> SymbolicPool:
    """The process-wide pool for this size and memory cap (one per distinct setting; usually exactly one)."""
    key = (workers if workers > 0 else os.cpu_count() or 1, memory_mb)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = SymbolicPool(*key)
        return pool


def close_all() -> None:
    """Close every pool and stop the template process."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
    stop_template()


def stop_template() -> None:
    """Stop the template (it is restarted on the next pool start); any worker left dies with it."""
    pid = getattr(_server, "_forkserver_pid", None)
    if pid is not None:
        with contextlib.suppress(OSError):  # killed, not asked: a straggling worker must not keep it alive
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):  # already stopped, or never started
        _server._stop()  # type: ignore[attr-defined]
