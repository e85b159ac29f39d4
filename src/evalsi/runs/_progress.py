"""The run's progress bar on stderr: records done of total, rate, elapsed time, ETA, failures and retries (Rich)."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from evalsi._util.retry import RetryNotice


class RateColumn(ProgressColumn):
    """Records per second done by this run (resumed records do not count), over its elapsed time."""

    def render(self, task: Task) -> Text:
        """``12.3 rec/s`` (blank until a record is done)."""
        done = task.completed - float(task.fields.get("resumed", 0))
        elapsed = task.elapsed
        if not elapsed or done <= 0:
            return Text("")
        return Text(f"{done / elapsed:.1f} rec/s", style="progress.data.speed")


class RunProgress:
    """A context manager around a Rich progress bar; disabled, it costs nothing."""

    def __init__(self, description: str, total: int, done: int, enabled: bool) -> None:
        console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            RateColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[failed]}", style="red"),
            TextColumn("{task.fields[retries]}", style="yellow"),
            console=console,
            disable=not enabled,
            transient=False,
            # Redrawn ten times a second only where it shows: to a file or a pipe Rich writes the bar once, at the
            # end, and would otherwise lay it out again and again for nothing.
            auto_refresh=console.is_terminal or console.is_jupyter,
        )
        self._task = self._progress.add_task(
            description, total=total, completed=done, failed="", retries="", resumed=done
        )
        self._failed = 0
        self._retries = 0

    def advance(self, records: int, failed: int = 0) -> None:
        """Count records as done (and failed ones, shown in red)."""
        self._failed += failed
        label = f"{self._failed} failed" if self._failed else ""
        self._progress.update(self._task, advance=records + failed, failed=label)

    def retrying(self, notice: RetryNotice) -> None:
        """Count a retry and show the latest failed attempt, short for 80 columns: ``3 retries (HTTP 503, 2/6)``."""
        self._retries += 1
        count = "1 retry" if self._retries == 1 else f"{self._retries} retries"
        label = f"{count} ({notice.reason}, {notice.attempt}/{notice.attempts})"
        self._progress.update(self._task, retries=label)

    @property
    def retries(self) -> int:
        """Retries seen so far."""
        return self._retries

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()
