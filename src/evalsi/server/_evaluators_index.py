"""Wheels for an uploaded evaluator's ``requirements.txt``, fetched by the server from the operator's index only.

The build sandbox has no network. When the operator names a package index (``evaluators.index_url``), the server
resolves the requirements against that index alone and downloads them as wheels (``pip download
--only-binary=:all:``: no source distribution is built, so no package code runs), into a directory the install
step then mounts read-only and installs from offline. The requirements file is the tenant's: a line that is not
a plain requirement (an option such as ``--index-url`` or ``-r``, a URL or a local path) is refused, naming its
line, before pip sees anything, so a tenant cannot send the download elsewhere.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

REQUIREMENTS = "requirements.txt"
MAX_REQUIREMENTS_BYTES = 64 << 10
_OUTPUT_TAIL = 20_000


class RequirementsError(ValueError):
    """A requirements file the server will not resolve: the message names the line and what is allowed."""


def read_requirements(archive: Path) -> str:
    """The text of the archive's top-level ``requirements.txt`` (read, never unpacked, by the server).

    Raises:
        RequirementsError: The file is missing, not a regular file, or too large.

    """
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            if member.name.lstrip("./") != REQUIREMENTS:
                continue
            if not member.isfile():
                raise RequirementsError(f"{REQUIREMENTS} is not a regular file")
            if member.size > MAX_REQUIREMENTS_BYTES:
                raise RequirementsError(f"{REQUIREMENTS} is larger than {MAX_REQUIREMENTS_BYTES} bytes")
            handle = tar.extractfile(member)
            if handle is None:
                raise RequirementsError(f"{REQUIREMENTS} cannot be read")
            with handle:
                return handle.read().decode("utf-8", "replace")
    raise RequirementsError(f"the archive has no top-level {REQUIREMENTS}")


def plain_requirements(text: str) -> list[str]:
    """Each requirement of ``text`` (``name[extras] specifier ; marker``), comments and blank lines dropped.

    Raises:
        RequirementsError: A line is an option, a URL or path, or not a requirement at all.

    """
    found: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{REQUIREMENTS} line {number}"
        if line.startswith("-"):
            raise RequirementsError(
                f"{where}: options such as {line.split()[0]!r} are not allowed; the server installs from its own "
                "package index only: list plain requirements (name, extras, version, marker)"
            )
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise RequirementsError(f"{where}: not a requirement ({exc})") from None
        if requirement.url:
            raise RequirementsError(f"{where}: direct references (@ URL or path) are not allowed; name a package")
        found.append(str(requirement))
    return found


@dataclass(frozen=True)
class Download:
    """How fetching the wheels went: the log for the build log, and a one-line reason when it failed."""

    ok: bool
    message: str
    log: str


def download_wheels(requirements: list[str], index_url: str, target: Path, timeout: float) -> Download:
    """Resolve ``requirements`` against ``index_url`` only and download every wheel into ``target``."""
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--isolated",  # no user or environment pip settings: the index below is the only source
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
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Download(False, f"downloading the requirements took longer than {timeout:g}s", shown)
    output = (done.stdout + done.stderr).replace(index_url, "<evaluators.index_url>")[-_OUTPUT_TAIL:]
    log = f"# download requirements  [exit {done.returncode}]\n{shown}\n{output.rstrip()}"
    if done.returncode != 0:
        return Download(False, "the requirements could not be downloaded from the server's index; see the log", log)
    for wheel in target.iterdir():
        wheel.chmod(0o644)
    return Download(True, "", log)
