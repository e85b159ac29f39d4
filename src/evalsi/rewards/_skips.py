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

from evalsi.evaluators import Score
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


def skip_flags(components: Sequence[str], results: Sequence[RewardResult]) -> dict[str, list[float]]:
    """``{<component>_skipped: [1.0 | 0.0 per rollout]}`` for every component, in spec order."""
    return {
        name + SKIPPED_SUFFIX: [1.0 if r.components[name].status == "skipped" else 0.0 for r in results]
        for name in components
    }


def watch_skips(components: Sequence[str], results: Sequence[RewardResult], trainer: str) -> None:
    """Warn once per process and component when it is skipped for a whole batch or a long run of rollouts."""
    if not results:
        return
    for name in components:
        scores = [r.components[name] for r in results]
        all_skipped = all(s.status == "skipped" for s in scores)
        with _lock:
            if name in _warned:
                continue
            if not all_skipped:
                _streaks[name] = _trailing_skips(scores)
                continue
            streak = _streaks.get(name, 0) + len(scores)
            _streaks[name] = streak
            if len(scores) < MIN_BATCH and streak < MIN_STREAK:
                continue
            _warned.add(name)
        size = len(scores)
        count = f"all {size} rollouts of a batch" if size >= MIN_BATCH else f"{streak} rollouts in a row"
        log.warning(
            "%s: component %r was skipped for %s (%s); it adds nothing to the reward. If every rollout should "
            "have it, check the label or reference column the trainer sends (warned once per process).",
            trainer,
            name,
            count,
            scores[0].reason or "no reason given",
        )


def reset_skip_watch() -> None:
    """Forget the streaks and warnings (tests; a process that reloads its spec)."""
    with _lock:
        _streaks.clear()
        _warned.clear()


def _trailing_skips(scores: Sequence[Score]) -> int:
    """How many scores at the end of the batch are skipped (the streak the next call continues)."""
    count = 0
    for score in reversed(scores):
        if score.status != "skipped":
            break
        count += 1
    return count
