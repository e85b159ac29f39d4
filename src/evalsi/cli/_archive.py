"""Packing a project directory for ``evalsi evaluators upload``: a .tar.gz of what git would track.

Files matched by a ``.gitignore`` (the root's and any nested one, each applying below its directory) are left out,
and so are ``.git`` and ``.venv`` always. The server accepts regular files and directories only, so a link to a
file inside the directory is packed as that file's content; a link pointing outside the directory, or to a
directory, and anything but files and links, is refused here, before the server refuses it.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pathspec

ALWAYS_EXCLUDED = frozenset({".git", ".venv"})


class PackError(ValueError):
    """The directory cannot be packed (a link out, a special file, or too large)."""


def _ignores(root: Path) -> dict[Path, pathspec.GitIgnoreSpec]:
    specs: dict[Path, pathspec.GitIgnoreSpec] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ALWAYS_EXCLUDED]
        if ".gitignore" in files:
            lines = (Path(folder) / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
            specs[Path(folder)] = pathspec.GitIgnoreSpec.from_lines(lines)
    return specs


def _ignored(path: Path, is_dir: bool, specs: dict[Path, pathspec.GitIgnoreSpec]) -> bool:
    for base, spec in specs.items():
        if base == path or base not in path.parents:
            continue
        relative = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        if spec.match_file(relative):
            return True
    return False


def project_files(root: Path) -> list[Path]:
    """The files and links to pack, relative to ``root``, in a stable order."""
    root = root.resolve()
    specs = _ignores(root)
    chosen: list[Path] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in ALWAYS_EXCLUDED and not _ignored(here / d, True, specs))
        chosen.extend((here / d).relative_to(root) for d in dirs if (here / d).is_symlink())  # refused by pack
        for name in sorted(files):
            path = here / name
            if not _ignored(path, False, specs):
                chosen.append(path.relative_to(root))
    return chosen


def pack(root: Path, max_bytes: int) -> bytes:
    """``root`` as a gzip-compressed tar of its project files (a link inside ``root`` as the file it names).

    Raises:
        PackError: A link points outside ``root`` or to a directory, a file is not a regular file, or the archive
            exceeds ``max_bytes``.

    """
    root = root.resolve()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for relative in project_files(root):
            path = root / relative
            source = path
            if path.is_symlink():
                source = path.resolve()
                if source != root and root not in source.parents:
                    raise PackError(f"{relative}: a link pointing outside {root} ({os.readlink(path)})")
            if not source.is_file():
                raise PackError(f"{relative}: not a regular file or a link to one")
            archive.add(source, arcname=relative.as_posix(), recursive=False)
            if buffer.tell() > max_bytes:
                raise PackError(f"the archive exceeds {max_bytes} bytes (add large files to .gitignore)")
    data = buffer.getvalue()
    if len(data) > max_bytes:
        raise PackError(f"the archive is {len(data)} bytes, over {max_bytes} (add large files to .gitignore)")
    return data
