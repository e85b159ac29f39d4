"""Agent tasks whose image is an OCI image layout or a ``docker save`` archive, unpacked layer by layer.

The images are written here as the usual tools write them (tests/helpers/images.py), from the test root
filesystem split across three layers: gzip, plain and zstd, the last one deleting a file (a whiteout), emptying a
directory of what the layers below put there (an opaque whiteout) and adding a hard link. Episodes run on the
unpacked tree under bubblewrap; the tree is unpacked once and reused; refused members name their layer.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from evalsi_harness import CommandChecker, ImageError, Setup, Task, TaskEnv, load_task, unpack_image
from evalsi_harness._image import CACHE_ENV, host_platform
from tests.helpers.images import (
    Image,
    Layer,
    digest,
    directory,
    docker_save_legacy,
    docker_save_oci,
    file,
    member,
    oci_layout,
    tar_of,
    tree_tar,
)
from tests.helpers.rootfs import MARKER, PYTHON, build_rootfs

from .conftest import small_task

CHECK = (
    '[ "$(cat /etc/image-release)" = "evalsi test image 1" ] && [ ! -e /etc/doomed.txt ] '
    '&& [ "$(ls /usr/share/evalsi/cache)" = new ] && [ "$(cat /usr/share/evalsi/hello-link)" = hello ] '
    '&& [ "$(cat /etc/top)" = "$(cat expected-top)" ] && [ "$(cat done.txt)" = yes ]'
)
LOOK = "cat /etc/image-release /etc/top; ls /usr/share/evalsi/cache; cat /usr/share/evalsi/hello-link; ls /etc"


def _base(prefix: str) -> Path:
    base = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(base, 0o755)  # the sandbox's user reaches the unpacked tree below it
    return base


@pytest.fixture(scope="module")
def lower_layers() -> Iterator[list[Layer]]:
    """The test rootfs as two layers (gzip: system and files to delete; plain: Python's standard library)."""
    base = _base("evalsi-oci-rootfs-")
    root = build_rootfs(base / "rootfs")
    (root / "etc/doomed.txt").write_text("deleted by a whiteout\n")
    for name in ("old1", "old2", "keep/inner"):
        (root / "usr/share/evalsi/cache" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "usr/share/evalsi/cache" / name).write_text("from a lower layer\n")
    (root / "usr/share/evalsi/hello.txt").write_text("hello\n")
    stdlib = f"usr/lib/{PYTHON}"
    system = tree_tar(root, lambda p: not p.startswith(stdlib + "/"))
    library = tree_tar(root, lambda p: p.startswith(stdlib + "/"))
    yield [Layer(system, "gzip"), Layer(library, "tar")]
    shutil.rmtree(base, ignore_errors=True)


def top_layer(name: str, compression: str = "zstd") -> Layer:
    """The last layer: whiteouts, an opaque directory, a hard link, and ``/etc/top`` saying which image it is."""
    return Layer(
        tar_of(
            [
                member("etc/.wh.doomed.txt"),
                file("etc/top", name + "\n"),
                directory("usr/share/evalsi/cache"),
                member("usr/share/evalsi/cache/.wh..wh..opq"),
                file("usr/share/evalsi/cache/new", "added above the opaque whiteout\n"),
                member("usr/share/evalsi/hello-link", tarfile.LNKTYPE, linkname="usr/share/evalsi/hello.txt"),
            ]
        ),
        compression,
    )


@pytest.fixture
def image_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = _base("evalsi-oci-cache-")
    monkeypatch.setenv(CACHE_ENV, str(base / "images"))
    yield base / "images"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def workdir() -> Iterator[Path]:
    base = _base("evalsi-oci-images-")
    yield base
    shutil.rmtree(base, ignore_errors=True)


def image_task(image: str, top: str) -> Task:
    return small_task(
        image=image,
        setup=Setup(files={"expected-top": top + "\n"}, commands=["cp /etc/image-release seen-at-setup"]),
        checker=CommandChecker(CHECK),
    )


def run_episode_on(task: Task) -> tuple[str, float | None, TaskEnv]:
    env = TaskEnv(task)
    env.reset()
    observation, *_ = env.step({"tool": "bash", "command": LOOK})
    env.step({"tool": "write_file", "path": "done.txt", "content": "yes"})
    reward = env.step({"tool": "submit"})[1]
    return json.loads(observation)["stdout"], reward, env


def test_an_oci_layout_runs_episodes_and_is_unpacked_once(
    lower_layers: list[Layer], image_cache: Path, workdir: Path
) -> None:
    layout = oci_layout(workdir / "layout", [Image([*lower_layers, top_layer("oci")], tags=["evalsi/test:1"])])
    task = image_task(str(layout), "oci")
    seen, reward, env = run_episode_on(task)
    with env:
        assert env.environment.shell == "/bin/sh"  # the image's system, not the host's
        image = env.snapshot.image
        assert image is not None and not image.cached
        assert seen == MARKER + "oci\nnew\nhello\nimage-release\ntop\n"  # doomed.txt, old1, old2, keep/ gone
        assert reward == 1.0
    unpacked = Path(image.rootfs)
    assert unpacked.parent.name == image.digest.replace(":", "-") and unpacked.parent.parent == image_cache
    assert json.loads((unpacked.parent / "image.json").read_text())["manifest"] == image.digest
    inode = unpacked.stat().st_ino
    again, reward, env = run_episode_on(task)  # a second environment: a cache hit, no second unpack
    with env:
        assert env.snapshot.image is not None and env.snapshot.image.cached
        assert env.snapshot.image.rootfs == image.rootfs and reward == 1.0 and again == seen
    assert unpacked.stat().st_ino == inode
    assert sorted(p.name for p in image_cache.iterdir()) == [f".{unpacked.parent.name}.lock", unpacked.parent.name]
    assert not (unpacked / "etc/doomed.txt").exists()
    assert (
        os.stat(unpacked / "usr/share/evalsi/hello-link").st_ino
        == os.stat(unpacked / "usr/share/evalsi/hello.txt").st_ino
    )


@pytest.mark.parametrize("writer", [docker_save_legacy, docker_save_oci], ids=["legacy", "oci"])
def test_docker_save_archives_choose_an_image_by_name(
    writer: Callable[[Path, list[Image]], Path], lower_layers: list[Layer], image_cache: Path, workdir: Path
) -> None:
    images = [
        Image([*lower_layers, top_layer("first", "tar")], tags=["evalsi-test:first"]),
        Image([*lower_layers, top_layer("second", "tar")], tags=["evalsi-test:second"]),
    ]
    archive = writer(workdir / "images.tar", images)
    spec = workdir / "task.yaml"
    spec.write_text(
        "apiVersion: evals.si/v1alpha1\nkind: Task\nmetadata: {name: archived}\nspec:\n"
        "  description: d\n  image: 'images.tar#evalsi-test:second'\n"
        '  setup: {files: {expected-top: "second\\n"}}\n'
        f"  checker: {{command: '{CHECK}'}}\n"
    )
    task = load_task(spec)
    assert task.image == f"{archive}#evalsi-test:second" and task.image_dir == str(archive)
    seen, reward, env = run_episode_on(task)
    with env:
        assert reward == 1.0 and seen.startswith(MARKER + "second\n")
    with pytest.raises(ImageError, match=r"holds 2 images|several images match") as refused:
        unpack_image(archive)
    assert "evalsi-test" in str(refused.value)
    with pytest.raises(ImageError, match=r"no image is named 'other:1'.*evalsi-test"):
        unpack_image(archive, "other:1")
    first = unpack_image(archive, "docker.io/library/evalsi-test:first")
    assert (Path(first.rootfs) / "etc/top").read_text() == "first\n" and not first.cached


def tiny_image(text: str, platform: str | None = None, compression: str = "gzip") -> Image:
    layer = Layer(tar_of([directory("etc"), file("etc/which", text + "\n")]), compression)
    return Image([layer], platform=platform or host_platform())


def test_a_multi_platform_index_gives_this_machines_image_unless_told(image_cache: Path, workdir: Path) -> None:
    here = host_platform()
    other = "linux/arm64" if here != "linux/arm64" else "linux/amd64"
    images = [tiny_image("other", other), tiny_image("here", here)]
    layout = oci_layout(workdir / "multi", images, multi_platform=True)
    mine = unpack_image(layout)
    assert (Path(mine.rootfs) / "etc/which").read_text() == "here\n" and mine.platform == here
    theirs = unpack_image(layout, platform=other)
    assert (Path(theirs.rootfs) / "etc/which").read_text() == "other\n" and theirs.digest != mine.digest
    with pytest.raises(ImageError, match=rf"no image for linux/s390x; it has {'.*'.join(sorted([here, other]))}"):
        unpack_image(layout, platform="linux/s390x")
    single = oci_layout(workdir / "single", [tiny_image("other", other)])
    with pytest.raises(ImageError, match=rf"the image is {other}, not {here} \(set platform: {other}"):
        unpack_image(single)
    assert (Path(unpack_image(single, platform=other).rootfs) / "etc/which").read_text() == "other\n"


REFUSED = {
    "absolute path": ([file("/etc/passwd", "x")], "'/etc/passwd'", "an absolute path leaves the image's root"),
    "dot-dot": ([file("usr/../../outside", "x")], "'usr/../../outside'", "'..' path component"),
    "write through a link": ([file("escape/pwned", "x")], "'escape/pwned'", "'escape' is a symbolic link"),
    "hard link out": (
        [member("usr/passwd", tarfile.LNKTYPE, linkname="../etc/passwd")],
        "'usr/passwd'",
        "hard link to '../etc/passwd'",
    ),
    "symbolic link out": (
        [member("usr/up", tarfile.SYMTYPE, linkname="../../../etc")],
        "'usr/up'",
        "outside the image's root",
    ),
    "device node": (
        [member("usr/null", tarfile.CHRTYPE, devmajor=1, devminor=3)],
        "'usr/null'",
        "a device node",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_members_name_the_layer_and_member_and_leave_nothing(
    case: str, image_cache: Path, workdir: Path
) -> None:
    outside = workdir / "outside"
    outside.mkdir()
    members, name, why = REFUSED[case]
    lower = Layer(
        tar_of([directory("usr"), file("usr/a", "a"), member("escape", tarfile.SYMTYPE, linkname=str(outside))])
    )
    bad = Layer(tar_of(members), "gzip")
    layout = oci_layout(workdir / "bad", [Image([lower, bad])])
    with pytest.raises(ImageError) as refused:
        unpack_image(layout)
    message = str(refused.value)
    assert f"layer 2 ({digest(bad.blob)})" in message and f"member {name}" in message and why in message, message
    assert list(outside.iterdir()) == []
    assert [p.name for p in image_cache.iterdir() if not p.name.endswith(".lock")] == []  # no entry, no partial


def test_digests_are_verified(image_cache: Path, workdir: Path) -> None:
    image = tiny_image("checked")
    layout = oci_layout(workdir / "corrupt", [image])
    blob = layout / "blobs/sha256" / digest(image.layers[0].blob).split(":")[1]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(
        ImageError, match=r"layer 1 \(sha256:[0-9a-f]{64}\): (the blob does not match its digest|not a readable gzip)"
    ):
        unpack_image(layout)
    # A layer whose bytes are intact but whose uncompressed tar is not the one the config names.
    lying = Image([Layer(tar_of([file("etc/which", "swapped\n")]), "zstd")])
    lying.config = lambda: tiny_image("x").config()  # type: ignore[method-assign]
    with pytest.raises(ImageError, match=r"layer 1 .*: its uncompressed tar does not match its digest"):
        unpack_image(oci_layout(workdir / "lying", [lying]))
    index = json.loads((layout / "index.json").read_text())
    index["manifests"][0]["size"] += 1
    (layout / "index.json").write_text(json.dumps(index))
    with pytest.raises(ImageError, match=r"is \d+ bytes, not the \d+ its descriptor says"):
        unpack_image(layout)
    assert [p.name for p in image_cache.iterdir() if not p.name.endswith(".lock")] == []


def _unpack_when_told(layout: str, cache: str, go: str) -> tuple[bool, str, int]:
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.005)
    image = unpack_image(layout, cache_dir=cache)
    return image.cached, image.rootfs, sum(len(files) for _, _, files in os.walk(image.rootfs))


def test_two_processes_unpacking_at_once_unpack_once_and_see_a_whole_tree(image_cache: Path, workdir: Path) -> None:
    members = [directory("data"), *(file(f"data/{i:04}.txt", f"{i}\n" * 50) for i in range(1000))]
    layout = oci_layout(workdir / "many", [Image([Layer(tar_of(members), "gzip")])])
    go = workdir / "go"
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_unpack_when_told, str(layout), str(image_cache), str(go)) for _ in range(2)]
        time.sleep(0.5)
        go.touch()
        results = [f.result(timeout=300) for f in futures]
    assert sorted(cached for cached, _, _ in results) == [False, True]
    assert {rootfs for _, rootfs, _ in results} == {results[0][1]}
    assert [count for _, _, count in results] == [1000, 1000]
    assert len([p for p in image_cache.iterdir() if not p.name.startswith(".")]) == 1


def test_a_registry_reference_or_a_compressed_archive_says_how_to_save_it(workdir: Path) -> None:
    with pytest.raises(ValueError, match=r"skopeo copy docker://python:3.12 oci:images/IMAGE:TAG"):
        small_task(image="python:3.12")
    with pytest.raises(ValueError, match=r"looks like an image in a registry"):
        small_task(image="ghcr.io/org/app@sha256:" + "0" * 64)
    with pytest.raises(ValueError, match=r"not a platform"):
        small_task(image="images/app.tar", platform="arm64")
    packed = workdir / "image.tar.gz"
    packed.write_bytes(b"\x1f\x8b" + b"\0" * 64)
    with pytest.raises(ImageError, match=r"compressed: decompress it first"):
        unpack_image(packed)
