"""Skipped components in trainer logs: a per-rollout flag beside each component, and one warning per process.

verl and OpenRLHF average the numbers they are given, so a skipped component (no reference, no test cases)
reads 0.0 there, like a wrong answer. Beside each component the adapters log ``<component>_skipped`` (1.0 when
skipped), whose mean is the fraction skipped; and when a component is skipped for a whole batch (or, for
trainers that score one sample per call, for many rollouts in a row), a misconfigured label column is the
likely cause, so the process warns once per component.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from evalsi.rewards._compose import RewardResult

log = logging.getLogger("evalsi.rewards")

SKIPPED_SUFFIX = "_skipped"
"""``<component>_skipped``: 1.0 for a rollout whose component was skipped, else 0.0."""
MIN_BATCH = 16
"""A batch at least this large, with the component skipped for every rollout, warns."""
MIN_STREAK = 64
"""Or this many rollouts in a row across calls (trainers that score one sample per call)."""

_lock = threading.Lock()
_streaks: dict[str, int] = {}
_warned: set[str] = set()


def watch_skips(components: Sequence[str], results: Sequence[RewardResult], trainer: str) -> None:
    """Warn once per process and component when it is skipped for a whole batch or a long run of rollouts."""
    if not results:
        return
    single = results[0].components if len(results) == 1 else None
    if single is not None:  # a per-sample trainer's call: nothing to count unless a component is skipped
        for name in components:
            if name not in _warned and (single[name].status == "skipped" or _streaks.get(name)):
                break
        else:
            return
    due: list[tuple[str, int, int]] = []  # (component, batch size, streak) to warn about
    with _lock:  # once per call, not per component: per-sample trainers call once per rollout
        for name in components:
            if name in _warned:
                continue
            if single is not None:  # a per-sample trainer's call
                if single[name].status != "skipped":
                    _streaks[name] = 0
                    continue
            else:
                skipped = [result.components[name].status == "skipped" for result in results]
                if False in skipped:  # the streak the next call continues: the skips at the end of this batch
                    _streaks[name] = skipped[::-1].index(False)
                    continue
            streak = _streaks.get(name, 0) + len(results)
            _streaks[name] = streak
            if len(results) < MIN_BATCH and streak < MIN_STREAK:
                continue
            _warned.add(name)
            due.append((name, len(results), streak))
    for name, size, streak in due:
        count = f"all {size} rollouts of a batch" if size >= MIN_BATCH else f"{streak} rollouts in a row"
        log.warning(
            "%s: component %r was skipped for %s (%s); it adds nothing to the reward. If every rollout should "
            "have it, check the label or reference column the trainer sends (warned once per process).",
            trainer,
            name,
            count,
            results[0].components[name].reason or "no reason given",
        )


def reset_skip_watch() -> None:
    """Forget the streaks and warnings (tests; a process that reloads its spec)."""
    with _lock:
        _streaks.clear()
        _warned.clear()
