"""Applying image layers to a root filesystem directory, safely: nothing is ever written through a link.

A layer is a tar stream of changes (OCI image spec, "Filesystem Layers"): files, directories, links, and
whiteouts, ``.wh.<name>`` (delete ``<name>`` from the layers below) and ``.wh..wh..opq`` (the directory hides
everything the layers below put in it). Layers are applied in order, as an overlay filesystem would see them.

Every operation goes through directory file descriptors opened with ``O_NOFOLLOW``, from the root down, so a
symbolic link an earlier member made (``usr -> /``) cannot redirect a later write: a member whose parent is a link
is refused, never followed. Members that would leave the root (an absolute path, ``..``, a hard link to outside, a
relative symbolic link climbing above the root) and device nodes are refused, naming the layer and the member.

The tree belongs to the user unpacking it: owners are not reproduced, and modes keep their read and execute bits
and the owner's write bit (no setuid, setgid, sticky or group/other write; directories stay the owner's to delete),
so the unpacked copy can be shared read-only.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager

from evalsi.errors import EvalsiError

OPAQUE = ".wh..wh..opq"
"""A directory's opaque whiteout: what the layers below put in it is gone."""
WHITEOUT = ".wh."
"""The prefix of a whiteout: ``.wh.name`` deletes ``name`` from the layers below."""
_MODE_MASK = 0o755
"""The mode bits kept: read and execute for all, write for the owner only; never setuid, setgid or sticky."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20

Parts = tuple[str, ...]


class ImageError(EvalsiError, ValueError):
    """An image cannot be used: unreadable, not what its digests say, or holding a member that is refused."""


def member_parts(name: str) -> Parts:
    """A member's path as its components; ``()`` for the root itself.

    Raises:
        ValueError: The path is absolute or holds ``..``.

    """
    if name.startswith("/"):
        raise ValueError("an absolute path")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise ValueError("a '..' path component")
    return parts


class LayerApplier:
    """Applies layers, in order, to one root filesystem directory; :meth:`finish` sets the directories' modes.

    Directories stay writable by their owner while layers are applied (a later layer may add to a directory an
    earlier one made read-only); their own modes and times are set once, at the end.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._root_fd = os.open(root, _DIR_FLAGS)
        self._dirs: dict[Parts, tuple[int, int]] = {}
        self._written: set[Parts] = set()
        self._ancestors: set[Parts] = set()
        self._where = ""

    def close(self) -> None:
        """Release the root directory."""
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def apply(self, tar: tarfile.TarFile, where: str) -> None:
        """Apply one layer (a tar read as a stream); ``where`` names it in errors (``layer 2 (sha256:…)``).

        Raises:
            ImageError: A member is refused or cannot be written, naming the layer and the member.

        """
        self._where = where
        self._written = set()
        self._ancestors = set()
        for member in tar:
            try:
                parts = member_parts(member.name)
            except ValueError as exc:
                raise self._refuse(member.name, f"{exc} leaves the image's root") from None
            if not parts:
                if member.isdir():
                    self._dirs[()] = (member.mode & _MODE_MASK, int(member.mtime))
                continue
            name = parts[-1]
            try:
                if name == OPAQUE:
                    self._opaque(parts[:-1])
                elif name.startswith(WHITEOUT):
                    target = name[len(WHITEOUT) :]
                    if target in ("", ".", ".."):
                        raise self._refuse(member.name, "a whiteout that names no file")
                    self._whiteout((*parts[:-1], target))
                else:
                    self._add(tar, member, parts)
                    self._written.add(parts)
                    self._ancestors.update(parts[:i] for i in range(1, len(parts)))
            except ImageError:
                raise
            except OSError as exc:
                raise self._refuse(member.name, f"cannot be written: {exc.strerror or exc}") from None

    def finish(self) -> None:
        """Give directories their modes and times (deepest first), the root ``0755``; then close."""
        for parts in sorted(self._dirs, key=len, reverse=True):
            mode, mtime = self._dirs[parts]
            try:
                with self._open_dir(parts) as fd:
                    os.fchmod(fd, 0o755 if not parts else mode | 0o700)
                    os.utime(fd, ns=(mtime * 10**9, mtime * 10**9))
            except (OSError, ImageError):
                continue  # replaced by a file or removed by a later layer
        os.chmod(self.root, 0o755)
        self.close()

    # --- members ----------------------------------------------------------------------------------------------

    def _add(self, tar: tarfile.TarFile, member: tarfile.TarInfo, parts: Parts) -> None:
        if member.ischr() or member.isblk():
            raise self._refuse(member.name, "a device node: images may not create devices")
        if not (member.isdir() or member.isreg() or member.issym() or member.islnk() or member.isfifo()):
            raise self._refuse(member.name, f"an unsupported tar member type {member.type!r}")
        if member.issym():
            self._check_symlink(member, parts)
        if member.islnk():
            link = self._link_target(member)
        with self._parent(parts, create=True, member=member.name) as parent:
            name = parts[-1]
            existing = _lstat(name, parent)
            if member.isdir():
                if existing is not None and not stat.S_ISDIR(existing.st_mode):
                    os.unlink(name, dir_fd=parent)
                    existing = None
                if existing is None:
                    os.mkdir(name, 0o700, dir_fd=parent)
                self._dirs[parts] = (member.mode & _MODE_MASK, int(member.mtime))
                return
            if member.islnk() and link == parts:
                return  # a link to itself: already there
            if existing is not None:
                self._remove(parent, name, parts, existing)
            if member.isreg():
                self._write_file(tar, member, parent, name)
            elif member.issym():
                os.symlink(member.linkname, name, dir_fd=parent)
                mtime = int(member.mtime) * 10**9
                os.utime(name, ns=(mtime, mtime), dir_fd=parent, follow_symlinks=False)
            elif member.islnk():
                with self._parent(link, create=False, member=member.name) as source_parent:
                    source = _lstat(link[-1], source_parent)
                    if source is None or stat.S_ISDIR(source.st_mode):
                        what = "a directory" if source is not None else "nothing unpacked before it"
                        raise self._refuse(member.name, f"a hard link to {member.linkname!r}, which is {what}")
                    os.link(link[-1], name, src_dir_fd=source_parent, dst_dir_fd=parent, follow_symlinks=False)
            else:
                os.mkfifo(name, member.mode & _MODE_MASK, dir_fd=parent)

    def _write_file(self, tar: tarfile.TarFile, member: tarfile.TarInfo, parent: int, name: str) -> None:
        source = tar.extractfile(member)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=parent)
        try:
            if source is not None:
                while chunk := source.read(_COPY_CHUNK):
                    _write_all(fd, chunk)
            os.fchmod(fd, member.mode & _MODE_MASK)
            mtime = int(member.mtime) * 10**9
            os.utime(fd, ns=(mtime, mtime))
        finally:
            os.close(fd)

    def _check_symlink(self, member: tarfile.TarInfo, parts: Parts) -> None:
        """A relative link must stay under the root (an absolute one is read inside the root, as in the sandbox)."""
        target = member.linkname
        if not target:
            raise self._refuse(member.name, "a symbolic link to nothing")
        if target.startswith("/"):
            return
        resolved = posixpath.normpath(posixpath.join("/".join(parts[:-1]), target))
        if resolved == ".." or resolved.startswith("../"):
            raise self._refuse(member.name, f"a symbolic link to {target!r}, outside the image's root")

    def _link_target(self, member: tarfile.TarInfo) -> Parts:
        try:
            link = member_parts(member.linkname)
        except ValueError as exc:
            raise self._refuse(member.name, f"a hard link to {member.linkname!r}: {exc} leaves the root") from None
        if not link:
            raise self._refuse(member.name, "a hard link to the image's root")
        return link

    # --- whiteouts --------------------------------------------------------------------------------------------

    def _whiteout(self, target: Parts) -> None:
        """Delete ``target`` as the layers below left it (never what this layer itself put there)."""
        if target in self._written:
            return
        try:
            with self._parent(target, create=False, member="/".join(target)) as parent:
                existing = _lstat(target[-1], parent)
                if existing is not None:
                    self._remove(parent, target[-1], target, existing)
        except FileNotFoundError:
            return  # nothing below to delete

    def _opaque(self, directory: Parts) -> None:
        """Empty ``directory`` of everything the layers below put in it; what this layer added stays."""
        probe = (*directory, OPAQUE)
        with self._parent(probe, create=True, member="/".join(probe)) as fd:
            self._dirs.setdefault(directory, (0o755, 0))
            self._clear_lower(fd, directory)

    def _clear_lower(self, fd: int, prefix: Parts) -> None:
        for name in os.listdir(fd):
            path = (*prefix, name)
            existing = _lstat(name, fd)
            if existing is None:
                continue
            if path in self._written or path in self._ancestors:
                if stat.S_ISDIR(existing.st_mode):
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    try:
                        self._clear_lower(child, path)
                    finally:
                        os.close(child)
            else:
                self._remove(fd, name, path, existing)

    def _remove(self, parent: int, name: str, parts: Parts, existing: os.stat_result) -> None:
        if stat.S_ISDIR(existing.st_mode):
            shutil.rmtree(name, dir_fd=parent)
            self._dirs = {p: v for p, v in self._dirs.items() if p[: len(parts)] != parts}
        else:
            os.unlink(name, dir_fd=parent)

    # --- directories ------------------------------------------------------------------------------------------

    @contextmanager
    def _parent(self, parts: Parts, *, create: bool, member: str) -> Iterator[int]:
        """The directory holding ``parts[-1]``, opened component by component without following a link."""
        with self._open_dir(parts[:-1], create=create, member=member) as fd:
            yield fd

    @contextmanager
    def _open_dir(self, parts: Parts, *, create: bool = False, member: str = "") -> Iterator[int]:
        fd = os.dup(self._root_fd)
        try:
            for depth, name in enumerate(parts):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, 0o700, dir_fd=fd)
                    self._dirs.setdefault(parts[: depth + 1], (0o755, 0))
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    where = "/".join(parts[: depth + 1])
                    existing = _lstat(name, fd)
                    if existing is not None and stat.S_ISLNK(existing.st_mode):
                        why = f"{where!r} is a symbolic link: nothing is unpacked through a link"
                    else:
                        why = f"{where!r} is not a directory"
                    raise self._refuse(member, why) from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _refuse(self, member: str, why: str) -> ImageError:
        return ImageError(f"{self._where}: member {member!r}: {why}")


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
