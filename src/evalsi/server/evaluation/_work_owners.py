"""Background work owned across replicas: a heartbeat for this process's work, a sweep for abandoned work.

Each server process has an instance id. A job or build records the instance that queued it and a
``heartbeat_at`` this thread refreshes every ``jobs.heartbeat_interval``; every ``jobs.orphan_after / 2`` (and
once at start) the same thread fails unfinished work whose heartbeat is older than ``jobs.orphan_after``: its
server was killed or its host lost. Work of live servers, this one's included, is left alone, so one replica
restarting never fails what another is running.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Protocol

from evalsi.server.evaluation._config import JobsConfig

log = logging.getLogger("evalsi.server")


def new_instance() -> str:
    """A fresh instance id for this server process."""
    return str(uuid.uuid4())


class Owned(Protocol):
    """A store of background work owned by server instances."""

    def beat(self) -> None:
        """Refresh the heartbeat of the unfinished work this instance owns."""

    def recover(self) -> int:
        """Fail unfinished work whose owner stopped beating; returns how many."""


class Heartbeat:
    """The thread that beats for this process's work and sweeps up other processes' abandoned work."""

    def __init__(self, settings: JobsConfig, stores: Sequence[Owned]) -> None:
        self.interval = settings.heartbeat_interval
        self.sweep_every = settings.orphan_after / 2
        self.stores = list(stores)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="evalsi-heartbeat", daemon=True)

    def start(self) -> None:
        """Start beating (the first sweep ran at start-up, before the server took work)."""
        self._thread.start()

    def _loop(self) -> None:
        swept = time.monotonic()
        while not self._stop.wait(min(self.interval, self.sweep_every)):
            for store in self.stores:
                try:
                    store.beat()
                except Exception:  # a database hiccup: the next beat retries, well within orphan_after
                    log.exception("refreshing the heartbeat of owned work failed")
            if time.monotonic() - swept >= self.sweep_every:
                swept = time.monotonic()
                self.sweep()

    def sweep(self) -> int:
        """Fail abandoned work in every store; returns how many rows."""
        total = 0
        for store in self.stores:
            try:
                total += store.recover()
            except Exception:
                log.exception("failing abandoned work failed")
        if total:
            log.warning("marked %d jobs and builds whose server stopped as failed", total)
        return total

    def close(self) -> None:
        """Stop the thread (the work this process still owns then ages into the orphan window)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
