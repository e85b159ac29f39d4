"""Building and running uploaded evaluators in the sandbox; the server process never imports their code.

A build is three sandboxed commands in one workspace, with the evaluator's directory mounted writable at
``/evaluator``, the archive and the runtime read-only: unpack (the archive rules again, then member by member),
create a venv, install ``requirements.txt`` as wheels from the operator's wheel directory and the wheels the server
downloaded from the operator's index only (``pip --no-index --only-binary=:all:``: nothing is built, and the
sandbox has no network). The directory is then handed back to
the server and made read-only, and a fourth sandbox, with it mounted read-only as scoring mounts it, imports the
evaluation test to check it: the evaluator's own code never runs with its directory writable.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsi.sandbox import Isolation, Limits, Mount, RunResult, Workspace, require
from evalsi.sandbox._host import PROBE_FAILURES, PROBE_SLOT, running_as_root, sandbox_python, sandbox_uid
from evalsi.server._evaluators_config import EvaluatorsConfig
from evalsi.server._evaluators_index import (
    Download,
    RequirementsError,
    download_wheels,
    plain_requirements,
    read_requirements,
)

EVALUATOR = "/evaluator"
UPLOAD = "/upload"
RUNTIME = "/opt/evalsi-runtime"
WHEELS = "/wheelhouse"
DOWNLOADS = "/downloads"
ARCHIVE_NAME = "source.tar.gz"
_LOG_TAIL = 20_000
_PYTHON = "<python>"
"""Stands for the sandbox's interpreter in a step's argv until it is looked up (a failure there fails the build)."""

UNPACK = r"""
import os, posixpath, sys, tarfile
archive, root = sys.argv[1], sys.argv[2]
os.makedirs(root, exist_ok=True)
with tarfile.open(archive, "r:gz") as tar:
    for m in tar:
        parts = [p for p in m.name.replace("\\", "/").split("/") if p not in ("", ".")]
        if m.name.startswith("/") or ".." in parts:
            sys.exit(f"refused {m.name!r}: outside the archive")
        name = "/".join(parts)
        path = os.path.join(root, name) if name else root
        if m.isdir():
            os.makedirs(path, exist_ok=True)
        elif m.isfile():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tar.extractfile(m) as src, open(path, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.chmod(path, 0o755 if m.mode & 0o100 else 0o644)
        elif m.issym():
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), m.linkname))
            if m.linkname.startswith("/") or target == ".." or target.startswith("../"):
                sys.exit(f"refused {m.name!r}: a link outside the archive")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(m.linkname, path)
        else:
            sys.exit(f"refused {m.name!r}: not a file, directory or link inside the archive")
print("unpacked", len(os.listdir(root)), "top-level entries")
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


def _step_log(title: str, argv: list[str], result: RunResult) -> str:
    status = f"exit {result.exit_code}" if result.reason == "exit" else f"stopped: {result.reason} {result.detail}"
    command = shlex.join(argv) if "-c" not in argv else shlex.join([*argv[: argv.index("-c")], "-c", "..."])
    parts = [f"# {title}  [{status}, {result.wall_time:.1f}s]", f"$ {command}"]
    if result.stdout.strip():
        parts.append(result.stdout.rstrip()[-_LOG_TAIL:])
    if result.stderr.strip():
        parts.append(result.stderr.rstrip()[-_LOG_TAIL:])
    return "\n".join(parts)


def build(
    directory: Path,
    entry: str,
    has_requirements: bool,
    config: EvaluatorsConfig,
    runtime: Path,
    rung: Isolation,
) -> BuildOutcome:
    """Build the evaluator in ``directory`` (which holds the archive) in the sandbox, and check its entry.

    Never raises for the evaluator's faults: they are a failed outcome with the log saying why.
    """
    env = directory / "env"
    env.mkdir(mode=0o755, exist_ok=True)
    mounts = [
        Mount(str(env), EVALUATOR, writable=True),
        Mount(str(directory / "upload"), UPLOAD),
        Mount(str(runtime), RUNTIME),
    ]
    wheels = config.find_links
    if wheels is not None:
        mounts.append(Mount(str(wheels), WHEELS))
    log: list[str] = []
    downloaded = has_requirements and config.index_url is not None
    if downloaded and config.index_url is not None:
        fetched = _fetch_requirements(directory, config.index_url, config.build_timeout)
        log.append(fetched.log)
        if not fetched.ok:
            return BuildOutcome(False, "", fetched.message, "\n\n".join(log))
        mounts.append(Mount(str(directory / "downloads"), DOWNLOADS))
    sources = [
        *(["--find-links", WHEELS] if wheels is not None else []),
        *(["--find-links", DOWNLOADS] if downloaded else []),
    ]
    limits = Limits(
        wall_time=config.build_timeout,
        cpu_time=max(1, int(config.build_timeout)),
        memory_bytes=config.build_memory_mb << 20,
        max_processes=64,
        max_output_bytes=1 << 20,
        max_file_bytes=max(64 << 20, config.max_unpacked_bytes),
        max_open_files=1024,
    )
    venv_python = f"{EVALUATOR}/venv/bin/python"
    steps: list[tuple[str, list[str]]] = [
        ("unpack the archive", [_PYTHON, "-I", "-S", "-c", UNPACK, f"{UPLOAD}/{ARCHIVE_NAME}", f"{EVALUATOR}/src"]),
        (
            "create the environment",
            [_PYTHON, "-I", "-m", "venv", *([] if has_requirements else ["--without-pip"]), f"{EVALUATOR}/venv"],
        ),
    ]
    if has_requirements:
        pip = [venv_python, "-I", "-m", "pip", "install", "--no-index", "--only-binary=:all:", "--no-input"]
        steps.append(
            (
                "install requirements.txt",
                [*pip, "--disable-pip-version-check", *sources, "-r", f"{EVALUATOR}/src/requirements.txt"],
            )
        )
    check = ("check the entry", [venv_python, "-I", f"{RUNTIME}/evalsi_runner.py", "check", entry])
    try:
        python = _python()
        steps = [(title, [python if part == _PYTHON else part for part in argv]) for title, argv in steps]
        # Unpacking, the venv and wheel installs run none of the evaluator's code: bubblewrap (where files can be
        # written to a mount, unlike under gVisor) suffices; the entry check below runs at the server's floor.
        with Workspace(require("namespaced"), mounts=mounts) as workspace:
            for title, argv in steps:
                result = workspace.exec(argv, limits=limits)
                log.append(_step_log(title, argv, result))
                if not result.ok:
                    return BuildOutcome(False, "", _failure(title, result, bool(sources)), "\n\n".join(log))
        seal(env)
        # The evaluator's own code first runs here, as it will when scoring: its directory mounted read-only.
        read_only = [Mount(str(env), EVALUATOR), Mount(str(runtime), RUNTIME)]
        with Workspace(require(rung), mounts=read_only) as workspace:
            result = workspace.exec(check[1], limits=limits)
        log.append(_step_log(check[0], check[1], result))
        if not result.ok:
            return BuildOutcome(False, "", _failure(check[0], result, bool(sources)), "\n\n".join(log))
        answer = _answer(result.stdout)
    except Exception as exc:  # the sandbox itself could not run: the build failed, the server carries on
        log.append(f"the sandbox failed: {exc}")
        return BuildOutcome(False, "", f"the build sandbox failed: {exc}", "\n\n".join(log))
    finally:
        seal(env)
    mode = str(answer.get("mode", "")) if answer else ""
    if not mode:
        return BuildOutcome(False, "", "the entry check gave no answer", "\n\n".join(log))
    log.append(f"evaluation test {entry} ({mode}) is ready")
    return BuildOutcome(True, mode, "", "\n\n".join(log))


def _fetch_requirements(directory: Path, index_url: str, timeout: float) -> Download:
    """The requirements' wheels from the operator's index into ``directory/downloads`` (in this process)."""
    try:
        requirements = plain_requirements(read_requirements(directory / "upload" / ARCHIVE_NAME))
    except RequirementsError as exc:
        return Download(False, str(exc), f"# download requirements  [refused]\n{exc}")
    if not requirements:
        (directory / "downloads").mkdir(mode=0o755, exist_ok=True)
        return Download(True, "", "# download requirements  [nothing to download]")
    return download_wheels(requirements, index_url, directory / "downloads", timeout)


def _failure(title: str, result: RunResult, wheels: bool) -> str:
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


class ScoringSession:
    """One sandbox with a built evaluator mounted read-only, scoring batches of rows until closed.

    :meth:`close` may be called from another thread (a cancelled job): it kills the sandbox and everything in
    it, and a batch running then ends with an error.

    Raises:
        SandboxUnavailableError: No rung at or above ``rung`` works here.

    """

    def __init__(self, directory: Path, entry: str, runtime: Path, rung: Isolation, limits: Limits) -> None:
        self.entry = entry
        self.limits = limits
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._python = f"{EVALUATOR}/venv/bin/python"
        mounts = [Mount(str(directory / "env"), EVALUATOR), Mount(str(runtime), RUNTIME)]
        self._workspace = Workspace(require(rung), mounts=mounts)  # the floor, or a higher rung where it is missing

    def score(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """One result per row (``{score, reason, metrics}`` or ``{error}``), in order."""
        if self._closed.is_set():
            return [{"error": "cancelled"} for _ in rows]
        argv = [self._python, "-I", f"{RUNTIME}/evalsi_runner.py", "score", self.entry]
        result = self._workspace.exec(argv, stdin=json.dumps({"rows": list(rows)}), limits=self.limits, reset=True)
        answer = _answer(result.stdout)
        if self._closed.is_set():
            return [{"error": "cancelled"} for _ in rows]
        if answer is None or not answer.get("ok") or len(answer.get("results", ())) != len(rows):
            why = answer.get("error") if answer else None
            if not why:
                tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
                why = f"the evaluator stopped ({result.reason}{', ' + tail[0][:300] if tail else ''})"
            return [{"error": str(why)} for _ in rows]
        return [dict(r) for r in answer["results"]]

    def close(self) -> None:
        """Kill the sandbox (and the batch running in it, if any)."""
        self._closed.set()
        with self._lock:
            self._workspace.close()

    def __enter__(self) -> ScoringSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
