"""Checking an uploaded evaluator archive before anything unpacks it: the listing only, nothing is written.

An archive holds regular files and directories only. It is refused, with the member named, when it holds an
absolute path, a ``..`` component, a name used twice (or both as a file and a directory), a symbolic or hard link
(a member written through a link could land anywhere the unpacker can write), a sparse file, a device, FIFO or
other special file, more than ``evaluators.max_files`` entries, or more than ``evaluators.max_unpacked_bytes``
once unpacked. The same rules are applied again by the unpacker inside the build sandbox.

The archive is read as a stream, forward only, through a byte budget: its headers (names, link names, PAX data)
may take at most :data:`HEADER_BYTES_PER_ENTRY` per allowed entry, one header record at most
:data:`MAX_HEADER_RECORD` (a larger one is refused before it is read, so a long-name bomb costs no memory), and
the members' data is skipped, never held, within ``max_unpacked_bytes``. The top-level ``requirements.txt`` is the
one file read, at most :data:`MAX_REQUIREMENTS_BYTES`.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from dataclasses import dataclass
from typing import Protocol

from evalsi.server._errors import ServiceError

REQUIREMENTS = "requirements.txt"
MAX_REQUIREMENTS_BYTES = 64 << 10
"""Largest ``requirements.txt`` read."""
MAX_HEADER_RECORD = 256 << 10
"""Largest single header record (a GNU long name or link name, or a PAX extended header) the server reads."""
HEADER_BYTES_PER_ENTRY = 4 << 10
"""Header bytes allowed per entry the archive may have (``max_files``): a header block and PAX data are ~1.5 KiB."""
_BLOCK = 512
_SKIP_CHUNK = 64 << 10


@dataclass(frozen=True)
class ArchiveListing:
    """What a checked archive holds."""

    files: frozenset[str]
    """Regular files, as normalised relative paths."""
    unpacked_bytes: int
    requirements: str | None = None
    """The text of the top-level ``requirements.txt``, when there is one."""


def _refuse(message: str) -> ServiceError:
    return ServiceError("invalid_argument", f"unsafe or invalid evaluator archive: {message}", "invalid_archive")


def normalised(name: str) -> str:
    """A member name as a relative POSIX path, or raise naming what is wrong with it."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _refuse(f"{name!r} is an absolute path")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _refuse(f"{name!r} climbs out of the archive with '..'")
    return "/".join(parts)


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _BudgetedStream:
    """The decompressed tar stream for :mod:`tarfile`: forward only, every byte counted against a budget.

    ``tarfile`` reads headers and header records (long names, PAX data) with ``read`` and skips members' data with
    ``seek``: reads are held to ``header_budget`` in all and :data:`MAX_HEADER_RECORD` each (checked before a byte
    is decompressed), skips to ``data_budget``.
    """

    def __init__(self, raw: _Readable, header_budget: int, data_budget: int, max_unpacked: int) -> None:
        self._raw = raw
        self._position = 0
        self._header_left = header_budget
        self._data_left = data_budget
        self._max_unpacked = max_unpacked

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > MAX_HEADER_RECORD:
            shown = "an unbounded" if size is None or size < 0 else f"a {size}-byte"
            raise _refuse(
                f"{shown} header record (a long name or link name, or PAX data): the server reads at most "
                f"{MAX_HEADER_RECORD} bytes of one"
            )
        if size > self._header_left:
            raise _refuse(
                f"its headers (names, link names, PAX data) take more than {HEADER_BYTES_PER_ENTRY} bytes per "
                "allowed entry (evaluators.max_files)"
            )
        data = self._raw.read(size)
        self._header_left -= len(data)
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset + (self._position if whence == io.SEEK_CUR else 0)
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self._position:
            raise OSError("the archive is read forward only")
        if target - self._position > self._data_left:
            raise _refuse(f"more than evaluators.max_unpacked_bytes={self._max_unpacked} bytes once unpacked")
        while self._position < target:
            data = self._raw.read(min(_SKIP_CHUNK, target - self._position))
            if not data:
                break  # the end: tarfile's next read finds nothing and reports the truncation
            self._data_left -= len(data)
            self._position += len(data)
        return self._position

    def tell(self) -> int:
        return self._position


def check_archive(data: bytes, max_files: int, max_unpacked: int) -> ArchiveListing:
    """List ``data`` (a .tar.gz) and refuse it when unpacking it would be unsafe or too large.

    Raises:
        ServiceError: ``invalid_argument`` naming the offending member and the rule (or the limit).

    """
    files: set[str] = set()
    directories: set[str] = set()
    requirements: str | None = None
    total = 0
    count = 0
    header_budget = (max_files + 2) * HEADER_BYTES_PER_ENTRY + MAX_REQUIREMENTS_BYTES
    data_budget = max_unpacked + (max_files + 2) * _BLOCK
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as raw:
            stream = _BudgetedStream(raw, header_budget, data_budget, max_unpacked)
            with tarfile.open(fileobj=stream, mode="r:") as archive:  # type: ignore[call-overload]
                while (member := archive.next()) is not None:
                    archive.members.clear()  # listed once, never kept
                    count += 1
                    if count > max_files:
                        raise _refuse(f"more than evaluators.max_files={max_files} entries")
                    name = normalised(member.name)
                    if name in files:
                        raise _refuse(f"{member.name!r} appears twice in the archive (each name may be used once)")
                    if member.issym():
                        raise _refuse(
                            f"{member.name!r} is a symbolic link: an evaluator archive holds files and directories "
                            "only (store the file itself, as `evalsi evaluators upload` does)"
                        )
                    if member.islnk():
                        raise _refuse(f"{member.name!r} is a hard link (store the file itself)")
                    if member.issparse():
                        raise _refuse(f"{member.name!r} is a sparse file (store it whole)")
                    if member.isfile():
                        total += member.size
                        if total > max_unpacked:
                            raise _refuse(f"more than evaluators.max_unpacked_bytes={max_unpacked} bytes once unpacked")
                        if not name or name in directories:
                            raise _refuse(f"{member.name!r} is a file where the archive has a directory")
                        files.add(name)
                        if name == REQUIREMENTS:
                            requirements = _read_requirements(archive, member)
                    elif not member.isdir():
                        raise _refuse(f"{member.name!r} is a device, FIFO or other special file")
                    _add_directories(member, name, files, directories)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ServiceError(
            "invalid_argument", f"the evaluator archive is not a readable .tar.gz: {exc}", "invalid_archive"
        ) from None
    return ArchiveListing(frozenset(files), total, requirements)


def _add_directories(member: tarfile.TarInfo, name: str, files: set[str], directories: set[str]) -> None:
    """Record the directories ``name`` implies (and itself, for a directory); refuse one that is also a file."""
    folder = name if member.isdir() else name.rpartition("/")[0]
    while folder and folder not in directories:
        if folder in files:
            raise _refuse(f"{member.name!r} puts a directory where the archive has the file {folder!r}")
        directories.add(folder)
        folder = folder.rpartition("/")[0]


def _read_requirements(archive: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    if member.size > MAX_REQUIREMENTS_BYTES:
        raise _refuse(f"{REQUIREMENTS} is larger than {MAX_REQUIREMENTS_BYTES} bytes")
    handle = archive.extractfile(member)
    if handle is None:
        raise _refuse(f"{REQUIREMENTS} cannot be read")
    with handle:
        raw = handle.read()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _refuse(f"{REQUIREMENTS} is not UTF-8 text (byte {exc.start})") from None
