"""Wheels for an uploaded evaluator's ``requirements.txt``, fetched by the server from the operator's index only.

The build sandbox has no network. When the operator names a package index (``evaluators.index_url``), the server
resolves the requirements against that index alone and downloads them as wheels (``pip download
--only-binary=:all:``: no source distribution is built, so no package code runs), into a directory the install
step then mounts read-only and installs from offline. The requirements file is the tenant's: it is checked when
the archive is uploaded, whatever the server's package source, and a line that is not a plain requirement (an
option such as ``--index-url`` or ``-r``, a URL or a local path) is refused naming its line; pip only ever sees
the list the server wrote from the checked lines.

The download is bounded on disk: no file it writes may pass ``evaluators.max_build_bytes`` (``RLIMIT_FSIZE``), and
pip is killed as soon as the wheels and its temporary files together pass it (their size is read every
:data:`WATCH_INTERVAL` seconds).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from evalsi.server.evaluation.evaluators._archive import REQUIREMENTS

_OUTPUT_TAIL = 20_000
WATCH_INTERVAL = 0.1
_LIMITED = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)
"""Starts pip with ``RLIMIT_FSIZE`` set (no ``preexec_fn``: the server has threads)."""
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar.lz",
                     ".tlz", ".tar.lzma")  # fmt: skip
"""A requirement named like these pip reads as a local file (and may build it): refused."""


class RequirementsError(ValueError):
    """A requirements file the server will not resolve: the message names the line and what is allowed."""


def plain_requirements(text: str) -> list[str]:
    """Each requirement of ``text`` (``name[extras] specifier ; marker``), comments and blank lines dropped.

    Raises:
        RequirementsError: A line is an option, a URL or path, or not a requirement at all.

    """
    found: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):  # as pip splits a requirements file
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{REQUIREMENTS} line {number}"
        if line.startswith("-"):
            raise RequirementsError(
                f"{where}: options such as {line.split()[0]!r} are not allowed; the server installs from the "
                "operator's package sources only: list plain requirements (name, extras, version, marker)"
            )
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise RequirementsError(f"{where}: not a requirement ({exc})") from None
        if requirement.url:
            raise RequirementsError(f"{where}: direct references (@ URL or path) are not allowed; name a package")
        if requirement.name.lower().endswith(_ARCHIVE_SUFFIXES):
            raise RequirementsError(f"{where}: {requirement.name!r} names a file, not a package; name a package")
        found.append(str(requirement))
    return found


@dataclass(frozen=True)
class Download:
    """How fetching the wheels went: the log for the build log, a one-line reason when it failed, and the bytes."""

    ok: bool
    message: str
    log: str
    size: int = 0
    """Bytes of the wheels downloaded."""


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (links not followed; 0 when it is gone)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def download_wheels(requirements: list[str], index_url: str, target: Path, timeout: float, max_bytes: int) -> Download:
    """Resolve ``requirements`` against ``index_url`` only and download every wheel into ``target``.

    pip's temporary files go to ``target``'s sibling ``downloads-tmp`` (removed after): both count against
    ``max_bytes``, and pip is stopped once they pass it.
    """
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    scratch = target.parent / "downloads-tmp"
    scratch.mkdir(mode=0o700, exist_ok=True)
    argv = [
        sys.executable,
        "-c",
        _LIMITED,
        str(max_bytes),
        "-m",
        "pip",
        "download",
        "--isolated",  # no user or environment pip settings: the index below is the only source
        "--no-cache-dir",  # nothing written outside the build's directory
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        "--index-url",
        index_url,
        "--dest",
        str(target),
        *requirements,
    ]
    shown = f"$ pip download --only-binary=:all: --index-url <evaluators.index_url> {' '.join(requirements)}"
    try:
        output, status, stopped = _run_watched(argv, {**os.environ, "TMPDIR": str(scratch)}, timeout, max_bytes,
                                               (target, scratch))  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    output = output.replace(index_url, "<evaluators.index_url>")[-_OUTPUT_TAIL:]
    log = f"# download requirements  [{stopped or f'exit {status}'}]\n{shown}\n{output.rstrip()}"
    size = tree_bytes(target)
    if stopped == "timeout":
        return Download(False, f"downloading the requirements took longer than {timeout:g}s", log)
    if stopped == "quota" or "[Errno 27]" in output or size > max_bytes:
        log += f"\n# stopped: the downloaded wheels passed evaluators.max_build_bytes={max_bytes} bytes"
        return Download(
            False, f"the requirements' wheels take more than evaluators.max_build_bytes={max_bytes} bytes", log
        )
    if status != 0:
        return Download(False, "the requirements could not be downloaded from the server's index; see the log", log)
    for wheel in target.iterdir():
        wheel.chmod(0o644)
    return Download(True, "", log, size)


def _run_watched(
    argv: list[str], env: dict[str, str], timeout: float, max_bytes: int, watched: tuple[Path, ...]
) -> tuple[str, int | None, str]:
    """Run ``argv``; kill its process group past ``timeout`` or once ``watched`` hold more than ``max_bytes``.

    Returns:
        Its output (stdout and stderr), its exit status, and why it was stopped (``timeout``, ``quota`` or "").

    """
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    stopped = ""
    while True:
        try:
            out, _ = process.communicate(timeout=WATCH_INTERVAL)
            chunks.append(out)
            break
        except subprocess.TimeoutExpired:
            if stopped:
                continue
            if sum(tree_bytes(path) for path in watched) > max_bytes:
                stopped = "quota"
            elif time.monotonic() > deadline:
                stopped = "timeout"
            if stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
    return b"".join(chunks).decode(errors="replace"), process.returncode, stopped
