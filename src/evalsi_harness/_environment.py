"""Where episodes run: the task's setup, done once and snapshotted, and one sandboxed work dir per environment.

Setup runs once, in a sandbox of the task's rung, and its work dir is copied out to a host directory: the
snapshot. Every environment mounts the snapshot read-only and restores its own private work dir from it at each
reset (an archive unpacked inside the sandbox: tens of milliseconds for a small repository), so setup never runs
again.

Every file operation runs *inside* the sandbox (``cat``, ``cat >``), never on the host: a path or a symlink the
agent made can only reach what the sandbox itself can see.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import shutil
import tarfile
import tempfile
import threading
import time
import weakref
from types import TracebackType

from evalsi.errors import EvalsiError
from evalsi.sandbox import Limits, Mount, RunResult, Workspace
from evalsi_harness._image import UnpackedImage, is_image, split_image, unpack_image
from evalsi_harness._task import Task

SNAPSHOT_TARGET = "/snapshot"
"""Where the snapshot is mounted (read-only) in a namespaced episode."""
_WRITE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
# The snapshot is kept twice: as a tree (read by cp -a anywhere) and, where the system has tar, as one archive,
# which restores in a third of the time of cp -a (no per-file attribute and ACL look-ups). The archive holds the
# work dir's entries, not the work dir itself (whose mount point may not be the sandbox user's, as under gVisor).
_TAR = "find . -mindepth 1 -maxdepth 1 -print0 | tar cf {} --null -T -"
_SAVE = 'mkdir "$1"/work && cp -a -- . "$1"/work/ && if command -v tar >/dev/null; then {}; fi'.format(
    _TAR.format('"$1"/work.tar')
)
_EXPORT = _TAR.format("-") + " | base64 -w0"
_MAX_EXPORT = 384 << 20
"""The largest exported work dir, base64 (the sandbox's work dir holds at most 256 MiB)."""
_RESTORE = 'if [ -f "$1"/work.tar ]; then tar xf "$1"/work.tar; else cp -a -- "$1"/work/. .; fi'


class TaskSetupError(EvalsiError, RuntimeError):
    """A task's setup failed: a file could not be written or a command did not succeed (named in the message)."""


def shell_for(root: str | None) -> str:
    """``/bin/bash`` when the system (a root filesystem directory; None: the host's) has it, else ``/bin/sh``."""
    return "/bin/bash" if os.path.lexists(os.path.join(root or "/", "bin/bash")) else "/bin/sh"


def task_root(task: Task) -> tuple[str | None, UnpackedImage | None]:
    """The root filesystem a task's episodes run on (None: the host's), and the unpacked image it came from.

    An OCI image layout or a ``docker save`` archive is unpacked into the image cache, once (later calls, in
    this process or another, reuse the unpacked copy); a root filesystem directory is used as it is.

    Raises:
        ImageError: The image cannot be read or unpacked (the message names the layer and member at fault).

    """
    if task.image == "host":
        return None, None
    path, ref = split_image(task.image)
    if ref is None and not is_image(path):
        return path, None
    unpacked = unpack_image(path, ref, task.platform)
    return unpacked.rootfs, unpacked


def _describe(result: RunResult) -> str:
    if result.reason == "exit":
        detail = (result.stderr or result.stdout).strip()[-500:]
        return f"exit status {result.exit_code}" + (f": {detail}" if detail else "")
    return f"stopped ({result.reason}{': ' + result.detail if result.detail else ''})"


class Snapshot:
    """A task's work dir after setup, on the host; mounted read-only by every environment of the task.

    ``rootfs`` is the root filesystem episodes run on (None: the host's); ``image`` the unpacked image it came
    from, when the task's image is an OCI layout or a ``docker save`` archive (``image.cached``: it was already).

    Args:
        task: The task whose setup to run.

    Raises:
        TaskSetupError: A setup file or command failed.
        ImageError: The task's image cannot be read or unpacked.
        SandboxUnavailableError: The task's rung does not work here, or its image is unusable.

    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self.rootfs, self.image = task_root(task)
        self._root = tempfile.mkdtemp(prefix="evalsi-task-")
        self._remove = weakref.finalize(self, shutil.rmtree, self._root, True)  # also if never closed
        os.chmod(self._root, 0o711)  # every environment's sandbox uid must reach the snapshot below it
        self.path = os.path.join(self._root, "snapshot")
        os.mkdir(self.path, 0o755)
        started = time.monotonic()
        try:
            self._run_setup()
        except BaseException:
            self.close()
            raise
        self.setup_seconds = time.monotonic() - started

    def _run_setup(self) -> None:
        task, shell = self.task, shell_for(self.rootfs)
        mount = Mount(self.path, SNAPSHOT_TARGET, writable=True)
        limits = dataclasses.replace(task.step_limits, wall_time=task.setup.wall_time)
        exported = task.isolation == "gvisor"
        with Workspace(task.isolation, mounts=[] if exported else [mount], image=self.rootfs) as ws:
            for path, text in task.setup.files.items():
                done = ws.exec([shell, "-c", _WRITE, "sh", path], stdin=text, limits=limits)
                if not done.ok:
                    raise TaskSetupError(f"task {task.name!r}: setup could not write {path!r}: {_describe(done)}")
            for index, command in enumerate(task.setup.commands):
                done = ws.exec([shell, "-c", command], limits=limits)
                if not done.ok:
                    raise TaskSetupError(
                        f"task {task.name!r}: setup.commands[{index}] ({command!r}) failed: {_describe(done)}"
                    )
            if exported:
                done = self._export(ws, shell, limits)
            else:
                done = ws.exec([shell, "-c", _SAVE, "sh", ws.path(mount)], limits=limits)
            if not done.ok:
                raise TaskSetupError(f"task {task.name!r}: the work dir could not be snapshotted: {_describe(done)}")
        _make_readable(self.path)
        os.chmod(self.path, 0o755)  # written by the setup sandbox only; read-only for every episode

    def _export(self, ws: Workspace, shell: str, limits: Limits) -> RunResult:
        """Take the work dir out as a tar archive on stdout, and unpack it here (tarfile's safe ``data`` filter).

        gVisor's rootless file server cannot create files for the sandbox's user in a host directory, so on that
        rung the snapshot is not written through a mount.
        """
        done = ws.exec([shell, "-c", _EXPORT], limits=dataclasses.replace(limits, max_output_bytes=_MAX_EXPORT))
        if not done.ok:
            return done
        archive = os.path.join(self.path, "work.tar")
        with open(archive, "wb") as fh:
            fh.write(base64.b64decode(done.stdout))
        with tarfile.open(archive) as tar:
            tar.extractall(os.path.join(self.path, "work"), filter="data")
        return done

    def close(self) -> None:
        """Remove the snapshot from the host."""
        self._remove()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _make_readable(path: str) -> None:
    """Let every environment's uid read the snapshot (its files were made by the setup sandbox's uid)."""
    for dirpath, _dirnames, filenames in os.walk(path):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o555)
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.chmod(full, os.stat(full).st_mode | 0o444)


class Environment:
    """One environment's sandbox: a private work dir restored from the snapshot, and the agent's tools.

    A Python checker receives this object, so it grades the end state through the same sandbox.

    Args:
        task: The task.
        snapshot: The task's snapshot, restored into the work dir.

    """

    def __init__(self, task: Task, snapshot: Snapshot) -> None:
        self.task = task
        self.shell = shell_for(snapshot.rootfs)
        self._mount = Mount(snapshot.path, SNAPSHOT_TARGET)
        self._workspace = Workspace(task.isolation, mounts=[self._mount], image=snapshot.rootfs)
        self._lock = threading.Lock()

    @property
    def isolation(self) -> str:
        """The sandbox rung this environment runs at."""
        return self._workspace.isolation

    def restore(self) -> RunResult:
        """Empty the work dir and copy the snapshot into it (every process of the last episode is gone)."""
        argv = [self.shell, "-c", _RESTORE, "sh", self._workspace.path(self._mount)]
        return self._exec(argv, "", self.task.step_limits, reset=True)

    def clear(self) -> RunResult:
        """Empty the work dir, without restoring the snapshot (to run something else from scratch)."""
        return self._exec(["/bin/sh", "-c", "true"], "", self.task.step_limits, reset=True)

    def bash(self, command: str, limits: Limits | None = None) -> RunResult:
        """Run a shell command in the work dir.

        Args:
            command: The shell command.
            limits: The command's limits; the task's per-step limits when None.

        """
        return self._exec([self.shell, "-c", command], "", limits or self.task.step_limits)

    def read_file(self, path: str, limits: Limits | None = None) -> RunResult:
        """A file's text on stdout (cut at the output limit), read inside the sandbox.

        Args:
            path: The file, relative to the work dir or absolute inside the sandbox.
            limits: The read's limits; the task's per-step limits when None.

        """
        return self._exec(["/bin/cat", "--", path], "", limits or self.task.step_limits)

    def write_file(self, path: str, content: str, limits: Limits | None = None) -> RunResult:
        """Write ``content`` to ``path`` (parents created), inside the sandbox.

        Args:
            path: The file, relative to the work dir or absolute inside the sandbox.
            content: The text to write.
            limits: The write's limits; the task's per-step limits when None.

        """
        return self._exec([self.shell, "-c", _WRITE, "sh", path], content, limits or self.task.step_limits)

    def _exec(self, argv: list[str], stdin: str, limits: Limits, *, reset: bool = False) -> RunResult:
        with self._lock:
            return self._workspace.exec(argv, stdin=stdin, limits=limits, reset=reset)

    def close(self) -> None:
        """Stop the sandbox; the work dir is gone."""
        self._workspace.close()
