"""Verdicts of fully cached rollouts: composed once, with their JSON, and handed back while the cache repeats itself.

A warm cache answers the same content with the very same :class:`~evalsi.evaluators.Score` objects, call after
call. A rollout's result depends only on its bound reward's rules and those scores, so the result composed for a
row of score objects (one per component) is kept and reused when the row comes back, and so is its JSON form,
built on its first answer over HTTP JSON. An entry holds its reward and scores, so the key (their ``id``s) can
name no other objects while the entry lives. At most ``limit`` rows are kept; when full, the store starts over.

Only batches whose every score came from the cache pass here (nothing new to compose or encode the next time);
a batch that composition refuses (an error under ``onError: raise``, a total out of range) raises as it would
without the store, and nothing of it is kept.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import orjson

from evalsi.evaluators import Score
from evalsi.rewards import Reward, RewardResult
from evalsi.rewards.wire import result_json, results_json

_PREFIX = b'{"index":0,'
"""What a result's JSON at index 0 starts with; the rest of it is the same at every index."""


class _Entry:
    """One kept row: what keeps its key's objects alive, its result, and that result's JSON after the index."""

    __slots__ = ("fragment", "result", "row")

    def __init__(self, row: tuple[object, ...], result: RewardResult) -> None:
        self.row = row
        self.result = result
        self.fragment: bytes | None = None


class Verdicts:
    """Composed results (and their JSON) of rows of cached scores, by the identity of the reward and the scores.

    Args:
        limit: The most rows kept at once; a batch with more is composed and encoded as usual, and not kept.

    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._rows: dict[tuple[int, ...], _Entry] = {}
        self._results: dict[int, _Entry] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def compose(self, reward: Reward, columns: Sequence[Sequence[Score]]) -> list[RewardResult]:
        """``reward.compose(columns)``, from the kept results when every row was seen before.

        Args:
            reward: The bound reward the scores are of.
            columns: Cached scores indexed ``[component][rollout]``.

        Returns:
            One result per rollout, in order; a row seen before gets the same result object as before.

        Raises:
            RewardBatchError: A component errored under ``onError: raise`` (as :meth:`Reward.compose`).
            DataError: A total is not a finite number (as :meth:`Reward.compose`).

        """
        head = id(reward)
        rows = list(zip(*columns, strict=True))
        keys = [(head, *map(id, row)) for row in rows]
        found = self._rows
        entries = [found.get(key) for key in keys]
        if None not in entries:
            return [entry.result for entry in entries]  # type: ignore[union-attr]
        results = reward.compose(columns)
        if len(keys) <= self.limit:
            self._keep(reward, keys, rows, results)
        return results

    def _keep(
        self, reward: Reward, keys: list[tuple[int, ...]], rows: list[tuple[Score, ...]], results: list[RewardResult]
    ) -> None:
        with self._lock:
            if len(self._rows) + len(keys) > self.limit:
                self._rows.clear()
                self._results.clear()
            for key, row, result in zip(keys, rows, results, strict=True):
                entry = _Entry((reward, *row), result)
                self._rows[key] = entry
                self._results[id(result)] = entry

    def encode(self, results: Sequence[RewardResult]) -> bytes:
        """``orjson.dumps(results_json(results))``, from each kept result's JSON built once.

        Args:
            results: The results of a call, in rollout order.

        """
        kept = self._results
        entries = [kept.get(id(result)) for result in results]
        if None in entries:
            return orjson.dumps(results_json(results))
        parts = []
        for index, entry in enumerate(entries):
            fragment = entry.fragment  # type: ignore[union-attr]
            if fragment is None:
                fragment = entry.fragment = _fragment(entry.result)  # type: ignore[union-attr]
            parts.append(b'{"index":%d,' % index + fragment)
        return b'{"results":[' + b",".join(parts) + b"]}"


def _fragment(result: RewardResult) -> bytes:
    """A result's JSON without its opening brace and index: the same at every position of every answer."""
    encoded = orjson.dumps(result_json(result, 0))
    if not encoded.startswith(_PREFIX):  # the wire form starts with the index (see evalsi.rewards.wire)
        raise AssertionError(f"a result's JSON does not start with its index: {encoded[:40]!r}")
    return encoded[len(_PREFIX) :]
