"""What a training monitor reads of a scored trainer batch: an :class:`~evalsi.monitors.Observation`."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from evalsi.monitors import SIGNALS, Monitor, Observation, metrics, verdict_of
from evalsi.rewards._batch import Batch, component_values, totals
from evalsi.rewards._compose import RewardResult


def completion_text(completion: Any) -> str:
    """A completion as text: a string as it is, a conversation's message contents joined by newlines."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content", ""))
    if isinstance(completion, Sequence):
        return "\n".join(completion_text(message) for message in completion)
    return str(completion)


def observation(
    batch: Batch,
    results: Sequence[RewardResult],
    component_names: Sequence[str],
    *,
    step: int | None = None,
    max_completion_length: int | None = None,
) -> Observation:
    """The monitor's view of one scored batch.

    Lengths are the completion's token ids when the trainer passed them (else its whitespace-separated words);
    with ``max_completion_length`` a completion that reached it counts as truncated. Groups are runs of equal
    prompts (a GRPO batch repeats each prompt ``num_generations`` times). Each rollout's sandbox verdict is that
    of its first code-running component.

    Args:
        batch: The batch's columns (``completion``, optionally ``prompt`` and ``completion_ids``).
        results: The batch's reward results, in row order.
        component_names: The spec's components, in order.
        step: The trainer's step.
        max_completion_length: The trainer's completion length limit, in tokens.

    Returns:
        The observation of the batch.

    """
    texts = [completion_text(c) for c in batch["completion"]]
    ids = batch.get("completion_ids")
    lengths = [float(len(i)) for i in ids] if ids is not None else [float(len(t.split())) for t in texts]
    truncated = None if max_completion_length is None else [n >= max_completion_length for n in lengths]
    prompts = batch.get("prompt")
    keys: list[object] = list(range(len(texts))) if prompts is None else [_key(p) for p in prompts]
    verdicts: list[str | None] = []
    for result in results:
        verdict = None
        for score in result.components.values():
            verdict = verdict_of(score.status, score.reason, score.details)
            if verdict is not None:
                break
        verdicts.append(verdict)
    return Observation(
        totals=totals(results),
        components={name: component_values(results, name) for name in component_names},
        lengths=lengths,
        texts=texts,
        group_keys=keys,
        truncated=truncated,
        verdicts=verdicts,
        step=step,
    )


def _key(prompt: Any) -> object:
    """A prompt comparable by value (a conversation, a list of dicts, compares as its text)."""
    return prompt if isinstance(prompt, str) else completion_text(prompt)


ADAPTER_SIGNALS = tuple(name for name in SIGNALS if name != "reward_vs_heldout")
"""The signals the verl and OpenRLHF adapters log (the held-out one needs checkpoint evaluations)."""


class AdapterMonitor:
    """A :class:`~evalsi.monitors.Monitor` fed by a reward adapter that is called per rollout or per batch.

    verl's per-sample managers and OpenRLHF call the reward once per rollout, concurrently: rollouts are collected
    until ``batch`` of them arrived (one training step's rollouts), then read as one batch; with ``batch`` None each
    call is a batch (verl's batch manager). Every call gets the same keys (``monitor/<signal>``,
    ``monitor/<signal>/fired``, ``monitor/<signal>/threshold`` for each of :data:`ADAPTER_SIGNALS`), NaN where a
    signal does not apply yet, because both trainers gather each key over a step's rollouts and need it in all.

    Args:
        monitor: The monitor (its ``stop_on`` and ``stop_file`` decide what writes the stop file).
        batch: Rollouts per monitored batch; None: each call.

    """

    def __init__(self, monitor: Monitor, batch: int | None = None) -> None:
        if batch is not None and batch < 1:
            raise ValueError(f"the monitor's batch must be at least 1 rollout, got {batch}")
        self.monitor = monitor
        self.batch = batch
        self.steps = 0
        """Batches read so far (the step each is read at)."""
        self._pending: list[tuple[Any, Any, RewardResult]] = []
        self._latest: dict[str, float] = empty_metrics()
        self._lock = threading.Lock()

    def feed(
        self, completions: Sequence[Any], groups: Sequence[Any], results: Sequence[RewardResult]
    ) -> dict[str, float]:
        """Add one call's scored rollouts (``groups``: each rollout's prompt or group key); the latest signals."""
        with self._lock:
            self._pending.extend(zip(completions, groups, results, strict=True))
            while self._pending and (self.batch is None or len(self._pending) >= self.batch):
                size = len(self._pending) if self.batch is None else self.batch
                rows, self._pending = self._pending[:size], self._pending[size:]
                self._read(rows)
            return dict(self._latest)

    def _read(self, rows: list[tuple[Any, Any, RewardResult]]) -> None:
        results = [r for _, _, r in rows]
        names = list(dict.fromkeys(name for r in results for name in r.components))
        batch: Batch = {"completion": [c for c, _, _ in rows], "prompt": [g for _, g, _ in rows]}
        signals = self.monitor.observe(observation(batch, results, names, step=self.steps))
        self.steps += 1
        latest = empty_metrics()
        latest.update({k: v for k, v in metrics(signals).items() if k in latest})
        self._latest = latest


def empty_metrics() -> dict[str, float]:
    """Every adapter signal's keys, NaN (nothing measured yet)."""
    out: dict[str, float] = {}
    for name in ADAPTER_SIGNALS:
        for suffix in ("", "/fired", "/threshold"):
            out[f"monitor/{name}{suffix}"] = math.nan
    return out


_adapters: dict[tuple[Any, ...], AdapterMonitor] = {}
_adapters_lock = threading.Lock()


def adapter_monitor(
    spec: str,
    weights: Mapping[str, float],
    *,
    stop_on: Sequence[str] = (),
    stop_file: str | None = None,
    batch: int | None = None,
) -> AdapterMonitor:
    """The process's one adapter monitor for this spec and settings, made on first use.

    Raises:
        ValueError: An unknown monitor in ``stop_on``, ``stop_on`` without a ``stop_file``, a batch below 1.

    """
    key = (spec, tuple(stop_on), stop_file, batch)
    with _adapters_lock:
        found = _adapters.get(key)
        if found is None:
            monitor = Monitor(weights=dict(weights), stop_on=list(stop_on), stop_file=stop_file)
            found = _adapters[key] = AdapterMonitor(monitor, batch)
        return found


def stop_on_list(value: Any) -> list[str]:
    """``stop_on`` as given in a config: a list, or one comma-separated string (empty: none)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(part) for part in value]
