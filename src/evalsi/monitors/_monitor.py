"""The training monitor: per-batch observations in, one :class:`Signal` per monitor out, a stop file on request.

A signal compares the recent ``window`` of batches with the run's first ``baseline`` batches, so what a run
starts with (a tiny model that never stops before the length limit, a task whose groups repeat one answer) is
not mistaken for a change; the group-variance, dominance and correlation signals read the window alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi.monitors._signals import (
    VERDICTS,
    Signal,
    component_shares,
    duplicate_fraction,
    groups_of,
    heldout_comparison,
    mean_or_none,
    pearson,
    verdict_rates,
    zero_variance_fraction,
)

log = logging.getLogger("evalsi.monitors")

SIGNALS = (
    "component_dominance",
    "length_drift",
    "length_reward_correlation",
    "truncation_rate",
    "duplicate_completions",
    "zero_variance_groups",
    "sandbox_verdicts",
    "reward_vs_heldout",
)
"""Every monitor, by the name it is logged under (``monitor/<name>``) and stopped on (``monitor:<name>``)."""


@dataclass(frozen=True)
class Thresholds:
    """When each monitor fires (the defaults are documented in the README's training section)."""

    dominance: float = 0.9
    """One component carries at least this share of the total's variance over the window (2+ weighted
    components)."""
    length_ratio: float = 1.5
    """Mean completion length over the window is at least this multiple of the baseline's."""
    length_correlation: float = 0.8
    """Pearson correlation of completion length and total reward over the window is at least this."""
    truncation_rise: float = 0.2
    """The truncated fraction rose by at least this much over the baseline's."""
    duplicate_rise: float = 0.25
    """The fraction of (near-)duplicate completions within groups rose by at least this much over the baseline's."""
    similarity: float = 0.9
    """Two completions whose word 3-gram Jaccard similarity is at least this count as near-duplicates."""
    zero_variance: float = 0.5
    """At least this fraction of the window's groups have no reward variance."""
    verdict_rise: float = 0.2
    """The rate of one sandbox verdict (timeout, cpu, memory, output, crash, sandbox) rose by at least this much."""
    reward_gain: float = 0.05
    """The train reward's mean rose by at least this much between two checkpoint evaluations ..."""
    heldout_margin: float = 0.0
    """... while the held-out metric's paired difference is at most this (flat or down)."""


@dataclass(frozen=True)
class Observation:
    """What the monitor reads of one generation batch (one row per rollout)."""

    totals: Sequence[float | None]
    components: Mapping[str, Sequence[float | None]]
    lengths: Sequence[float]
    texts: Sequence[str]
    group_keys: Sequence[object]
    truncated: Sequence[bool] | None = None
    verdicts: Sequence[str | None] = ()
    step: int | None = None

    def __post_init__(self) -> None:
        n = len(self.totals)
        for name, column in (("lengths", self.lengths), ("texts", self.texts), ("group_keys", self.group_keys)):
            if len(column) != n:
                raise ValueError(f"observation: {name} has {len(column)} rows, the totals {n}")
        for name, values in self.components.items():
            if len(values) != n:
                raise ValueError(f"observation: component {name!r} has {len(values)} rows, the totals {n}")


@dataclass
class _Batch:
    step: int | None
    totals: list[float | None]
    components: dict[str, list[float | None]]
    lengths: list[float]
    mean_total: float | None
    mean_length: float | None
    truncated: float | None
    duplicates: float | None
    zero_variance: float | None
    verdicts: dict[str, float]


@dataclass
class Monitor:
    """Reads training batches and reports :data:`SIGNALS`; writes ``stop_file`` when a ``stop_on`` one fires.

    Args:
        weights: Each component's weight in the spec (dominance reads components of non-zero weight).
        thresholds: When each signal fires.
        baseline: How many first batches make the baseline.
        window: How many recent batches each signal reads.
        stop_on: Signal names (or ``monitor:<name>``) that stop training.
        stop_file: Written (JSON) when a ``stop_on`` signal fires; ``evalsi_callback(None, stop_file=...)`` stops
            the trainer at its next step.

    """

    weights: Mapping[str, float] = field(default_factory=dict)
    thresholds: Thresholds = field(default_factory=Thresholds)
    baseline: int = 3
    window: int = 3
    stop_on: Sequence[str] = ()
    stop_file: str | Path | None = None
    history: list[_Batch] = field(default_factory=list, init=False, repr=False)
    """What each batch read so far came to."""
    heldout: list[tuple[int, dict[str, list[float]]]] = field(default_factory=list, init=False, repr=False)
    """Each checkpoint evaluation's step and held-out per-record values."""
    fired: dict[str, int | None] = field(default_factory=dict, init=False)
    """Each signal that fired, with the step it first fired at."""

    def __post_init__(self) -> None:
        if self.baseline < 1 or self.window < 1:
            raise ValueError(f"baseline and window must be at least 1 batch, got {self.baseline} and {self.window}")
        self.stop_on = [parse_stop_on(name) for name in self.stop_on]
        if self.stop_on and self.stop_file is None:
            raise ValueError("stop_on needs a stop_file to write (the trainer's callback watches it)")
        if self.stop_file is not None:
            self.stop_file = Path(self.stop_file).expanduser().absolute()

    # -- reading batches -------------------------------------------------------------------------------------------

    def observe(self, observation: Observation) -> list[Signal]:
        """Add one batch; return every signal as of this batch (and write the stop file when one stops training).

        Args:
            observation: The batch's step, totals, components, completions, lengths and group keys.

        Returns:
            Every signal, fired or not, as of this batch.

        """
        groups = groups_of(observation.group_keys)
        trunc = observation.truncated
        self.history.append(
            _Batch(
                step=observation.step,
                totals=list(observation.totals),
                components={k: list(v) for k, v in observation.components.items()},
                lengths=[float(x) for x in observation.lengths],
                mean_total=mean_or_none([t for t in observation.totals if t is not None]),
                mean_length=mean_or_none([float(x) for x in observation.lengths]),
                truncated=None if trunc is None else mean_or_none([float(t) for t in trunc]),
                duplicates=duplicate_fraction(observation.texts, groups, self.thresholds.similarity),
                zero_variance=zero_variance_fraction(observation.totals, groups),
                verdicts=verdict_rates(observation.verdicts),
            )
        )
        signals = self.signals()
        self._record(signals, observation.step)
        return signals

    def observe_heldout(self, step: int, values: Mapping[str, Sequence[float]]) -> Signal:
        """Add a checkpoint's held-out per-record values; compare them with the first checkpoint's (paired).

        The train reward at a checkpoint is the mean total of the last ``window`` batches up to its step (for a
        checkpoint before any batch, such as the base model, the first ``window`` batches).

        Args:
            step: The checkpoint's training step.
            values: The samples' values of each held-out record, keyed by record (pairing) key.

        Returns:
            The ``heldout_divergence`` signal as of this checkpoint.

        """
        self.heldout.append((step, {k: list(v) for k, v in values.items()}))
        signal = self._heldout_signal()
        self._record([signal], step)
        return signal

    def signals(self) -> list[Signal]:
        """Every signal as of the batches read so far."""
        t = self.thresholds
        base = self.history[: self.baseline]
        recent = self.history[-self.window :]
        settled = len(self.history) > self.baseline  # the window has batches past the baseline
        out = [self._dominance(recent)]
        out.append(_rise("length_drift", base, recent, "mean_length", t.length_ratio, settled, ratio=True))
        out.append(self._length_correlation(recent))
        out.append(_rise("truncation_rate", base, recent, "truncated", t.truncation_rise, settled))
        out.append(_rise("duplicate_completions", base, recent, "duplicates", t.duplicate_rise, settled))
        zero = mean_or_none([b.zero_variance for b in recent if b.zero_variance is not None])
        out.append(Signal("zero_variance_groups", zero, t.zero_variance, zero is not None and zero >= t.zero_variance))
        out.append(self._verdicts(base, recent, settled))
        out.append(self._heldout_signal())
        return out

    # -- signals ---------------------------------------------------------------------------------------------------

    def _dominance(self, recent: list[_Batch]) -> Signal:
        threshold = self.thresholds.dominance
        weighted = [name for name, w in self.weights.items() if w != 0.0]
        if len(weighted) < 2:
            return Signal("component_dominance", None, threshold, False, "fewer than 2 weighted components")
        totals = [t for b in recent for t in b.totals]
        columns = {
            name: [v for b in recent for v in b.components.get(name, [None] * len(b.totals))] for name in weighted
        }
        shares = component_shares(totals, columns, self.weights)
        if not shares:
            return Signal("component_dominance", None, threshold, False, "the total does not vary")
        top = max(shares, key=lambda name: shares[name])
        return Signal("component_dominance", shares[top], threshold, shares[top] >= threshold, top)

    def _length_correlation(self, recent: list[_Batch]) -> Signal:
        threshold = self.thresholds.length_correlation
        pairs = [(x, t) for b in recent for x, t in zip(b.lengths, b.totals, strict=True) if t is not None]
        r = pearson([x for x, _ in pairs], [t for _, t in pairs]) if pairs else None
        return Signal("length_reward_correlation", r, threshold, r is not None and r >= threshold)

    def _verdicts(self, base: list[_Batch], recent: list[_Batch], settled: bool) -> Signal:
        threshold = self.thresholds.verdict_rise
        rises: dict[str, float] = {}
        for name in VERDICTS:
            before = mean_or_none([b.verdicts[name] for b in base if b.verdicts])
            now = mean_or_none([b.verdicts[name] for b in recent if b.verdicts])
            if before is not None and now is not None:
                rises[name] = now - before
        if not rises:
            return Signal("sandbox_verdicts", None, threshold, False, "no code-running component")
        top = max(rises, key=lambda name: rises[name])
        return Signal("sandbox_verdicts", rises[top], threshold, settled and rises[top] >= threshold, top)

    def verdict_metrics(self) -> dict[str, float]:
        """The latest batch's rate of each sandbox verdict: ``monitor/sandbox/<verdict>`` (empty without any)."""
        if not self.history or not self.history[-1].verdicts:
            return {}
        return {f"monitor/sandbox/{name}": rate for name, rate in self.history[-1].verdicts.items()}

    def _heldout_signal(self) -> Signal:
        t = self.thresholds
        if len(self.heldout) < 2:
            return Signal("reward_vs_heldout", None, t.heldout_margin, False, "fewer than 2 held-out evaluations")
        (step_a, values_a), (step_b, values_b) = self.heldout[0], self.heldout[-1]
        reward_a, reward_b = self._reward_near(step_a), self._reward_near(step_b)
        comparison = heldout_comparison(values_a, values_b)
        if comparison.pairs == 0 or reward_a is None or reward_b is None:
            return Signal("reward_vs_heldout", None, t.heldout_margin, False, "nothing to pair")
        diff = comparison.difference
        gain = reward_b - reward_a
        fired = gain >= t.reward_gain and diff.mean <= t.heldout_margin
        detail = (
            f"step {step_b}: train reward {gain:+.3f}, held-out {diff.mean:+.3f} "
            f"[{diff.ci_low:+.3f}, {diff.ci_high:+.3f}] over {comparison.pairs} records"
        )
        return Signal("reward_vs_heldout", diff.mean, t.heldout_margin, fired, detail)

    def _reward_near(self, step: int) -> float | None:
        upto = [b for b in self.history if b.step is None or b.step <= step]
        batches = upto[-self.window :] if upto else self.history[: self.window]
        return mean_or_none([b.mean_total for b in batches if b.mean_total is not None])

    # -- stopping --------------------------------------------------------------------------------------------------

    def _record(self, signals: Iterable[Signal], step: int | None) -> None:
        for signal in signals:
            if not signal.fired or signal.name in self.fired:
                continue
            self.fired[signal.name] = step
            log.warning(
                "monitor %s fired at step %s: %s (threshold %s) %s",
                signal.name,
                step,
                signal.value,
                signal.threshold,
                signal.detail,
            )
            if signal.name in self.stop_on and self.stop_file is not None:
                write_monitor_stop_file(Path(self.stop_file), signal, step)


def _rise(
    name: str,
    base: list[_Batch],
    recent: list[_Batch],
    attribute: str,
    threshold: float,
    settled: bool,
    *,
    ratio: bool = False,
) -> Signal:
    """A signal that fires when the window's mean of ``attribute`` rose past the baseline's by ``threshold``.

    The value is the window's mean over the baseline's (``ratio``) or the window's mean itself; before the window
    holds a batch past the baseline nothing fires.
    """
    before = mean_or_none([getattr(b, attribute) for b in base if getattr(b, attribute) is not None])
    now = mean_or_none([getattr(b, attribute) for b in recent if getattr(b, attribute) is not None])
    if before is None or now is None:
        return Signal(name, None, threshold, False, "not measured")
    if ratio:
        value = now / before if before > 0 else None
        fired = settled and value is not None and value >= threshold
        return Signal(name, value, threshold, fired, f"baseline {before:.3g}, now {now:.3g}")
    fired = settled and now - before >= threshold
    return Signal(name, now, threshold, fired, f"baseline {before:.3g}", level=before + threshold)


def parse_stop_on(name: str) -> str:
    """A monitor's name from ``monitor:<name>`` (or the bare name).

    Args:
        name: A ``stop_on`` entry such as ``monitor:length_drift``.

    Raises:
        ValueError: Not a known monitor (the message lists them).

    """
    bare = name.removeprefix("monitor:")
    if bare not in SIGNALS:
        raise ValueError(f"unknown monitor {name!r}: stop on one of " + ", ".join(f"monitor:{s}" for s in SIGNALS))
    return bare


def metrics(signals: Iterable[Signal]) -> dict[str, float]:
    """Signals as log metrics: ``monitor/<name>``, ``monitor/<name>/fired`` and ``monitor/<name>/threshold``.

    The value, 0 or 1, and the level on the value's scale the signal fires at (for a rise over the run's
    baseline, the baseline plus the rise, which the logs carry nowhere else).

    A signal that does not apply (value None) is left out.

    Args:
        signals: The signals of one batch (:meth:`Monitor.observe`).

    """
    out: dict[str, float] = {}
    for signal in signals:
        if signal.value is None:
            continue
        out[f"monitor/{signal.name}"] = float(signal.value)
        out[f"monitor/{signal.name}/fired"] = 1.0 if signal.fired else 0.0
        out[f"monitor/{signal.name}/threshold"] = float(signal.line)
    return out


def write_monitor_stop_file(path: Path, signal: Signal, step: int | None) -> None:
    """Write the stop file (atomically): the monitor that fired, its value and threshold, and the step.

    Args:
        path: The stop file the trainer's callback watches.
        signal: The signal that fired.
        step: The training step it fired at, None when unknown.

    """
    body = {
        "reason": "monitor",
        "monitor": signal.name,
        "value": signal.value,
        "threshold": signal.threshold,
        "detail": signal.detail,
        "step": step,
        "time": time.time(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as handle:
        handle.write(orjson.dumps(body, option=orjson.OPT_INDENT_2))
