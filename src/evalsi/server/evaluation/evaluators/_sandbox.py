"""Building and running uploaded evaluators in the sandbox; the server process never imports their code.

A build is one workspace at the operator's floor rung (``sandbox.min_isolation``: bubblewrap, or gVisor when the
operator set it), so every step that starts a Python there, the venv's included, runs at that rung. The archive,
the server's copy of the checked requirements and the wheel directories are mounted read-only; the evaluator is
built in ``/evaluator``, a size-capped memory filesystem (``evaluators.max_build_bytes``, less the wheels the
server downloaded): a write past it fails there, whatever wrote it. The steps, each a command with the build's
limits:

1. unpack the archive into ``/evaluator/src`` (regular files and directories only, each created afresh, never
   through a link: the archive rules again, member by member);
2. create the venv in ``/evaluator/venv``, which the archive cannot reach;
3. install the requirements as wheels only, offline: from the operator's wheel directory and the wheels the server
   downloaded from the operator's index (``pip --no-index --only-binary=:all: -r`` the server's copy);
4. export ``/evaluator`` to the evaluator's directory in storage (a writable mount), within
   ``evaluators.max_evaluator_bytes`` less the archive, checked file by file before it is written.

The directory is then handed back to the server and made read-only, and a second sandbox at the floor, with it
mounted read-only as scoring mounts it, imports the evaluation test to check it. A failed build leaves only its
archive behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsi.sandbox import Isolation, Limits, Mount, RunResult, Scratch, Workspace, require
from evalsi.sandbox._host import PROBE_FAILURES, PROBE_SLOT, running_as_root, sandbox_python, sandbox_uid
from evalsi.server.evaluation._config import EvaluatorsConfig
from evalsi.server.evaluation.evaluators._index import Download, download_wheels, tree_bytes

EVALUATOR = "/evaluator"
UPLOAD = "/upload"
RUNTIME = "/opt/evalsi-runtime"
WHEELS = "/wheelhouse"
DOWNLOADS = "/downloads"
EXPORT = "/export"
ARCHIVE_NAME = "source.tar.gz"
REQUIREMENTS_COPY = "requirements.txt"
"""The server's copy of the checked requirements, beside the archive."""
_LOG_TAIL = 20_000
_PYTHON = "<python>"
"""Stands for the sandbox's interpreter in a step's argv until it is looked up (a failure there fails the build)."""
_OVER_EVALUATOR_QUOTA = 3
"""The export step's exit status when the evaluator's files would pass ``evaluators.max_evaluator_bytes``."""
_NO_SPACE = ("No space left on device", "[Errno 28]")
_FILE_TOO_LARGE = ("File too large", "[Errno 27]")

UNPACK = r"""
import os, stat, sys, tarfile
archive, root = sys.argv[1], sys.argv[2]
os.mkdir(root, 0o755)
count = 0
with tarfile.open(archive, "r:gz") as tar:
    for m in tar:
        parts = [p for p in m.name.replace("\\", "/").split("/") if p not in ("", ".")]
        if m.name.startswith("/") or ".." in parts:
            sys.exit(f"refused {m.name!r}: outside the archive")
        if not (m.isdir() or (m.isreg() and not m.issparse() and parts)):
            sys.exit(f"refused {m.name!r}: an archive holds regular files and directories only")
        path = root
        for part in parts if m.isdir() else parts[:-1]:
            path = os.path.join(path, part)
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    sys.exit(f"refused {m.name!r}: {part!r} is not a directory")
        if m.isreg():
            mode = 0o755 if m.mode & 0o100 else 0o644
            fd = os.open(os.path.join(path, parts[-1]), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with tar.extractfile(m) as src, os.fdopen(fd, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        count += 1
print("unpacked", count, "entries")
"""

EXPORT_TREE = r"""
import os, stat, sys
source, target, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
used = 0

def charge(size, name):
    global used
    used += max(4096, -(-size // 4096) * 4096)
    if used > budget:
        print(f"refused {name!r}: the evaluator's files would pass {budget} bytes", file=sys.stderr)
        sys.exit(3)

for folder, dirs, files in os.walk(source):
    here = os.path.join(target, os.path.relpath(folder, source))
    for name in sorted(dirs + files):
        src, dst = os.path.join(folder, name), os.path.join(here, name)
        shown = os.path.relpath(src, source)
        info = os.lstat(src)
        if stat.S_ISLNK(info.st_mode):
            charge(0, shown)
            os.symlink(os.readlink(src), dst)
        elif stat.S_ISDIR(info.st_mode):
            charge(0, shown)
            os.mkdir(dst, 0o755)
        elif stat.S_ISREG(info.st_mode):
            charge(info.st_size, shown)
            mode = 0o755 if info.st_mode & 0o100 else 0o644
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with open(src, "rb") as a, os.fdopen(fd, "wb") as b:
                while chunk := a.read(1 << 20):
                    b.write(chunk)
        else:
            sys.exit(f"refused {shown!r}: not a file, directory or link")
print("exported", used, "bytes")
"""


@dataclass(frozen=True)
class BuildOutcome:
    """How a build ended: ACTIVE with the test's mode, or BUILD_FAILED with a one-line reason; and its log."""

    ok: bool
    mode: str
    message: str
    log: str


def _python() -> str:
    """The interpreter sandboxes start (looked up as the probe slot's uid, which no sandbox ever runs as)."""
    python = sandbox_python(sandbox_uid(PROBE_SLOT))
    if python is None:
        tried = "; ".join(PROBE_FAILURES) or "no candidate found"
        raise RuntimeError(f"no Python interpreter the sandbox user can start ({tried})")
    return python


def _step_log(title: str, rung: str, argv: list[str], result: RunResult) -> str:
    status = f"exit {result.exit_code}" if result.reason == "exit" else f"stopped: {result.reason} {result.detail}"
    command = shlex.join(argv) if "-c" not in argv else shlex.join([*argv[: argv.index("-c")], "-c", "..."])
    parts = [f"# {title}  [{rung}; {status}, {result.wall_time:.1f}s]", f"$ {command}"]
    if result.stdout.strip():
        parts.append(result.stdout.rstrip()[-_LOG_TAIL:])
    if result.stderr.strip():
        parts.append(result.stderr.rstrip()[-_LOG_TAIL:])
    return "\n".join(parts)


@dataclass
class _Build:
    """One build's inputs and its log as it grows."""

    directory: Path
    entry: str
    requirements: list[str]
    config: EvaluatorsConfig
    runtime: Path
    rung: Isolation
    log: list[str]

    def failed(self, message: str) -> BuildOutcome:
        return BuildOutcome(False, "", message, "\n\n".join(self.log))


def build(
    directory: Path,
    entry: str,
    requirements: list[str],
    config: EvaluatorsConfig,
    runtime: Path,
    rung: Isolation,
) -> BuildOutcome:
    """Build the evaluator in ``directory`` (which holds the archive and the checked requirements) and check it.

    ``requirements`` is the checked list (the server's copy in ``upload/`` holds the same). Never raises for the
    evaluator's faults: they are a failed outcome with the log saying why, and only the archive is left.
    """
    job = _Build(directory, entry, requirements, config, runtime, rung, [])
    outcome: BuildOutcome | None = None
    try:
        outcome = _run(job)
        return outcome
    finally:
        shutil.rmtree(directory / "downloads", ignore_errors=True)
        if outcome is None or not outcome.ok:
            discard(directory / "env")


def _run(job: _Build) -> BuildOutcome:
    config, directory = job.config, job.directory
    env = directory / "env"
    discard(env)
    env.mkdir(mode=0o755)
    mounts = [Mount(str(directory / "upload"), UPLOAD), Mount(str(env), EXPORT, writable=True)]
    if config.find_links is not None:
        mounts.append(Mount(str(config.find_links), WHEELS))
    downloaded = 0
    fetch = bool(job.requirements) and config.index_url is not None
    if fetch:
        fetched = _fetch_requirements(directory, job.requirements, config)
        job.log.append(fetched.log)
        if not fetched.ok:
            return job.failed(fetched.message)
        downloaded = fetched.size
        mounts.append(Mount(str(directory / "downloads"), DOWNLOADS))
    sources = [
        *(["--find-links", WHEELS] if config.find_links is not None else []),
        *(["--find-links", DOWNLOADS] if fetch else []),
    ]
    room = config.max_build_bytes - downloaded
    kept = config.max_evaluator_bytes - tree_bytes(directory / "upload")
    limits = _limits(config, config.max_build_bytes)
    steps = _steps(job, sources, kept)
    try:
        python = _python()
        floor = require(job.rung)
        with Workspace(floor, mounts=mounts, scratch=[Scratch(EVALUATOR, max(room, 1))]) as workspace:
            for title, argv in steps:
                argv = [python if part == _PYTHON else part for part in argv]
                step_limits = _limits(config, max(kept, 1)) if title == "export" else limits
                result = workspace.exec(argv, limits=step_limits)
                job.log.append(_step_log(title, floor, argv, result))
                if not result.ok:
                    return job.failed(_step_failure(job, title, result, bool(sources)))
        seal(env)
        # The evaluator's own code first runs here, as it will when scoring: its directory mounted read-only.
        check = [f"{EVALUATOR}/venv/bin/python", "-I", f"{RUNTIME}/evalsi_runner.py", "check", job.entry]
        read_only = [Mount(str(env), EVALUATOR), Mount(str(job.runtime), RUNTIME)]
        with Workspace(floor, mounts=read_only) as workspace:
            result = workspace.exec(check, limits=limits)
        job.log.append(_step_log("check the entry", floor, check, result))
        if not result.ok:
            return job.failed(_step_failure(job, "check the entry", result, bool(sources)))
        answer = _answer(result.stdout)
    except Exception as exc:  # the sandbox itself could not run: the build failed, the server carries on
        job.log.append(f"the sandbox failed: {exc}")
        return job.failed(f"the build sandbox failed: {exc}")
    mode = str(answer.get("mode", "")) if answer else ""
    if not mode:
        return job.failed("the entry check gave no answer")
    job.log.append(f"evaluation test {job.entry} ({mode}) is ready")
    return BuildOutcome(True, mode, "", "\n\n".join(job.log))


def _limits(config: EvaluatorsConfig, file_bytes: int) -> Limits:
    return Limits(
        wall_time=config.build_timeout,
        cpu_time=max(1, int(config.build_timeout)),
        memory_bytes=config.build_memory_mb << 20,
        max_processes=64,
        max_output_bytes=1 << 20,
        max_file_bytes=file_bytes,
        max_open_files=1024,
    )


def _steps(job: _Build, sources: list[str], kept: int) -> list[tuple[str, list[str]]]:
    venv_python = f"{EVALUATOR}/venv/bin/python"
    steps: list[tuple[str, list[str]]] = [
        ("unpack the archive", [_PYTHON, "-I", "-S", "-c", UNPACK, f"{UPLOAD}/{ARCHIVE_NAME}", f"{EVALUATOR}/src"]),
        (
            "create the environment",
            [_PYTHON, "-I", "-m", "venv", *([] if job.requirements else ["--without-pip"]), f"{EVALUATOR}/venv"],
        ),
    ]
    if job.requirements:
        pip = [venv_python, "-I", "-m", "pip", "install", "--isolated", "--no-index", "--only-binary=:all:"]
        options = ["--no-input", "--disable-pip-version-check", "--no-cache-dir", "--root-user-action=ignore"]
        steps.append(("install requirements.txt", [*pip, *options, *sources, "-r", f"{UPLOAD}/{REQUIREMENTS_COPY}"]))
    steps.append(("export", [_PYTHON, "-I", "-S", "-c", EXPORT_TREE, EVALUATOR, EXPORT, str(kept)]))
    return steps


def _fetch_requirements(directory: Path, requirements: list[str], config: EvaluatorsConfig) -> Download:
    """The requirements' wheels from the operator's index into ``directory/downloads`` (in this process)."""
    index_url = config.index_url or ""
    target = directory / "downloads"
    return download_wheels(requirements, index_url, target, config.build_timeout, config.max_build_bytes)


def _step_failure(job: _Build, title: str, result: RunResult, wheels: bool) -> str:
    config = job.config
    output = result.stdout[-_LOG_TAIL:] + result.stderr[-_LOG_TAIL:]
    if title == "export" and result.exit_code == _OVER_EVALUATOR_QUOTA:
        job.log.append(
            f"# stopped: the evaluator's files (its archive, source and environment) would pass "
            f"evaluators.max_evaluator_bytes={config.max_evaluator_bytes} bytes; nothing was kept"
        )
        return f"the evaluator's files pass evaluators.max_evaluator_bytes={config.max_evaluator_bytes} bytes"
    if title != "check the entry" and any(sign in output for sign in (*_NO_SPACE, *_FILE_TOO_LARGE)):
        job.log.append(
            f"# stopped: the build wrote past evaluators.max_build_bytes={config.max_build_bytes} bytes "
            "(its source, environment and downloaded wheels); nothing was kept"
        )
        return f"{title} wrote more than evaluators.max_build_bytes={config.max_build_bytes} bytes"
    if title == "check the entry":
        answer = _answer(result.stdout)
        if answer and answer.get("error"):
            return f"the entry check failed: {answer['error']}"
    if title == "install requirements.txt" and not wheels:
        return (
            "requirements.txt could not be installed: this server allows no package source "
            "(the operator sets evaluators.index_url to a package index or evaluators.find_links to a wheel directory)"
        )
    if result.reason != "exit":
        return f"{title} stopped: {result.reason}"
    return f"{title} failed (exit {result.exit_code}); see the build log"


def _answer(stdout: str) -> dict[str, Any] | None:
    lines = stdout.strip().splitlines()
    if not lines:
        return None
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def seal(root: Path) -> None:
    """Give ``root`` back to the server and make it read-only for everyone else (links are not followed)."""
    owner = running_as_root()
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files, ""]:
            path = os.path.join(folder, name) if name else folder
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if owner:
                os.lchown(path, 0, 0)
            if stat.S_ISLNK(info.st_mode):
                continue
            mode = stat.S_IMODE(info.st_mode) & ~0o022 | 0o444
            if stat.S_ISDIR(info.st_mode) or info.st_mode & 0o100:
                mode |= 0o111
            os.chmod(path, mode & ~0o6000)


def discard(root: Path) -> None:
    """Remove a build's files (a failed build keeps only its archive); links are removed, never followed."""
    if not root.exists():
        return
    try:
        shutil.rmtree(root)
    except OSError:
        for folder, _, _ in os.walk(root):  # a directory left without its owner's write bit
            with contextlib.suppress(OSError):
                os.chmod(folder, 0o755)
        shutil.rmtree(root, ignore_errors=True)


MAX_REASON_BYTES = 4096
"""A row's ``reason`` is cut at this many bytes unless the caller says otherwise (``jobs.max_reason_bytes``)."""
MAX_METRICS = 32
"""Named metrics kept of one row; more are dropped."""
MAX_METRIC_NAME = 64
"""Characters of a metric's name kept."""


def cut_text(text: str, limit: int, what: str) -> str:
    """``text`` within ``limit`` UTF-8 bytes: cut there (on a character boundary) and marked, naming the limit."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    mark = f" [cut at {what}={limit} bytes]"
    return data[: max(0, limit - len(mark))].decode("utf-8", "ignore") + mark


def clean_result(raw: Any, max_reason_bytes: int) -> dict[str, Any]:
    """One row's result as the server keeps it, whatever the sandbox printed.

    ``{score, reason, metrics}`` with a score within [0, 1], a reason of at most ``max_reason_bytes`` and at most
    :data:`MAX_METRICS` finite numeric metrics; or ``{error}`` (cut at ``max_reason_bytes`` too).
    """
    if not isinstance(raw, dict):
        return {"error": "the evaluator's answer for this row is not an object"}
    if "error" in raw:
        return {"error": cut_text(str(raw["error"]), max_reason_bytes, "jobs.max_reason_bytes")}
    score = raw.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= float(score) <= 1.0:
        return {"error": "the evaluator's answer for this row has no score within [0, 1]"}
    reason = raw.get("reason")
    metrics: dict[str, float] = {}
    given = raw.get("metrics")
    for name, value in given.items() if isinstance(given, dict) else ():
        if len(metrics) == MAX_METRICS:
            break
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            metrics[str(name)[:MAX_METRIC_NAME]] = float(value)
    return {
        "score": float(score),
        "reason": None if reason is None else cut_text(str(reason), max_reason_bytes, "jobs.max_reason_bytes"),
        "metrics": metrics,
    }
