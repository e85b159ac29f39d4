"""The training reward per step, read from a trainer's own logs, to draw beside the held-out evaluations.

Two sources, tried in this order for a training run's output folder (the parent of its checkpoints):

- ``trainer_state.json`` (a Hugging Face trainer writes one into every checkpoint): its ``log_history`` holds one
  entry per logging step, ``{"step": 10, "reward": 0.4, "rewards/<function>/mean": 0.7, ...}`` for TRL's GRPO.
  The newest such file (the last checkpoint's, or the output folder's own at the end) has the whole history.
- TensorBoard event files (``events.out.tfevents.*``, anywhere up to two folders below the output folder, where
  transformers' ``runs/<date>_<host>/`` puts them): the same names, tagged ``train/reward`` and so on. Reading
  them needs the ``tensorboard`` package (installed with ``evalsi[tensorboard]``), imported only then.

The series kept are the reward TRL trains on (``reward``, named ``reward``) and each reward function's mean
(``rewards/<name>/mean``, named ``<name>``: with evalsi's reward functions, the spec's total and every component).
The training monitors evalsi's reward functions log come from the same entries: ``monitor/<signal>`` (its value per
step, named ``<signal>``; ``monitor/sandbox/<verdict>`` is named ``sandbox/<verdict>``) and the steps where
``monitor/<signal>/fired`` is above 0.
Logs that are missing, partial or malformed give a :class:`RewardStream` with a note saying so, never an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

TRAINER_STATE = "trainer_state.json"
EVENTS_GLOB = "events.out.tfevents.*"
TOTAL = "reward"
"""The series of the reward the trainer optimises (TRL's weighted sum of its reward functions)."""

MAX_STATE_BYTES = 256 * 1024 * 1024
"""A ``trainer_state.json`` larger than this is not read (a page must stay fast)."""

_COMPONENT = re.compile(r"^rewards/(.+)/mean$")
_PREFIX = "train/"
_MONITOR = "monitor/"
_FIRED = "/fired"
_THRESHOLD = "/threshold"


@dataclass
class RewardStream:
    """The reward series of a training run: name → (step, value) in step order, where they came from, and notes."""

    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    source: str = ""
    """The file or folder read (empty when nothing was found)."""
    notes: list[str] = field(default_factory=list)
    """What could not be read, or why nothing is shown (missing logs, a malformed file, a missing extra)."""
    monitors: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    """Each training monitor's logged value (``monitor/<signal>``), by signal name, in step order."""
    fired: dict[str, list[int]] = field(default_factory=dict)
    """The steps at which each monitor was logged as fired (``monitor/<signal>/fired`` above 0), in order."""
    thresholds: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    """The level each monitor fires at, as logged per step (``monitor/<signal>/threshold``), in step order."""

    @property
    def steps(self) -> list[int]:
        """Every step any reward or monitor series has, in order."""
        groups = [*self.series.values(), *self.monitors.values()]
        return sorted({step for points in groups for step, _ in points})

    @property
    def found(self) -> bool:
        """Whether the logs held any reward or monitor series."""
        return bool(self.series or self.monitors or self.fired)


def series_name(key: str) -> str | None:
    """The series a logged key belongs to (``reward``, or a reward function's name), or None for other keys.

    Example:
        >>> [series_name(k) for k in ("reward", "train/rewards/spec/fmt/mean", "rewards/spec/std", "loss")]
        ['reward', 'spec/fmt', None, None]

    """
    key = key.removeprefix(_PREFIX)
    if key == TOTAL:
        return TOTAL
    match = _COMPONENT.match(key)
    return match.group(1) if match else None


def monitor_key(key: str) -> tuple[str, bool] | None:
    """The monitor a logged key belongs to and whether it is its ``fired`` flag, or None for other keys.

    A signal's logged threshold (``monitor/<signal>/threshold``) is not a value of it: see :func:`threshold_key`.

    Example:
        >>> [monitor_key(k) for k in ("monitor/length_drift", "train/monitor/length_drift/fired", "reward")]
        [('length_drift', False), ('length_drift', True), None]
        >>> monitor_key("monitor/sandbox/timeout")
        ('sandbox/timeout', False)

    """
    key = key.removeprefix(_PREFIX)
    if not key.startswith(_MONITOR) or key.endswith(_THRESHOLD):
        return None
    name = key.removeprefix(_MONITOR)
    fired = name.endswith(_FIRED)
    name = name.removesuffix(_FIRED)
    return (name, fired) if name else None


def threshold_key(key: str) -> str | None:
    """The monitor whose threshold a logged key is (``monitor/<signal>/threshold``), or None for other keys.

    Example:
        >>> [threshold_key(k) for k in ("train/monitor/truncation_rate/threshold", "monitor/truncation_rate")]
        ['truncation_rate', None]

    """
    key = key.removeprefix(_PREFIX)
    if not key.startswith(_MONITOR) or not key.endswith(_THRESHOLD):
        return None
    name = key.removeprefix(_MONITOR).removesuffix(_THRESHOLD)
    return name or None


def _number(value: Any) -> float | None:
    """A finite number as a float; None for anything else (bools, strings, NaN, infinities)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def collect_monitors(
    entries: Iterable[tuple[int, str, Any]],
) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[int]]]:
    """Monitor values and fired steps from logged ``(step, key, value)`` triples, each by signal name.

    A later value of a step replaces an earlier one; values that are not finite numbers are left out. A step is
    fired when its ``monitor/<signal>/fired`` is above 0 (TRL averages it over a logging step, so 0.5 means the
    signal fired in half the step's batches).
    """
    values: dict[str, dict[int, float]] = {}
    flags: dict[str, dict[int, float]] = {}
    for step, key, value in entries:
        found = monitor_key(key)
        number = _number(value)
        if found is None or number is None:
            continue
        name, is_flag = found
        (flags if is_flag else values).setdefault(name, {})[step] = number
    series = {name: sorted(values[name].items()) for name in sorted(values)}
    fired = {name: [s for s, v in sorted(flags[name].items()) if v > 0] for name in sorted(flags)}
    return series, {name: steps for name, steps in fired.items() if steps}


def collect_thresholds(entries: Iterable[tuple[int, str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Each monitor's logged threshold (``monitor/<signal>/threshold``) by step, from ``(step, key, value)`` triples.

    A later value of a step replaces an earlier one; values that are not finite numbers are left out.
    """
    found: dict[str, dict[int, float]] = {}
    for step, key, value in entries:
        name = threshold_key(key)
        number = _number(value)
        if name is not None and number is not None:
            found.setdefault(name, {})[step] = number
    return {name: sorted(found[name].items()) for name in sorted(found)}


def collect(entries: Iterable[tuple[int, str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Reward series from logged ``(step, key, value)`` triples; a later value of a step replaces an earlier one.

    Values that are not finite numbers are left out (TRL logs NaN for a function that scored nothing).
    """
    found: dict[str, dict[int, float]] = {}
    for step, key, value in entries:
        name = series_name(key)
        if name is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            continue
        found.setdefault(name, {})[step] = float(value)
    ordered = sorted(found, key=lambda n: (n != TOTAL, n))
    return {name: sorted(found[name].items()) for name in ordered}


def read_trainer_state(path: Path) -> RewardStream:
    """The reward series in a ``trainer_state.json``'s ``log_history``.

    Entries without an integer ``step`` are skipped and counted in a note; a file that is not JSON, or has no
    ``log_history`` list, gives an empty stream whose note names the file and what was expected.
    """
    stream = RewardStream(source=str(path))
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            stream.notes.append(f"{path}: larger than {MAX_STATE_BYTES // 2**20} MiB, not read")
            return stream
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        stream.notes.append(f"{path}: not readable ({exc.strerror or exc})")
        return stream
    except orjson.JSONDecodeError as exc:
        stream.notes.append(f"{path}: not JSON ({exc})")
        return stream
    history = data.get("log_history") if isinstance(data, dict) else None
    if not isinstance(history, list):
        stream.notes.append(f"{path}: no log_history list (a trainer_state.json has one entry per logging step)")
        return stream
    entries: list[tuple[int, str, Any]] = []
    skipped = 0
    for entry in history:
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            skipped += 1
            continue
        entries.extend((step, str(key), value) for key, value in entry.items())
    if skipped:
        stream.notes.append(f"{path}: {skipped} log_history entr{'y' if skipped == 1 else 'ies'} without a step")
    stream.series = collect(entries)
    stream.monitors, stream.fired = collect_monitors(entries)
    stream.thresholds = collect_thresholds(entries)
    return stream


def read_event_files(paths: Sequence[Path]) -> RewardStream:
    """The reward series in TensorBoard event files (scalars, as ``add_scalar`` writes them).

    Needs the ``tensorboard`` package; without it the stream is empty with a note saying what to install. A
    truncated or corrupt file contributes what was read before the damage, and a note.
    """
    stream = RewardStream(source=", ".join(str(p) for p in paths))
    try:
        from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        stream.notes.append(
            "TensorBoard event files found, but reading them needs the tensorboard package: "
            "pip install 'evalsi[tensorboard]'"
        )
        return stream
    entries: list[tuple[int, str, Any]] = []
    for path in paths:
        try:
            for event in LegacyEventFileLoader(str(path)).Load():
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    if (
                        series_name(value.tag) is None
                        and monitor_key(value.tag) is None
                        and threshold_key(value.tag) is None
                    ):
                        continue
                    kind = value.WhichOneof("value")
                    if kind == "simple_value":
                        entries.append((int(event.step), value.tag, float(value.simple_value)))
                    elif kind == "tensor":
                        number = tensor_util.make_ndarray(value.tensor)
                        if number.size == 1:
                            entries.append((int(event.step), value.tag, float(number.reshape(()))))
        except Exception as exc:  # a damaged file is reported, never fatal to the page
            stream.notes.append(f"{path}: read up to a damaged record ({type(exc).__name__}: {exc})")
    stream.series = collect(entries)
    stream.monitors, stream.fired = collect_monitors(entries)
    stream.thresholds = collect_thresholds(entries)
    return stream


def output_dirs(checkpoints: Iterable[Path]) -> list[Path]:
    """The trainers' output folders of these checkpoint folders (their parents), each once, in order."""
    found: list[Path] = []
    for checkpoint in checkpoints:
        if checkpoint.parent not in found:
            found.append(checkpoint.parent)
    return found


def trainer_states(checkpoints: Iterable[Path]) -> list[Path]:
    """The ``trainer_state.json`` files of these checkpoints, of their siblings and of their output folders."""
    checkpoints = list(checkpoints)
    candidates = {checkpoint / TRAINER_STATE for checkpoint in checkpoints}
    for folder in output_dirs(checkpoints):
        candidates.add(folder / TRAINER_STATE)
        candidates.update(folder.glob(f"*/{TRAINER_STATE}"))
    return sorted(path for path in candidates if path.is_file())


def newest_trainer_state(checkpoints: Iterable[Path]) -> Path | None:
    """The most recently written ``trainer_state.json`` of :func:`trainer_states` (it has the longest history)."""
    present: list[tuple[int, str, Path]] = []
    for path in trainer_states(checkpoints):
        try:
            present.append((path.stat().st_mtime_ns, str(path), path))
        except OSError:
            continue
    return max(present)[2] if present else None


def log_files(checkpoints: Sequence[Path]) -> list[Path]:
    """Every trainer log beside these checkpoints (what changes when the trainer logs more)."""
    return [*trainer_states(checkpoints), *event_files(output_dirs(checkpoints))]


def event_files(folders: Iterable[Path]) -> list[Path]:
    """TensorBoard event files in these folders or up to two folders below them."""
    found: list[Path] = []
    for folder in folders:
        for pattern in (EVENTS_GLOB, f"*/{EVENTS_GLOB}", f"*/*/{EVENTS_GLOB}"):
            found.extend(p for p in sorted(folder.glob(pattern)) if p.is_file() and p not in found)
    return found


def reward_stream(checkpoints: Sequence[Path]) -> RewardStream:
    """The training reward of the run these checkpoint folders belong to, from the best log at hand.

    The newest ``trainer_state.json`` first; TensorBoard event files when it has no reward nor monitor (or there is
    none).
    """
    stream = RewardStream()
    local = [c for c in checkpoints if c.is_dir()]
    if not local:
        stream.notes.append("no checkpoint folder of this training run is on this machine: no trainer logs to read")
        return stream
    state = newest_trainer_state(local)
    if state is not None:
        stream = read_trainer_state(state)
        if stream.found:
            return stream
    events = event_files(output_dirs(local))
    if events:
        from_events = read_event_files(events)
        from_events.notes[:0] = stream.notes
        if from_events.found or not stream.source:
            return from_events
        stream.notes = from_events.notes
    if not stream.found:
        where = ", ".join(str(f) for f in output_dirs(local))
        stream.notes.append(
            f"no training reward logged in {where} (looked for {TRAINER_STATE} log_history with reward or "
            f"rewards/<name>/mean, and TensorBoard event files)"
        )
    return stream
