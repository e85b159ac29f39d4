"""TRL adapter: a RewardSpec as ``GRPOTrainer`` / ``RLOOTrainer`` reward functions.

Example::

    from evalsi.rewards.trl import reward_funcs
    funcs, weights = reward_funcs("code-reward.yaml")        # server="https://evalsi..." to score remotely
    trainer = GRPOTrainer(..., reward_funcs=funcs, args=GRPOConfig(..., reward_weights=weights))

``funcs[0]`` is the total (weight 1); then one function per component (weight 0), named
``<spec name>/<component>``, so TRL logs ``rewards/<spec name>/mean`` and ``rewards/<spec name>/<component>/mean``
without changing what is trained on. TRL calls every function with the same batch: the first call scores it,
the others reuse that result, in whatever order (or concurrently, with ``asynchronous=True``) TRL calls them.

Per-component (GDPO-style) normalisation: ``reward_funcs(spec, vector=True)`` returns one function per component
with the spec's weights, for ``GRPOConfig(multi_objective_aggregation="normalize_then_sum")``; each component
reads what it adds to the total (see :func:`evalsi.rewards._batch.vector_values`: gates and error policies apply).

Each batch's scoring time is logged through TRL's ``log_metric`` as ``reward/latency_ms`` (the wall time every
rollout of the batch waited), ``reward/latency_ms_per_rollout`` (that time over the batch size) and
``reward/latency_ms/p50``, ``/p90``, ``/p99`` (the percentiles of each rollout's own scoring time: what its
components took; in-process scoring only), beside ``kl`` and ``entropy``, so a step whose reward is the
bottleneck shows it, and whether a few slow rollouts make it so.

With ``monitor=Monitor(...)`` the total's function also feeds each scored batch to the training monitors
(:mod:`evalsi.monitors`) and logs ``monitor/<signal>``, ``monitor/<signal>/fired``,
``monitor/<signal>/threshold`` and ``monitor/sandbox/<verdict>`` through TRL's ``log_metric`` (averaged over
each logging step, beside ``kl``); a monitor in the Monitor's ``stop_on`` writes its stop file, which
``evalsi_callback(None, stop_file=...)`` turns into the end of training at the next step.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from evalsi.monitors import Monitor, metrics
from evalsi.rewards._batch import (
    LATENCY_KEY,
    Batch,
    component_values,
    rows,
    same_batch,
    totals,
    trl_batch,
    vector_values,
)
from evalsi.rewards._compose import RewardResult
from evalsi.rewards._latency import elapsed_ms, latency_percentiles
from evalsi.rewards._monitoring import observation
from evalsi.rewards._scorer import Scorer, SpecSource, open_scorer, resource_of, server_of

RewardFunc = Callable[..., list[float | None]] | Callable[..., Awaitable[list[float | None]]]

__all__ = ["BatchMemo", "RewardFunc", "RewardFunction", "reward_funcs"]


@dataclass
class _Entry:
    batch: Batch
    future: Future[list[RewardResult]]
    reads: int = 0
    latency_ms: float = 0.0
    percentiles: dict[str, float] = field(default_factory=dict)


class BatchMemo:
    """Scores each batch once for all the functions that read it.

    The batches being read are remembered with their results (or the scoring still running), matched by the
    values of their columns, so a component function called after, before or alongside the total reuses the
    total's computation instead of scoring again. Once all ``readers`` functions have read a batch it is
    forgotten (results kept alive longer only cost the garbage collector); at most ``size`` batches are kept.

    Args:
        scorer: What scores a batch: a loaded spec, a Reward Service client or a Ray pool.
        readers: How many functions read each batch.
        size: The most batches remembered at once.

    """

    def __init__(self, scorer: Scorer, readers: int = 1, size: int = 4) -> None:
        self.scorer = scorer
        self.readers = readers
        self._entries: deque[_Entry] = deque(maxlen=size)
        self._lock = threading.Lock()

    def results(self, batch: Batch, log_metric: Callable[[str, float], None] | None = None) -> list[RewardResult]:
        """The batch's results, scoring it here if no other call has (or is doing it).

        The call that scores the batch reports its latency to ``log_metric`` (TRL's), when given.

        Args:
            batch: TRL's columns: ``prompts``, ``completions`` and the dataset's other columns.
            log_metric: TRL's metric logger, if any.

        """
        entry, owner = self._claim(batch)
        if owner:
            self._compute(batch, entry)
        results = self._read(entry, entry.future.result())
        if owner:
            _log_latency(log_metric, entry, len(results))
        return results

    async def results_async(
        self, batch: Batch, log_metric: Callable[[str, float], None] | None = None
    ) -> list[RewardResult]:
        """As :meth:`results`, scoring on a worker thread so TRL's event loop runs the other functions.

        Args:
            batch: TRL's columns, as for :meth:`results`.
            log_metric: TRL's metric logger, if any.

        """
        entry, owner = self._claim(batch)
        if owner:
            await asyncio.to_thread(self._compute, batch, entry)
        results = self._read(entry, await asyncio.wrap_future(entry.future))
        if owner:
            _log_latency(log_metric, entry, len(results))
        return results

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its spec (TRL's async GRPO spawns its rollout worker and pickles the reward functions):
        # functions pickled together keep sharing one memo, rebuilt on the other side.
        return (_memo_for, (resource_of(self.scorer), server_of(self.scorer), self.readers))

    def _claim(self, batch: Batch) -> tuple[_Entry, bool]:
        with self._lock:
            for entry in self._entries:
                if same_batch(entry.batch, batch):
                    return entry, False
            # Shallow copies: the lists TRL passes are compared, and kept alive, by their items.
            entry = _Entry({key: list(values) for key, values in batch.items()}, Future())
            self._entries.append(entry)
            return entry, True

    def _read(self, entry: _Entry, results: list[RewardResult]) -> list[RewardResult]:
        with self._lock:
            entry.reads += 1
            if entry.reads >= self.readers and entry in self._entries:
                self._entries.remove(entry)
        return results

    def _compute(self, batch: Batch, entry: _Entry) -> None:
        future = entry.future
        started = time.perf_counter()
        try:
            results = self.scorer.score(rows(batch))
            entry.latency_ms = elapsed_ms(started)
            entry.percentiles = latency_percentiles(results)
            future.set_result(results)
        except BaseException as exc:
            with self._lock:  # a failed batch is not remembered: calling again retries it
                for entry in list(self._entries):
                    if entry.future is future:
                        self._entries.remove(entry)
            future.set_exception(exc)


def _log_latency(log_metric: Callable[[str, float], None] | None, entry: _Entry, count: int) -> None:
    """Report a batch's scoring time and its rollouts' percentiles through TRL's ``log_metric``.

    TRL before 1.0 has no ``log_metric``: nothing is logged then.
    """
    if log_metric is None or not callable(log_metric):
        return
    log_metric(LATENCY_KEY, entry.latency_ms)
    if count:
        log_metric(LATENCY_KEY + "_per_rollout", entry.latency_ms / count)
    for key, value in entry.percentiles.items():
        log_metric(key, value)


def _memo_for(resource: dict[str, Any], server: str | None, readers: int) -> BatchMemo:
    return BatchMemo(open_scorer(resource, server), readers)


class RewardFunction:
    """One TRL reward function of a spec: the total (``component`` None) or one component's values.

    A callable instance rather than a closure, so it pickles (as its spec); TRL names it by ``__name__``.

    Args:
        memo: The memo shared by the spec's functions.
        name: The function's ``__name__``, which TRL logs its values under.
        component: The component it reads; None for the total.
        monitor: The training monitor fed each batch, if any (the total's function has it).
        max_completion_length: TRL's completion length limit, for the monitor's truncation rate.
        vector: Read the component as it counts in the total (gated: 0.0) rather than as it scored.

    """

    def __init__(
        self,
        memo: BatchMemo,
        name: str,
        component: str | None = None,
        monitor: Monitor | None = None,
        max_completion_length: int | None = None,
        *,
        vector: bool = False,
    ) -> None:
        self.memo = memo
        self.component = component
        self.monitor = monitor
        self.max_completion_length = max_completion_length
        self.vector = vector
        """Read the component as it counts in the total (gated: 0.0) rather than as it scored."""
        self.__name__ = self.__qualname__ = name

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        """One ``float | None`` per completion; TRL passes every argument by keyword."""
        batch = trl_batch(prompts, completions, kwargs)
        results = self.memo.results(batch, kwargs.get("log_metric"))
        self.watch(batch, results, kwargs)
        return self.project(results)

    async def call_async(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        """As ``__call__``, scoring on a worker thread.

        Args:
            prompts: The batch's prompts.
            completions: The batch's completions.
            **kwargs: The dataset's other columns and TRL's ``trainer_state`` and ``log_metric``.

        """
        batch = trl_batch(prompts, completions, kwargs)
        results = await self.memo.results_async(batch, kwargs.get("log_metric"))
        self.watch(batch, results, kwargs)
        return self.project(results)

    def watch(self, batch: Batch, results: Sequence[RewardResult], kwargs: dict[str, Any]) -> None:
        """Feed the batch to the monitor (when this function has one) and log its signals through ``log_metric``.

        Args:
            batch: TRL's columns.
            results: The batch's results.
            kwargs: TRL's keyword arguments (``trainer_state`` gives the step, ``log_metric`` the logger).

        """
        if self.monitor is None:
            return
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        names = self.memo.scorer.component_names
        seen = observation(batch, results, names, step=step, max_completion_length=self.max_completion_length)
        logged = metrics(self.monitor.observe(seen))
        logged.update(self.monitor.verdict_metrics())
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for name, value in logged.items():
                log_metric(name, value)

    def project(self, results: Sequence[RewardResult]) -> list[float | None]:
        """The values of this function, from the batch's results.

        Args:
            results: The batch's results, in batch order.

        """
        if self.component is None:
            return totals(results)
        if self.vector:
            return vector_values(results, self.component, None)
        return component_values(results, self.component)

    def __repr__(self) -> str:
        return f"RewardFunction({self.__name__!r})"


def reward_funcs(
    spec: SpecSource,
    server: str | None = None,
    *,
    asynchronous: bool = False,
    monitor: Monitor | None = None,
    max_completion_length: int | None = None,
    vector: bool = False,
) -> tuple[list[RewardFunc], list[float]]:
    """TRL reward functions for a RewardSpec, and their ``reward_weights``.

    Args:
        spec: A RewardSpec file, a mapping, or a loaded ``Reward``.
        server: Score through the evalsi server's Reward Service at this URL (one request per batch).
        asynchronous: Return ``async def`` functions, which TRL runs concurrently on its event loop.
        monitor: Training monitors fed every scored batch (their weights default to the spec's); their signals are
            logged through TRL's ``log_metric`` as ``monitor/<signal>``.
        max_completion_length: The trainer's completion limit (``GRPOConfig.max_completion_length``): a completion
            of that many tokens counts as truncated for the truncation monitor.
        vector: Return the reward vector instead: one function per component, weighted by the spec, for
            ``multi_objective_aggregation="normalize_then_sum"`` (each component normalised within its group,
            then weighted). A gated rollout reads 0.0 in every component, an error under ``onError: zero``
            0.0, a skipped component None (left out of its group's statistics); the floor and ``clip`` apply
            to the total only, so they have no counterpart here. The monitor, if any, rides on the first.

    Returns:
        ``(funcs, weights)``: the total (weight 1.0), then one function per component (weight 0.0); with
        ``vector``, one function per component and the spec's weights.

    Raises:
        SpecError: The spec is invalid (file, line and field).

    Each function returns one ``float | None`` per completion; None (NaN to TRL: not applicable) marks a
    skipped or errored component, and every function of a rollout whose spec gives no total
    (``onError: none``), so TRL treats that rollout as unscorable rather than as a reward of 0. The sync
    functions pickle (for TRL's async GRPO worker); the async ones are plain ``async def`` functions, which
    every TRL version recognises.

    """
    scorer = open_scorer(spec, server)
    names = scorer.component_names
    if monitor is not None and not monitor.weights:
        monitor.weights = {rule.name: rule.weight for rule in scorer.rules}
    if vector:
        memo = BatchMemo(scorer, readers=len(names))
        functions = [
            RewardFunction(
                memo,
                f"{scorer.name}/{name}",
                name,
                monitor if index == 0 else None,
                max_completion_length,
                vector=True,
            )
            for index, name in enumerate(names)
        ]
        weights = [rule.weight for rule in scorer.rules]
    else:
        memo = BatchMemo(scorer, readers=1 + len(names))
        functions = [RewardFunction(memo, scorer.name, None, monitor, max_completion_length)]
        functions += [RewardFunction(memo, f"{scorer.name}/{name}", name) for name in names]
        weights = [1.0] + [0.0] * len(names)
    funcs: list[RewardFunc] = [_async(f) for f in functions] if asynchronous else list(functions)
    return funcs, weights


def _async(function: RewardFunction) -> RewardFunc:
    async def score_async(
        prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        return await function.call_async(prompts, completions, **kwargs)

    # TRL names metrics after __name__: rewards/<name>/mean.
    score_async.__name__ = score_async.__qualname__ = function.__name__
    score_async.__doc__ = f"evalsi reward {function.__name__!r}: one float | None per completion."
    return score_async
