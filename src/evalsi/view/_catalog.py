"""What the viewer may show: the files and directories it was given, and the sources found under them.

Every source gets an opaque id (a hash of its resolved path) and is reached only through it; a URL never holds
a path. A file is a source only when its resolved path lies under one of the given roots, so a symbolic link
that points elsewhere is not followed out of them.

The catalog is also how the viewer reads what it shows (a run's list entry, a run, a curve's steps), so another
catalog can serve sources that are not files: the evalsi server's catalog reads its database. The run list
reads each results file's header alone (:func:`evalsi.view._runs.read_header`, a bounded prefix), once per
version of the file, so listing costs the same whatever the runs' sizes.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from evalsi._util.trainer_logs import RewardStream, log_files, reward_stream
from evalsi.errors import DataError
from evalsi.view import _curves
from evalsi.view._runs import RunData, file_headline, load_run, read_journal_start, stamp

Kind = Literal["run", "rewards", "curve"]

SKIP_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".nox", ".mypy_cache", ".ruff_cache"})
"""Directories never scanned (tool and environment folders, not results)."""

MAX_DEPTH = 6
"""How deep below a given directory files are looked for."""

SNIFF_BYTES = 4096

_DIGITS = re.compile(r"(\d+)")

HEADLINES = 4096
"""Run list entries kept (each until its file changes); the least recently listed beyond this are read again."""


@dataclass(frozen=True)
class Source:
    """One thing the viewer shows: a run's results file, a reward score file, or a training run's curve."""

    id: str
    kind: Kind
    path: Path
    label: str


JOURNAL = ".journal"


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Text ordered with its numbers as numbers: ``step-30`` before ``step-120``.

    Example:
        >>> sorted(["step-120.json", "step-30.json", "base.json"], key=natural_key)
        ['base.json', 'step-30.json', 'step-120.json']

    """
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part)


def source_id(path: Path, kind: Kind) -> str:
    """A short, stable id for a resolved path (ids never carry the path itself).

    Args:
        path: The source's resolved path.
        kind: What it is (``run``, ``rewards`` or ``curve``).

    """
    return hashlib.sha256(f"{kind}:{path}".encode()).hexdigest()[:12]


def sniff(path: Path) -> Kind | None:
    """Whether a file is a run's results file or a reward score file, from its first bytes."""
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return None
    if path.name.endswith(".json") and b'"kind"' in head and b'"RunResults"' in head:
        return "run"
    if path.name.endswith(".jsonl"):
        first = head.split(b"\n", 1)[0]
        try:
            line = orjson.loads(first)
        except orjson.JSONDecodeError:
            return None
        if isinstance(line, dict) and "index" in line and "components" in line and "status" in line:
            return "rewards"
    return None


class Catalog:
    """The roots the viewer was given and the sources under them, rescanned on demand.

    Args:
        paths: The files and folders to show (each resolved; nothing outside them is served).

    """

    def __init__(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        self.roots = [Path(p).resolve() for p in paths]
        self._sources: dict[str, Source] = {}
        self._headlines: OrderedDict[Path, tuple[str, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self._streams: dict[tuple[Path, ...], tuple[tuple[tuple[str, int, int], ...], RewardStream]] = {}

    def allowed(self, path: Path) -> bool:
        """Whether a resolved path is one of the roots or lies under one.

        Args:
            path: A resolved path.

        """
        return any(path == root or path.is_relative_to(root) for root in self.roots)

    def scan(self) -> list[Source]:
        """Every source under the roots, runs first, then curves and reward files, each by path."""
        found: dict[str, Source] = {}
        for root in self.roots:
            for source in self._scan_root(root):
                found[source.id] = source
        self._sources = found
        order = {"run": 0, "curve": 1, "rewards": 2}
        return sorted(found.values(), key=lambda s: (order[s.kind], natural_key(str(s.path))))

    def get(self, source_id: str, kind: Kind) -> Source | None:
        """The source with this id and kind, rescanning once when it is unknown (a file may be new).

        Args:
            source_id: The id from :func:`source_id`.
            kind: The kind the caller expects.

        Returns:
            The source, None when no source under the roots has this id and kind.

        """
        source = self._sources.get(source_id)
        if source is None:
            self.scan()
            source = self._sources.get(source_id)
        if source is None or source.kind != kind or not self.allowed(source.path.resolve()):
            return None
        return source

    # -- what the viewer reads through the catalog (another catalog serves sources that are not files) --------------

    def headline(self, source: Source) -> dict[str, Any]:
        """A run's entry in the run list (name, target, date, status, metrics, gates), or its name and ``error``.

        A run that cannot be read is listed with the reason, so one broken file never breaks the list.

        Args:
            source: A run source.

        """
        version = self.version(source.path)
        with self._lock:
            hit = self._headlines.get(source.path)
            if hit is not None and hit[0] == version:
                self._headlines.move_to_end(source.path)
                return hit[1]
        try:
            item = file_headline(source.path)
        except DataError as exc:
            item = {"name": source.label, "status": "unreadable", "error": str(exc.detail)}
        with self._lock:
            self._headlines[source.path] = (version, item)
            while len(self._headlines) > HEADLINES:
                self._headlines.popitem(last=False)
        return item

    def version(self, path: Path) -> str:
        """What changes when a run changes: its file's and journal's size and modification time.

        Args:
            path: The run's results file.

        """
        return "-".join(map(str, stamp(path)))

    def load(self, path: Path) -> RunData:
        """A run, read whole (its records parsed on demand).

        Args:
            path: The run's results file.

        Raises:
            DataError: The run cannot be read.

        """
        return load_run(path)

    def curve_paths(self, source: Source) -> list[Path]:
        """The step files of a learning curve, in name order.

        Args:
            source: A curve source (a folder of step files).

        """
        return _curves.step_paths(source.path)

    def curve_stamp(self, source: Source) -> str:
        """What changes when a step of a learning curve appears or changes.

        Args:
            source: A curve source (a folder of step files).

        """
        return _curves.curve_stamp(source.path)

    def trainer_logs(self, locations: Iterable[str]) -> RewardStream:
        """The training reward logged by the trainer whose checkpoints these are (their recorded locations).

        Only checkpoint folders under the roots are read, like everything else the viewer shows: trainer logs
        elsewhere give a note naming the folder to add. Read again only when a log file changes.

        Args:
            locations: The checkpoints' recorded locations.

        """
        folders: list[Path] = []
        outside: list[Path] = []
        for location in locations:
            if "://" in location or ":" in location.split("/", 1)[0]:
                continue  # a remote checkpoint or a registry's model: no local logs
            folder = Path(location).expanduser().resolve()
            if not folder.is_dir():
                continue
            (folders if self.allowed(folder) else outside).append(folder)
        if not folders:
            stream = RewardStream()
            if outside:
                parent = outside[-1].parent
                stream.notes.append(
                    f"the trainer's logs in {parent} lie outside the folders given to evalsi view: "
                    f"add it (evalsi view ... {parent}) to show the training reward beside the evaluations"
                )
            else:
                stream.notes.append("no checkpoint folder of this training run is on this machine: no trainer logs")
            return stream
        key = tuple(folders)
        version = _log_version(folders)
        with self._lock:
            hit = self._streams.get(key)
            if hit is not None and hit[0] == version:
                return hit[1]
        stream = reward_stream(folders)
        with self._lock:
            self._streams[key] = (version, stream)
            while len(self._streams) > HEADLINES:
                self._streams.pop(next(iter(self._streams)))
        return stream

    def _scan_root(self, root: Path) -> Iterator[Source]:
        if root.is_file():
            kind = sniff(root)
            if kind is not None:
                yield self._source(root, kind, root.parent)
            return
        if not root.is_dir():
            return
        for directory, names, files in os.walk(root, followlinks=False):
            here = Path(directory)
            depth = len(here.relative_to(root).parts)
            names[:] = sorted(n for n in names if n not in SKIP_DIRS and depth < MAX_DEPTH)
            if _curves.is_curve_dir(here):
                yield self._source(here, "curve", root)
            present = set(files)
            for name in sorted(files, key=natural_key):
                if name.endswith(JOURNAL) and name.removesuffix(JOURNAL) not in present:
                    path = here / name.removesuffix(JOURNAL)  # a run in progress: its journal alone so far
                    if self.allowed(path.parent.resolve()) and read_journal_start(path.parent.resolve() / name):
                        yield self._source(path.parent.resolve() / path.name, "run", root)
                    continue
                if not name.endswith((".json", ".jsonl")):
                    continue
                path = here / name
                resolved = path.resolve()
                if not self.allowed(resolved):
                    continue  # a link out of the given roots
                kind = sniff(resolved)
                if kind is not None:
                    yield self._source(resolved, kind, root)

    def _source(self, path: Path, kind: Kind, root: Path) -> Source:
        try:
            label = str(path.relative_to(root)) if path != root else path.name
        except ValueError:
            label = path.name
        return Source(source_id(path, kind), kind, path, label or path.name)


def _log_version(folders: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """What changes when a trainer log beside these checkpoints appears or changes (size and time of each)."""
    parts = []
    for path in log_files(folders):
        try:
            st = path.stat()
        except OSError:
            continue
        parts.append((str(path), st.st_size, st.st_mtime_ns))
    return tuple(parts)
