"""Watching a training output directory: each new checkpoint is evaluated once, in step order, when it is ready.

Which steps are done is read from the results files, so a watcher that is killed and started again skips every
finished step and resumes a half-evaluated one from its journal. A checkpoint waits until it holds a model and
has settled; the watcher sleeps until the next checkpoint settles (or the next look at the directory), so a
checkpoint is picked up the moment it is ready rather than at the next poll.

A run spec with ``every: N`` is evaluated at the steps N divides, and at the final step: the checkpoint whose
``trainer_state.json`` says training reached its ``max_steps``, or with ``once`` the highest step there. A
checkpoint no spec is due at is skipped without being downloaded or served.

Bad input (a spec, a dataset, a checkpoint the serving strategy cannot serve) is raised rather than recorded:
every other checkpoint would fail the same way. Failed work (a server that did not start) is recorded in the
report and the watcher carries on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi.errors import DataError, EvalsiError, SpecError
from evalsi.monitors import parse_stop_on, write_monitor_stop_file
from evalsi.training._checkpoints import Checkpoint, SettleTracker
from evalsi.training._evaluator import CheckpointEvaluator, StepResult
from evalsi.training._monitoring import fired_in_trainer_state
from evalsi.training._sources import TRAINER_STATE, CheckpointSource, LocalDirectory

log = logging.getLogger(__name__)


class WatchDisplay(Protocol):
    """What the watcher reports as it goes (a progress display implements it)."""

    def waiting(self, pending: list[tuple[Checkpoint, str]]) -> None:
        """The checkpoints not ready yet, each with why (``no model yet``, ``settles in 12 s``)."""

    def evaluated(self, checkpoint: Checkpoint, result: StepResult) -> None:
        """A checkpoint's evaluation finished."""

    def failed(self, checkpoint: Checkpoint, reason: str) -> None:
        """A checkpoint could not be evaluated (it is not tried again by this watcher)."""

    def skipped(self, checkpoint: Checkpoint, reason: str) -> None:
        """A checkpoint is not evaluated: no run spec is due at its step."""


@dataclass
class WatchReport:
    """What one watcher run did."""

    evaluated: list[tuple[Checkpoint, StepResult]] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    skipped: list[Checkpoint] = field(default_factory=list)
    """Checkpoints whose results were already complete when the watcher found them, or no spec was due at."""
    stop_file_written: bool = False

    @property
    def regressed(self) -> bool:
        """Whether a checkpoint evaluated by this run regressed."""
        return any(result.regressed for _, result in self.evaluated)

    @property
    def gates_failed(self) -> bool:
        """Whether a checkpoint evaluated by this run failed its spec's own gates."""
        return any(not result.gates_passed for _, result in self.evaluated)


class Watcher:
    """Evaluates every checkpoint that appears in ``directory`` with ``evaluator``.

    Args:
        evaluator: Serves and evaluates one checkpoint.
        directory: The training output directory (or a remote source, see ``RemoteDirectory``).
        settle: Seconds a checkpoint must stay unchanged before it is evaluated (none for a source that
            ``settles_itself``, such as a model registry).
        poll: Seconds between looks at the directory for new checkpoints.
        stop_file: Written (JSON: step, regressions) when a checkpoint regresses; a training loop that checks
            for it stops (relative to the working directory when the watcher is made).
        once: Evaluate what is there (waiting for checkpoints that are settling) and return; the highest step
            there is the final one.
        display: Where progress goes.
        clock: The wall clock settling is timed by (tests pass a fake one).
        sleep: How the watcher waits between looks (tests pass a fake one).
        stop_on: Monitors (``monitor:<name>``) that also write the stop file: when a checkpoint's
            ``trainer_state.json`` logged one as fired (``monitor/<name>/fired``), before that checkpoint is
            evaluated.

    """

    def __init__(
        self,
        evaluator: CheckpointEvaluator,
        directory: Path | CheckpointSource,
        *,
        settle: float = 60.0,
        poll: float = 2.0,
        stop_file: Path | None = None,
        once: bool = False,
        display: WatchDisplay | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        stop_on: Sequence[str] = (),
    ) -> None:
        self.stop_on = [parse_stop_on(name) for name in stop_on]
        if self.stop_on and stop_file is None:
            raise ValueError("stopping on a monitor needs a stop file to write (--stop-file)")
        self.evaluator = evaluator
        self.source: CheckpointSource = LocalDirectory(directory) if isinstance(directory, Path) else directory
        # A source that knows when a checkpoint is complete (a model registry's READY) needs no settle wait.
        settles_itself = bool(getattr(self.source, "settles_itself", False))
        self.tracker = SettleTracker(0.0 if settles_itself else settle, clock, self.source.signature)
        self.poll = poll
        self.stop_file = None if stop_file is None else stop_file.expanduser().absolute()
        self.once = once
        self.display = display
        self.clock = clock
        self.sleep = sleep
        self._done: set[int] = set()
        self._highest: int | None = None
        self.report = WatchReport()
        """What this watcher did so far (kept when ``run`` is interrupted)."""

    def run(self, until: Callable[[], bool] | None = None) -> WatchReport:
        """Watch until interrupted (Ctrl-C), until ``until()`` is true, or with ``once`` until nothing is left.

        Args:
            until: Checked between checkpoints; the watch stops once it returns True.

        """
        report = self.report
        last_waiting: list[tuple[Checkpoint, str]] | None = None
        while until is None or not until():
            ready, waiting, wake = self._look(report)
            if ready is not None:
                self._evaluate(ready, report)
                continue  # look again at once: more may be ready
            if waiting != last_waiting and self.display is not None:
                self.display.waiting(waiting)
            last_waiting = waiting
            settling = [c for c, why in waiting if why.startswith("settles")]
            if self.once and not settling:
                for checkpoint, why in waiting:
                    report.failed[checkpoint.step] = why
                return report
            self.sleep(max(0.0, min(wake, self.clock() + self.poll) - self.clock()))
        return report

    def _look(self, report: WatchReport) -> tuple[Checkpoint | None, list[tuple[Checkpoint, str]], float]:
        """The first checkpoint ready to evaluate, those still waiting (and why), and when to look again."""
        waiting: list[tuple[Checkpoint, str]] = []
        wake = float("inf")
        found = self.source.discover()
        self._highest = max((c.step for c in found), default=None)
        for checkpoint in found:
            if checkpoint.step in self._done or checkpoint.step in report.failed:
                continue
            if self.evaluator.is_done(checkpoint.step, final=True):  # every spec: nothing is left to evaluate
                self._done.add(checkpoint.step)
                report.skipped.append(checkpoint)
                continue
            if self.source.find_model(checkpoint) is None:
                self.tracker.observe(checkpoint.path)  # a change seen now also restarts the settle wait
                waiting.append((checkpoint, "no model yet"))
                continue
            if self.tracker.settled(checkpoint.path):
                return checkpoint, waiting, self.clock()
            settles_at = self.tracker.settles_at(checkpoint.path)
            wake = min(wake, settles_at)
            waiting.append((checkpoint, f"settles in {max(0.0, settles_at - self.clock()):.0f} s"))
        return None, waiting, wake

    def _final(self, checkpoint: Checkpoint) -> bool:
        """Whether a checkpoint is the training's last: its trainer says so, or with ``once`` it is the highest."""
        if self.once and checkpoint.step == self._highest:
            return True
        finished = getattr(self.source, "training_finished", None)
        return bool(finished(checkpoint)) if callable(finished) else False

    def _evaluate(self, checkpoint: Checkpoint, report: WatchReport) -> None:
        settled_at = self.tracker.settles_at(checkpoint.path)
        final = self._final(checkpoint)
        if checkpoint.path.is_dir():  # on disk: read its trainer's monitors even when no spec is due at it
            self._check_monitors(checkpoint.path, checkpoint, report)
        if self.evaluator.is_done(checkpoint.step, final=final):  # no spec is due, or those due are complete
            self.tracker.forget([checkpoint.path])
            self._done.add(checkpoint.step)
            report.skipped.append(checkpoint)
            shown = getattr(self.display, "skipped", None)  # a display written before it existed has none
            if callable(shown) and not self.evaluator.due(checkpoint.step, final=final):
                cadence = ", ".join(f"{name} every {n}" for name, n in self.evaluator.cadence().items())
                shown(checkpoint, f"no run spec is due at step {checkpoint.step} ({cadence})")
            return
        try:
            local = self.source.fetch(checkpoint)
            self._check_monitors(local, checkpoint, report)
            result = self.evaluator.evaluate(local, checkpoint.step, settled_at=settled_at, final=final)
        except (SpecError, DataError):
            raise  # bad input: every other checkpoint would fail the same way
        except EvalsiError as exc:  # a serving or generation failure: report it, keep watching the others
            report.failed[checkpoint.step] = str(exc)
            if self.display is not None:
                self.display.failed(checkpoint, str(exc))
            return
        self.tracker.forget([checkpoint.path])
        report.evaluated.append((checkpoint, result))
        if result.complete:
            self._done.add(checkpoint.step)
        else:  # records failed to generate: try again after a restart, not in a loop now
            reasons = [f"{s.spec}: {s.reason}" for s in result.specs if s.status != "complete"]
            report.failed[checkpoint.step] = "; ".join(reasons) or "some records could not be generated"
        if result.regressed and self.stop_file is not None:
            write_stop_file(self.stop_file, result)
            report.stop_file_written = True
        if self.display is not None:
            self.display.evaluated(checkpoint, result)

    def _check_monitors(self, local: Path, checkpoint: Checkpoint, report: WatchReport) -> None:
        """Write the stop file when the checkpoint's trainer logged a ``stop_on`` monitor as fired."""
        if not self.stop_on or self.stop_file is None or report.stop_file_written:
            return
        folder = local if local.is_dir() else local.parent
        signal = fired_in_trainer_state(folder / TRAINER_STATE, self.stop_on)
        if signal is None:
            return
        log.warning("monitor %s fired (%s): writing the stop file %s", signal.name, signal.detail, self.stop_file)
        write_monitor_stop_file(self.stop_file, signal, checkpoint.step)
        report.stop_file_written = True


def write_stop_file(path: Path, result: StepResult) -> None:
    """Write the stop file (atomically): the step that regressed and the rules it failed."""
    body = {
        "reason": "regression",
        "step": result.step,
        "regressions": sorted({str(r) for s in result.specs for r in s.regressions}),
        "time": time.time(),
    }
    with atomic_writer(path) as handle:
        handle.write(orjson.dumps(body, option=orjson.OPT_INDENT_2))
