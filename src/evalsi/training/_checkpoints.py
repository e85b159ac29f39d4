"""Finding checkpoints in a training output directory: their step, whether they hold a model, when they settled.

A checkpoint is a directory (or file) named ``checkpoint-N`` (Hugging Face Trainer), ``global_step_N`` (verl),
``global_stepN`` (DeepSpeed) or ``step-N`` (``step-100.pt`` for a state dictionary file). It is ready to evaluate
once it holds a model and none of its files has changed for ``settle`` seconds: a trainer writes shards one by
one, and an evaluation that starts on a half-written checkpoint would serve garbage or fail. A model is a Hugging
Face folder, a LoRA adapter, a state dictionary, or every shard of a sharded checkpoint (``_sharded.py``), which
is converted before it is served.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from evalsi.training._sharded import Sharded, find_sharded

ModelKind = Literal["weights", "lora", "state-dict"]
"""Full Hugging Face weights, a PEFT LoRA adapter, or a PyTorch state dictionary file."""

_NAME = re.compile(r"^(?:checkpoint-|global_step_?|step-)(\d+)(?:\.(?:pt|pth|ckpt|bin|safetensors))?$")
STATE_DICT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")
"""File suffixes a state-dictionary checkpoint may have."""
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.pt", "tf_model.h5", "flax_model.msgpack")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")
_NESTED = ("huggingface", "actor/huggingface", "actor", "lora_adapter", "adapter", "actor/model/huggingface")
"""Sub-folders trainers put the servable model in (verl: ``global_step_N/actor/huggingface`` when it saves
``hf_model``, ``actor/model/huggingface`` under Megatron)."""
_PARTIAL_SUFFIXES = (".tmp", ".incomplete", ".partial", ".lock")
"""Files still being written by a trainer or a download; their presence means the checkpoint is not done."""


def parse_step(name: str) -> int | None:
    """The training step a checkpoint's name carries, or None when the name is not a checkpoint's.

    Args:
        name: A file or folder name.

    Example:
        >>> parse_step("checkpoint-500"), parse_step("global_step_20"), parse_step("global_step30")
        (500, 20, 30)
        >>> parse_step("step-100.pt")
        100
        >>> parse_step("runs") is None
        True

    """
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint found on disk: where it is, its step, and its name."""

    path: Path
    step: int

    @property
    def name(self) -> str:
        """The directory or file name (``checkpoint-500``)."""
        return self.path.name


@dataclass(frozen=True)
class ModelFiles:
    """What a checkpoint holds: the kind of model and the directory (or file) to serve it from.

    For a sharded checkpoint ``sharded`` says which, ``path`` is its shards' folder and ``kind`` what it holds once
    converted; ``model_ref`` converts it, and its files are then those of the conversion.
    """

    kind: ModelKind
    path: Path
    sharded: Sharded | None = None


def find_model(path: Path) -> ModelFiles | None:
    """The servable model inside a checkpoint, or None while it holds none (yet).

    Full weights need ``config.json`` and every weight file (every shard a ``*.index.json`` names); an adapter
    needs ``adapter_config.json`` and its weights; a state dictionary is a ``.pt``/``.pth``/``.ckpt``/``.bin``/
    ``.safetensors`` file. Sub-folders trainers use (``actor/huggingface``, ``huggingface``...) are looked into.
    Failing those, a sharded checkpoint (verl FSDP or Megatron, DeepSpeed ZeRO, PyTorch DCP) with every shard.

    Args:
        path: The checkpoint's folder or file.

    """
    if path.is_file():
        return ModelFiles("state-dict", path) if path.suffix in STATE_DICT_SUFFIXES else None
    if not path.is_dir():
        return None
    for folder in (path, *(path / nested for nested in _NESTED)):
        found = _model_in(folder)
        if found is not None:
            return found
    sharded = find_sharded(path)
    if sharded is not None and sharded.complete:
        return ModelFiles(sharded.kind, sharded.shards, sharded)
    return None


def _model_in(folder: Path) -> ModelFiles | None:
    try:
        names = {entry.name for entry in os.scandir(folder) if entry.is_file()}
    except OSError:
        return None

    def read(name: str) -> bytes | None:
        try:
            return (folder / name).read_bytes()
        except OSError:
            return None

    kind = model_kind(names, read)
    return None if kind is None else ModelFiles(kind, folder)


def model_kind(names: set[str], read: Callable[[str], bytes | None]) -> ModelKind | None:
    """What the files of one folder hold (``read(name)`` gives a file's bytes), or None while nothing complete.

    Full weights need ``config.json`` and every weight file (every shard a ``*.index.json`` names); an adapter
    needs ``adapter_config.json`` and its weights; files still being written (``*.tmp``...) mean nothing yet.
    """
    if any(name.endswith(_PARTIAL_SUFFIXES) for name in names):
        return None
    if "adapter_config.json" in names and any(f in names for f in _ADAPTER_FILES):
        return "lora"
    if "config.json" in names:
        if any(f in names for f in _WEIGHT_FILES):
            return "weights"
        for index in _INDEXES:
            if index in names and _shards_present(read(index), names):
                return "weights"
    return None


def nested_folders() -> tuple[str, ...]:
    """The sub-folders (relative) a servable model may sit in, the checkpoint's own folder first."""
    return ("", *_NESTED)


def _shards_present(index: bytes | None, names: set[str]) -> bool:
    """Whether every shard a sharded checkpoint's index names exists (a half-written index counts as absent)."""
    if index is None:
        return False
    try:
        weight_map = orjson.loads(index).get("weight_map") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return False
    shards = set(weight_map.values())
    return bool(shards) and shards <= names


def discover(directory: Path) -> list[Checkpoint]:
    """Every checkpoint directly inside ``directory``, by step (a missing directory has none yet).

    Args:
        directory: A training output directory.

    """
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    found: dict[int, Checkpoint] = {}
    for entry in entries:
        step = parse_step(entry.name)
        if step is None or entry.name.startswith("."):
            continue
        if entry.is_file() and not entry.name.endswith(STATE_DICT_SUFFIXES):
            continue
        # Two names for one step (checkpoint-100 and step-100.pt): the directory wins, then the name.
        previous = found.get(step)
        if previous is None or (entry.is_dir(), entry.name) > (previous.path.is_dir(), previous.name):
            found[step] = Checkpoint(Path(entry.path), step)
    return [found[step] for step in sorted(found)]


@dataclass(frozen=True)
class Signature:
    """What a checkpoint's files look like now: their names, sizes and modification times."""

    files: tuple[tuple[str, int, int], ...]

    @property
    def newest(self) -> float:
        """The newest modification time, in seconds (0 for an empty checkpoint)."""
        return max((m for _, _, m in self.files), default=0) / 1e9

    @property
    def digest(self) -> str:
        """A short hash that changes when any file is added, removed, resized or touched."""
        return hashlib.sha256(repr(self.files).encode()).hexdigest()[:12]


def signature(path: Path) -> Signature:
    """Names, sizes and modification times of every file under ``path`` (or of ``path`` itself).

    Args:
        path: A checkpoint's folder or file.

    """
    try:
        if path.is_file():
            st = path.stat()
            return Signature(((path.name, st.st_size, st.st_mtime_ns),))
        out = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            dirs_stat = os.stat(root)
            out.append((os.path.relpath(root, path) + "/", 0, dirs_stat.st_mtime_ns))
            for name in sorted(files):
                full = os.path.join(root, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:  # removed while we looked: the next look sees the change
                    continue
                out.append((os.path.relpath(full, path), st.st_size, st.st_mtime_ns))
        return Signature(tuple(out))
    except FileNotFoundError:
        return Signature(())


@dataclass
class _Seen:
    signature: Signature
    changed_at: float


@dataclass
class SettleTracker:
    """Decides when a checkpoint has settled: nothing in it changed for ``settle`` seconds.

    Modification times tell how long a checkpoint has been still, so a watcher that starts late evaluates old
    checkpoints at once, and one that looked at a half-written checkpoint does not wait longer than needed. A
    copy that preserves modification times (``cp -p``, ``rsync -a``) would look old while it is still arriving,
    so a change seen without a newer modification time restarts the wait from when it was seen.
    """

    settle: float
    clock: Callable[[], float] = field(default=time.time, repr=False)
    signer: Callable[[Path], Signature] = field(default=lambda path: signature(path), repr=False)
    """How a checkpoint's files are looked at (a remote store lists them instead)."""
    _seen: dict[Path, _Seen] = field(default_factory=dict, repr=False)

    def observe(self, path: Path) -> Signature:
        """Look at a checkpoint now, remembering when its files last changed under our eyes."""
        now = self._now()
        current = self.signer(path)
        seen = self._seen.get(path)
        if seen is None:
            # Without modification times (some stores have none) the first sight starts the wait.
            self._seen[path] = _Seen(current, float("-inf") if current.newest > 0 else now)
        elif seen.signature != current:
            # A change with a newer modification time dates itself; one without (a copy keeping old times, a
            # deleted file) is dated by when we saw it.
            dated = current.newest > seen.signature.newest
            self._seen[path] = _Seen(current, seen.changed_at if dated else now)
        return current

    def settles_at(self, path: Path) -> float:
        """When the checkpoint will have been still for ``settle`` seconds (as last observed)."""
        seen = self._seen.get(path)
        if seen is None:
            self.observe(path)
            seen = self._seen[path]
        return max(seen.signature.newest, seen.changed_at) + self.settle

    def settled(self, path: Path) -> bool:
        """Observe the checkpoint and say whether it has settled."""
        self.observe(path)
        return self._now() >= self.settles_at(path)

    def forget(self, paths: Iterable[Path]) -> None:
        """Drop what is remembered about checkpoints that are done or gone."""
        for path in paths:
            self._seen.pop(path, None)

    def _now(self) -> float:
        return self.clock()
