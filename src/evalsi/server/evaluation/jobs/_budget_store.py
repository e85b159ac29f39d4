"""Each project's budget on the operator's generation targets: requests and completion tokens per window.

A target's ``budget`` (``window``, ``max_requests``, ``max_tokens``) is counted in the database
(``target_usage``), one row per project, target and window, so replicas and restarts share it. Before a batch
is sent, the job reserves what it may: as many of its rows as the requests left allow, each holding the job's
``max_tokens`` (a reply can be no longer). After the batch it settles: a row never sent gives its request and
tokens back, and a sent one gives back what the endpoint's ``usage`` says it did not use. Reservations are
compare-and-set updates, so two jobs (or two replicas) cannot both take the last of a budget.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from evalsi.server.evaluation._config import TargetBudget
from evalsi.server.evaluation._row_store import changed
from evalsi.server.evaluation._tables import target_usage

_ATTEMPTS = 50


@dataclass(frozen=True, slots=True)
class Grant:
    """What a batch may send.

    ``rows`` rows (the first ones), each holding ``tokens_each`` tokens, in the window starting at ``window_start``.
    """

    rows: int
    tokens_each: int
    window_start: float


class Budgets:
    """Reservations against the targets' per-project budgets."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def reserve(self, project: str, target: str, budget: TargetBudget, rows: int, tokens_each: int) -> Grant:
        """Reserve up to ``rows`` requests of ``tokens_each`` tokens; the grant may be fewer (zero: used up)."""
        window = math.floor(time.time() / budget.window) * budget.window
        key = _key(project, target, window)
        for _ in range(_ATTEMPTS):
            with self.engine.connect() as connection:
                found = connection.execute(select(target_usage.c.requests, target_usage.c.tokens).where(*key)).first()
            if found is None:
                try:
                    with self.engine.begin() as connection:
                        connection.execute(
                            insert(target_usage).values(
                                project=project, target=target, window_start=window, requests=0, tokens=0
                            )
                        )
                except IntegrityError:
                    pass  # another job made it first
                continue
            used_requests, used_tokens = int(found.requests), int(found.tokens)
            granted = rows
            if budget.max_requests is not None:
                granted = min(granted, max(0, budget.max_requests - used_requests))
            if budget.max_tokens is not None:
                granted = min(granted, max(0, budget.max_tokens - used_tokens) // max(1, tokens_each))
            if granted == 0:
                return Grant(0, tokens_each, window)
            unchanged = (*key, target_usage.c.requests == used_requests, target_usage.c.tokens == used_tokens)
            taken = {"requests": used_requests + granted, "tokens": used_tokens + granted * tokens_each}
            if changed(self.engine, update(target_usage).where(*unchanged).values(taken)):
                return Grant(granted, tokens_each, window)
        return Grant(0, tokens_each, window)  # contended past reason: treat as used up for this batch

    def settle(self, project: str, target: str, grant: Grant, unsent: int, unused_tokens: int) -> None:
        """Give back the requests of ``unsent`` rows and ``unused_tokens`` tokens of a grant."""
        if not unsent and not unused_tokens:
            return
        given_back = {"requests": target_usage.c.requests - unsent, "tokens": target_usage.c.tokens - unused_tokens}
        changed(self.engine, update(target_usage).where(*_key(project, target, grant.window_start)).values(given_back))


def _key(project: str, target: str, window_start: float) -> tuple[ColumnElement[bool], ...]:
    """The conditions selecting the project's usage of a target in one window."""
    return (
        target_usage.c.project == project,
        target_usage.c.target == target,
        target_usage.c.window_start == window_start,
    )
