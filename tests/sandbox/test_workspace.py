"""Workspaces: a sandbox whose work dir persists between commands, with mounts and a root filesystem image."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsi.errors import SandboxUnavailableError
from evalsi.sandbox import Limits, Mount, Scratch, Workspace
from tests.helpers.rootfs import MARKER, build_rootfs


@pytest.fixture(scope="module")
def host_dir() -> Iterator[Path]:
    """A directory the sandbox's uid can reach (pytest's own temporary dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="evalsi-workspace-test-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def rootfs(host_dir: Path) -> Path:
    return build_rootfs(host_dir / "rootfs")


@pytest.mark.parametrize("rung", ["namespaced", "process", "gvisor"])
def test_the_work_dir_persists_between_commands_until_reset(rung: str) -> None:
    with Workspace(rung) as ws:  # type: ignore[arg-type]
        assert ws.exec(["/bin/sh", "-c", "mkdir d && echo kept > d/f"]).ok
        assert ws.exec(["/bin/cat", "d/f"]).stdout == "kept\n"
        assert ws.exec(["/bin/ls", "-A"], reset=True).stdout == ""
        assert ws.exec(["/bin/sh", "-c", "cat d/f"]).exit_code != 0


def test_each_command_has_its_limits_and_leaves_no_process_behind() -> None:
    with Workspace("namespaced") as ws:
        slow = ws.exec(["/bin/sleep", "5"], limits=Limits(wall_time=0.3))
        assert slow.reason == "timeout"
        ws.exec(["/bin/sh", "-c", "(sleep 0.3; touch late) & true"])
        ws.exec(["/bin/sleep", "0.6"])
        assert ws.exec(["/bin/ls", "-A"]).stdout == ""


def test_mounts_read_only_and_writable(host_dir: Path) -> None:
    shared = host_dir / "shared"
    shared.mkdir(mode=0o755)
    (shared / "in.txt").write_text("from the host\n")
    os.chmod(shared / "in.txt", 0o644)
    out = host_dir / "out"
    out.mkdir()
    mounts = [Mount(str(shared), "/shared"), Mount(str(out), "/out", writable=True)]
    with Workspace("namespaced", mounts=mounts) as ws:
        assert ws.exec(["/bin/cat", "/shared/in.txt"]).stdout == "from the host\n"
        denied = ws.exec(["/bin/sh", "-c", "echo x > /shared/new"])
        assert denied.exit_code != 0 and "Read-only" in denied.stderr
        assert ws.exec(["/bin/sh", "-c", "echo exported > /out/file"]).ok
        assert ws.path(mounts[1]) == "/out"
    assert (out / "file").read_text() == "exported\n"
    assert not (shared / "new").exists()


@pytest.mark.parametrize("rung", ["namespaced", "gvisor"])
def test_a_scratch_directory_refuses_writes_past_its_size_and_a_writable_mount_exports(
    host_dir: Path, rung: str
) -> None:
    out = host_dir / f"export-{rung}"
    out.mkdir()
    mount = Mount(str(out), "/out", writable=True)
    with Workspace(rung, mounts=[mount], scratch=[Scratch("/scratch", 4 << 20)]) as ws:  # type: ignore[arg-type]
        filled = ws.exec(["/bin/sh", "-c", "head -c 12582912 /dev/zero > /scratch/big"], limits=Limits(wall_time=60))
        assert filled.exit_code != 0 and "No space left on device" in filled.stderr, filled
        assert int(ws.exec(["/usr/bin/du", "-sk", "/scratch"]).stdout.split()[0]) <= 4096
        copied = ws.exec(["/bin/sh", "-c", "rm /scratch/big && echo kept > /scratch/f && cp /scratch/f /out/f"])
        assert copied.ok, copied
    assert (out / "f").read_text() == "kept\n"
    assert (out / "f").stat().st_uid == out.stat().st_uid  # created as the workspace's own uid on the host


def test_a_root_filesystem_image_replaces_the_host_system(rootfs: Path) -> None:
    with Workspace("namespaced", image=str(rootfs)) as ws:
        seen = ws.exec(["/bin/sh", "-c", "cat /etc/image-release; ls /usr/bin; echo done > here; cat here"])
        assert seen.ok, seen
        assert seen.stdout.startswith(MARKER) and seen.stdout.endswith("done\n")
        assert "dash" in seen.stdout and "git" not in seen.stdout and "bash" not in seen.stdout.split()


def test_unusable_images_and_rungs_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailableError, match="not a root filesystem directory"):
        Workspace("namespaced", image=str(tmp_path / "missing"))
    with pytest.raises(SandboxUnavailableError, match="has no /usr/bin/python3"):
        Workspace("namespaced", image=str(tmp_path))
    with pytest.raises(SandboxUnavailableError, match="needs the 'namespaced' rung"):
        Workspace("process", image=str(tmp_path))
    with pytest.raises(SandboxUnavailableError, match="scratch directory needs the 'namespaced' or 'gvisor'"):
        Workspace("process", scratch=[Scratch("/scratch", 1 << 20)])
