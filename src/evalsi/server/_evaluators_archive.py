"""Checking an uploaded evaluator archive before anything unpacks it: the listing only, nothing is written.

An archive is refused, with the member named, when it holds an absolute path, a ``..`` component, a link
pointing outside the archive (or any hard link), a device, FIFO or other special file, more than
``evaluators.max_files`` entries, or more than ``evaluators.max_unpacked_bytes`` once unpacked. The same rules
are applied again by the unpacker inside the build sandbox.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import zlib
from dataclasses import dataclass

from evalsi.server._errors import ServiceError


@dataclass(frozen=True)
class ArchiveListing:
    """What a checked archive holds."""

    files: frozenset[str]
    """Regular files, as normalised relative paths."""
    unpacked_bytes: int


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


def check_archive(data: bytes, max_files: int, max_unpacked: int) -> ArchiveListing:
    """List ``data`` (a .tar.gz) and refuse it when unpacking it would be unsafe or too large.

    Raises:
        ServiceError: ``invalid_argument`` naming the offending member and the rule (or the limit).

    """
    files: set[str] = set()
    total = 0
    count = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for member in archive:
                count += 1
                if count > max_files:
                    raise _refuse(f"more than evaluators.max_files={max_files} entries")
                name = normalised(member.name)
                if member.issym():
                    target = member.linkname
                    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
                    if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
                        raise _refuse(f"{member.name!r} is a symbolic link pointing outside the archive ({target!r})")
                elif member.islnk():
                    raise _refuse(f"{member.name!r} is a hard link (store the file itself)")
                elif member.isfile():
                    total += member.size
                    if total > max_unpacked:
                        raise _refuse(f"more than evaluators.max_unpacked_bytes={max_unpacked} bytes once unpacked")
                    if name:
                        files.add(name)
                elif not member.isdir():
                    raise _refuse(f"{member.name!r} is a device, FIFO or other special file")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ServiceError(
            "invalid_argument", f"the evaluator archive is not a readable .tar.gz: {exc}", "invalid_archive"
        ) from None
    return ArchiveListing(frozenset(files), total)
