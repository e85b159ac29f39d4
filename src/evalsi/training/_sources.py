"""Where checkpoints come from: a local directory, or a remote one through fsspec (``s3://``, ``gs://``, ``hf://``).

A source lists checkpoints, says whether one holds a model, describes its files (for settle detection) and
gives a local path to serve it from. Remote checkpoints are downloaded (file by file, into a temporary folder
renamed into place when whole) before serving; the download is named by the files' fingerprint, so a
rewritten checkpoint is downloaded again and an unchanged one only once. ``mlflow:<model>`` (a registered model's
versions) lives in its own module, imported only when used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import orjson

from evalsi.errors import DataError, EvalsiError
from evalsi.training._checkpoints import (
    STATE_DICT_SUFFIXES,
    Checkpoint,
    ModelFiles,
    Signature,
    discover,
    find_model,
    model_kind,
    nested_folders,
    parse_step,
    signature,
)


class SourceError(EvalsiError, RuntimeError):
    """A checkpoint location cannot be read (a listing or a download failed): failed work, worth a retry."""


class LocationError(SourceError, DataError):
    """A checkpoint location cannot be opened at all: bad input, which ``checkpoints eval`` and ``watch`` exit 2 on.

    An unknown protocol, a missing extra (fsspec, mlflow), no tracking server named.
    """


TRAINER_STATE = "trainer_state.json"
"""What a Hugging Face trainer writes into each checkpoint: its ``global_step`` and ``max_steps``."""


def training_finished(state: bytes | None) -> bool:
    """Whether a ``trainer_state.json`` says its checkpoint is the training's last (``global_step >= max_steps``).

    Example:
        >>> training_finished(b'{"global_step": 500, "max_steps": 500}'), training_finished(b'{"global_step": 5}')
        (True, False)

    """
    if not state:
        return False
    try:
        data = orjson.loads(state)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(data, dict):
        return False
    step, limit = data.get("global_step"), data.get("max_steps")
    return isinstance(step, int) and isinstance(limit, int) and 0 < limit <= step


class CheckpointSource(Protocol):
    """A place checkpoints appear in.

    A source may also set ``settles_itself = True`` when it knows a checkpoint is complete the moment it lists a
    model (a registry's ``READY``): the watcher then evaluates it without a settle wait.
    """

    description: str
    """What the source is, for messages (a path or URL)."""

    def discover(self) -> list[Checkpoint]:
        """Every checkpoint there now, by step."""
        ...

    def find_model(self, checkpoint: Checkpoint) -> ModelFiles | None:
        """What the checkpoint holds, or None while it holds no complete model.

        Args:
            checkpoint: A checkpoint the source discovered.

        """
        ...

    def signature(self, path: Path) -> Signature:
        """The checkpoint's files as they are now (names, sizes, modification times).

        Args:
            path: A checkpoint's path in the source.

        """
        ...

    def fetch(self, checkpoint: Checkpoint) -> Path:
        """A local path to serve the checkpoint from (downloaded first when remote).

        Args:
            checkpoint: A checkpoint the source discovered.

        """
        ...


class LocalDirectory:
    """A training output directory on this machine.

    Args:
        path: The directory (relative: to the working directory now).

    """

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser().absolute()  # relative to the working directory when the source is made
        self.description = str(path)

    def discover(self) -> list[Checkpoint]:
        """Checkpoints directly in the directory."""
        return discover(self.path)

    def find_model(self, checkpoint: Checkpoint) -> ModelFiles | None:
        """What the checkpoint holds.

        Args:
            checkpoint: A checkpoint in the directory.

        """
        return find_model(checkpoint.path)

    def signature(self, path: Path) -> Signature:
        """Names, sizes and modification times.

        Args:
            path: A checkpoint's path.

        """
        return signature(path)

    def fetch(self, checkpoint: Checkpoint) -> Path:
        """The checkpoint itself: it is local.

        Args:
            checkpoint: A checkpoint in the directory.

        """
        return checkpoint.path

    def training_finished(self, checkpoint: Checkpoint) -> bool:
        """Whether the trainer marked this checkpoint its last (``trainer_state.json``).

        Args:
            checkpoint: A checkpoint in the directory.

        """
        try:
            return training_finished((checkpoint.path / TRAINER_STATE).read_bytes())
        except OSError:
            return False


def is_remote(location: str) -> bool:
    """Whether a location is a URL for fsspec (``s3://...``) rather than a local path.

    Args:
        location: A training output location.

    """
    return "://" in location and not location.startswith("file://")


class RemoteDirectory:
    """A training output directory on an fsspec filesystem; checkpoints are downloaded into ``cache_dir``.

    Args:
        url: The directory, e.g. ``s3://bucket/run/out`` (``memory://``, ``file://`` work too).
        cache_dir: Where downloaded checkpoints are kept.
        storage_options: Passed to the filesystem (credentials, endpoint...).

    """

    def __init__(self, url: str, cache_dir: Path, **storage_options: Any) -> None:
        try:
            from fsspec.core import url_to_fs
        except ImportError:
            raise LocationError(
                f"{url}: remote checkpoints need fsspec: pip install 'evalsi[remote]' "
                "(it brings s3fs, gcsfs and huggingface_hub for s3://, gs:// and hf://)"
            ) from None
        try:
            self.fs, root = url_to_fs(url, **storage_options)
        except (ImportError, ValueError) as exc:
            raise LocationError(f"{url}: cannot open this location: {exc}") from None
        self.root = root.rstrip("/")
        self.url = url
        self.description = url
        self.cache_dir = cache_dir.expanduser().absolute()

    def discover(self) -> list[Checkpoint]:
        """Checkpoints directly in the remote directory, by step."""
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        found: dict[int, Checkpoint] = {}
        for entry in entries:
            name = PurePosixPath(str(entry["name"]).rstrip("/")).name
            step = parse_step(name)
            if step is None or name.startswith("."):
                continue
            is_dir = entry.get("type") == "directory"
            if not is_dir and not name.endswith(STATE_DICT_SUFFIXES):
                continue
            previous = found.get(step)
            if previous is None or (is_dir, name) > (not previous.path.suffix, previous.name):
                found[step] = Checkpoint(Path(str(entry["name"]).rstrip("/")), step)
        return [found[step] for step in sorted(found)]

    def _files(self, path: Path) -> dict[str, dict[str, Any]]:
        """Every file under a checkpoint, by path relative to it."""
        remote = str(path)
        try:
            info = self.fs.info(remote)
            if info.get("type") != "directory":
                return {PurePosixPath(remote).name: info}
            listing = self.fs.find(remote, detail=True)
        except FileNotFoundError:
            return {}
        prefix = remote.rstrip("/") + "/"
        return {
            name[len(prefix) :] if name.startswith(prefix) else PurePosixPath(name).name: entry
            for name, entry in listing.items()
        }

    def training_finished(self, checkpoint: Checkpoint) -> bool:
        """Whether the trainer marked this checkpoint its last (``trainer_state.json``).

        Args:
            checkpoint: A checkpoint in the remote directory.

        """
        try:
            state: bytes = self.fs.cat_file(f"{checkpoint.path}/{TRAINER_STATE}")
        except OSError:
            return False
        return training_finished(state)

    def find_model(self, checkpoint: Checkpoint) -> ModelFiles | None:
        """What the remote checkpoint holds (judged from its listing, reading only a shard index).

        Args:
            checkpoint: A checkpoint in the remote directory.

        """
        files = self._files(checkpoint.path)
        if len(files) == 1 and checkpoint.path.name in files:
            return ModelFiles("state-dict", checkpoint.path) if checkpoint.path.suffix in STATE_DICT_SUFFIXES else None
        for folder in nested_folders():
            prefix = f"{folder}/" if folder else ""
            names = {rel[len(prefix) :] for rel in files if rel.startswith(prefix) and "/" not in rel[len(prefix) :]}

            def read(name: str, prefix: str = prefix) -> bytes | None:
                try:
                    data: bytes = self.fs.cat_file(f"{checkpoint.path}/{prefix}{name}")
                    return data
                except OSError:
                    return None

            kind = model_kind(names, read)
            if kind is not None:
                return ModelFiles(kind, checkpoint.path / folder if folder else checkpoint.path)
        return None

    def signature(self, path: Path) -> Signature:
        """Names, sizes and modification times from the listing (0 where the store keeps no time).

        Args:
            path: A checkpoint's path in the remote directory.

        """
        return Signature(
            tuple(
                sorted((rel, int(entry.get("size") or 0), _mtime_ns(entry)) for rel, entry in self._files(path).items())
            )
        )

    def fetch(self, checkpoint: Checkpoint) -> Path:
        """Download the checkpoint (once per version of its files) and return the local copy.

        Args:
            checkpoint: A checkpoint in the remote directory.

        """
        files = self._files(checkpoint.path)
        if not files:
            raise SourceError(f"{self.url}: {checkpoint.name} disappeared before it could be downloaded")
        digest = self.signature(checkpoint.path).digest
        target = self.cache_dir / f"{checkpoint.name}-{digest}"
        single = len(files) == 1 and checkpoint.path.name in files
        local = target / checkpoint.name if single else target
        if target.exists():
            return local
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{checkpoint.name}.", dir=self.cache_dir))
        try:
            for rel in files:
                destination = partial / (checkpoint.name if single else rel)
                destination.parent.mkdir(parents=True, exist_ok=True)
                source = str(checkpoint.path) if single else f"{checkpoint.path}/{rel}"
                self.fs.get_file(source, str(destination))
            os.replace(partial, target)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                shutil.rmtree(partial)
            if isinstance(exc, OSError):
                raise SourceError(f"{self.url}: downloading {checkpoint.name} failed: {exc}") from None
            raise
        return local


def _mtime_ns(entry: dict[str, Any]) -> int:
    """A listing entry's modification time in nanoseconds (stores name it differently), 0 when it has none."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = entry.get(key)
        if isinstance(value, int | float):
            return int(value * 1e9)
        if isinstance(value, datetime):
            return int(value.timestamp() * 1e9)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
    return 0


def open_source(location: str, cache_dir: Path) -> CheckpointSource:
    """The source a location names: ``mlflow:<model>``, a URL through fsspec, else a local directory.

    Args:
        location: A local directory, a URL (``s3://...``) or ``mlflow:<model>``.
        cache_dir: Where remote checkpoints are downloaded to.

    Raises:
        LocationError: The location cannot be opened (an unknown protocol, a missing extra).
        SourceError: It could not be read (a registry that does not answer).

    """
    if location.startswith("mlflow:"):
        from evalsi.training._mlflow_source import MlflowModel  # imports mlflow, an optional extra

        return MlflowModel(location[len("mlflow:") :], cache_dir)
    if location.startswith("file://"):
        return LocalDirectory(Path(location[len("file://") :]))
    return RemoteDirectory(location, cache_dir) if is_remote(location) else LocalDirectory(Path(location))
