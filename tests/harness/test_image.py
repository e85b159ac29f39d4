"""A task whose image is a root filesystem directory: setup, episodes and checker all run on that system."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsi_harness import CommandChecker, Setup, TaskEnv, load_task
from tests.helpers.rootfs import MARKER, build_rootfs

from .conftest import small_task


@pytest.fixture(scope="module")
def rootfs() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="evalsi-image-test-"))
    os.chmod(base, 0o755)
    yield build_rootfs(base / "rootfs")
    shutil.rmtree(base, ignore_errors=True)


def test_an_episode_on_an_image(rootfs: Path) -> None:
    task = small_task(
        image=str(rootfs),
        setup=Setup(files={"a.txt": "A\n"}, commands=["cp /etc/image-release seen-at-setup"]),
        checker=CommandChecker('[ "$(cat done.txt)" = yes ] && [ -f seen-at-setup ]'),
    )
    with TaskEnv(task) as env:
        assert env.environment.shell == "/bin/sh"  # the image has no bash
        env.reset()
        obs, *_ = env.step({"tool": "bash", "command": "cat seen-at-setup; command -v git bash || echo neither"})
        assert json.loads(obs)["stdout"] == MARKER + "neither\n"
        env.step({"tool": "write_file", "path": "done.txt", "content": "yes"})
        assert env.step({"tool": "submit"})[1] == 1.0
        env.reset()
        assert env.step({"tool": "submit"})[1] == 0.0


def test_an_image_in_a_task_file_is_relative_to_it(rootfs: Path) -> None:
    spec = rootfs.parent / "task.yaml"
    spec.write_text(
        "apiVersion: evals.si/v1alpha1\nkind: Task\nmetadata: {name: on-image}\nspec:\n"
        "  description: d\n  image: rootfs\n"
        '  checker: {command: \'[ "$(cat /etc/image-release)" = "evalsi test image 1" ]\'}\n'
    )
    task = load_task(spec)
    assert task.image_dir == str(rootfs)
    with TaskEnv(task) as env:
        env.reset()
        assert env.step({"tool": "submit"})[1] == 1.0
