"""A hostile tenant's evaluator uploads and builds against a real server process and real sandboxes.

The tenant holds ``evaluators.write`` and ``resource.runs_code`` for its project, and every payload is data: an
archive built here (links, duplicate members, header records, requirements lines, bulky files and wheels). The
server must write nothing through a link, build at the operator's floor rung, keep each build within its byte
quotas with nothing left behind, give pip only requirements it checked, and read no header record whole.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.evaluation import CAPITALS, NORMALISED_TEST, get, upload, upload_raw, wait_built, write_wheel
from tests.server.harness import ServerProcess, make_token, post_http, write_config
from tests.server.test_evaluator_index import Index

pytestmark = [pytest.mark.timeout(600), pytest.mark.sandbox]

PERMISSIONS = ["evaluations.run", "resource.runs_code", "evaluators.write"]
MAX_BUILD = 64 << 20
MAX_EVALUATOR = 40 << 20
ENTRY = "test_ok.py::test_capitals"


def member(name: str, data: bytes | None = None, link: str | None = None) -> tuple[tarfile.TarInfo, bytes | None]:
    """A tar member: a file holding ``data``, or a symbolic link to ``link``."""
    info = tarfile.TarInfo(name)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        return info, None
    info.size, info.mode = len(data or b""), 0o644
    return info, data or b""


def archive(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def send(server: ServerProcess, token: str, evaluator_id: str, data: bytes, entry: str = ENTRY) -> httpx.Response:
    body = {"evaluatorId": evaluator_id, "entry": entry, "archive": base64.b64encode(data).decode()}
    return upload_raw(server, token, body)


def write_bulky_wheel(directory: Path, name: str, payload: int, stored: bool = False) -> Path:
    """A wheel ``NAME-1.0`` whose package holds ``payload`` zero bytes (deflated to almost nothing unless stored)."""
    dist = f"{name}-1.0.dist-info"
    small = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record: list[str] = []
    path = directory / f"{name}-1.0-py3-none-any.whl"
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w", compression=method) as wheel:
        for file, data in small.items():
            wheel.writestr(file, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{file},sha256={digest},{len(data)}")
        hashed, chunk = hashlib.sha256(), b"\0" * (1 << 20)
        with wheel.open(f"{name}/zeros.bin", "w", force_zip64=True) as out:
            for _ in range(payload >> 20):
                out.write(chunk)
                hashed.update(chunk)
        digest = base64.urlsafe_b64encode(hashed.digest()).rstrip(b"=").decode()
        record.append(f"{name}/zeros.bin,sha256={digest},{payload}")
        record.append(f"{dist}/RECORD,,")
        wheel.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return path


def publish(root: Path, wheels: list[Path]) -> None:
    """A PEP 503 ``simple`` index under ``root`` listing each wheel (with its sha256) under its project."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: list[str] = []
    for wheel in wheels:
        shutil.move(str(wheel), files / wheel.name)
        project = wheel.name.split("-")[0].replace("_", "-")
        digest = hashlib.sha256((files / wheel.name).read_bytes()).hexdigest()
        page = root / "simple" / project
        page.mkdir(parents=True)
        link = f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>'
        (page / "index.html").write_text(f"<!doctype html><html><body>{link}</body></html>\n")
        projects.append(project)
    listing = "".join(f'<a href="{p}/">{p}</a>' for p in projects)
    (root / "simple" / "index.html").write_text(f"<html><body>{listing}</body></html>")


def storage_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="evalsi-hostile-uploads-"))  # under /tmp: sandbox users must reach it
    path.chmod(0o755)
    return path


@dataclass
class Server:
    process: ServerProcess
    token: str
    storage: Path
    index: Index | None = None

    def evaluator_dir(self, evaluator_id: str) -> Path | None:
        found = list((self.storage / "evaluators").glob(f"*/{evaluator_id}"))
        return found[0] if found else None


@pytest.fixture(scope="module")
def quota(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A bubblewrap-floor server with an index, small byte quotas and the bulky wheels a tenant might publish."""
    directory = tmp_path_factory.mktemp("quota")
    storage = storage_dir()
    staging = directory / "staging"
    staging.mkdir()
    wheels = [
        write_wheel(staging),
        write_bulky_wheel(staging, "bloat", 96 << 20),  # a few hundred KiB to fetch, 96 MiB once installed
        write_bulky_wheel(staging, "chunky", 24 << 20),  # fits the build, not what an evaluator may keep
        write_bulky_wheel(staging, "huge", 80 << 20, stored=True),  # 80 MiB to fetch
    ]
    publish(directory / "index", wheels)
    with Index(directory / "index") as index:
        database = f"sqlite:///{directory / 'server.db'}"
        evaluators = {
            "storage_dir": str(storage / "evaluators"),
            "index_url": index.url,
            "max_upload_bytes": 1 << 20,
            "max_unpacked_bytes": 100 << 20,
            "max_build_bytes": MAX_BUILD,
            "max_evaluator_bytes": MAX_EVALUATOR,
        }
        config = write_config(directory, {"database": {"url": database}, "evaluators": evaluators})
        token = make_token(database, "mallory", PERMISSIONS)
        with ServerProcess(config) as process:
            yield Server(process, token, storage, index)
    shutil.rmtree(storage, ignore_errors=True)


@pytest.fixture(scope="module")
def gvisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose operator set a gVisor floor, with a wheel directory and no index."""
    directory = tmp_path_factory.mktemp("gvisor")
    storage = storage_dir()
    wheels = storage / "wheelhouse"
    wheels.mkdir(mode=0o755)
    write_wheel(wheels).chmod(0o644)
    database = f"sqlite:///{directory / 'server.db'}"
    spec = {
        "database": {"url": database},
        "evaluators": {"storage_dir": str(storage / "evaluators"), "find_links": str(wheels)},
        "sandbox": {"min_isolation": "gvisor"},
    }
    config = write_config(directory, spec)
    token = make_token(database, "mallory", PERMISSIONS)
    with ServerProcess(config) as process:
        yield Server(process, token, storage)
    shutil.rmtree(storage, ignore_errors=True)


# ---- links: nothing is ever written through one --------------------------------------------------------------

PTH = b"import os; open('/evaluator/ran-during-the-build', 'w').write(os.uname().release)\n"


def link_payloads() -> dict[str, list[tuple[tarfile.TarInfo, bytes | None]]]:
    """Archives whose links passed a lexical check; ``chain`` resolves ``b`` to the evaluator's root."""
    ok = member("test_ok.py", CAPITALS.encode())
    return {
        "chain": [
            ok,
            member("a", link="."),
            member("b", link="a/.."),
            member("b/venv/lib/python3.11/site-packages/zz.pth", PTH),
            member("requirements.txt", b"capital-words==1.0\n"),
        ],
        "file-link": [ok, member("helper.py", link="test_ok.py")],
        "directory-link": [ok, member("pkg", link="."), member("pkg/planted.py", b"x = 1\n")],
    }


@pytest.mark.parametrize("name", list(link_payloads()))
def test_links_are_refused_at_upload_so_nothing_is_written_through_one(gvisor: Server, name: str) -> None:
    answer = send(gvisor.process, gvisor.token, f"link-{name}", archive(link_payloads()[name]))
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert "is a symbolic link" in message and "files and directories only" in message, message
    assert get(gvisor.process, gvisor.token, f"evaluators/link-{name}").status_code == 404
    assert gvisor.evaluator_dir(f"link-{name}") is None
    assert not list(gvisor.storage.rglob("ran-during-the-build"))


def test_on_a_gvisor_floor_every_build_step_runs_under_gvisor(gvisor: Server) -> None:
    files = {"test_words.py": NORMALISED_TEST, "requirements.txt": "capital-words==1.0\n"}
    assert upload(gvisor.process, gvisor.token, "words", files, "test_words.py::test_normalised").status_code == 200
    evaluator = wait_built(gvisor.process, gvisor.token, "words", timeout=400)
    log = get(gvisor.process, gvisor.token, "evaluators/words/log").json()["log"]
    assert evaluator["state"] == "ACTIVE", log
    steps = [line for line in log.splitlines() if line.startswith("# ")]
    titles = ["unpack the archive", "create the environment", "install requirements.txt", "export", "check the entry"]
    assert [line[2:].split("  [")[0] for line in steps] == titles, log
    assert all("[gvisor;" in line for line in steps), steps
    spec = {"components": [{"ref": "evaluator/words", "name": "c"}]}
    rollouts = [{"prompt": "Capital of the USA?", "completion": "washington, d.c.", "answer": "Washington DC"}]
    answer = post_http(gvisor.process, gvisor.token, spec, rollouts)
    assert [r["total"] for r in answer.json()["results"]] == [1.0], answer.text


# ---- requirements: always checked, one file, pip given the server's copy -------------------------------------

BACKEND = b"""
import os
def _ran(*args, **kwargs):
    open("/evaluator/backend-ran", "w").write("the tenant's build backend ran")
    raise SystemExit(1)
build_wheel = build_sdist = get_requires_for_build_wheel = prepare_metadata_for_build_wheel = _ran
"""
PYPROJECT = b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("file:///evaluator/src/pkg", "line 1: not a requirement"),
        ("./pkg", "line 1: not a requirement"),
        ("pkg @ file:///evaluator/src/pkg", "line 1: direct references"),
        ("-e /evaluator/src/pkg", "line 1: options such as '-e'"),
        ("pkg-1.0.tar.gz", "line 1: 'pkg-1.0.tar.gz' names a file"),
    ],
)
def test_requirements_are_checked_without_an_index_so_no_tenant_project_is_built(
    gvisor: Server, line: str, needle: str
) -> None:
    evaluator_id = "local-" + hashlib.sha256(line.encode()).hexdigest()[:8]
    payload = [
        member("test_ok.py", CAPITALS.encode()),
        member("requirements.txt", f"{line}\n".encode()),
        member("pkg/pyproject.toml", PYPROJECT),
        member("pkg/backend.py", BACKEND),
    ]
    answer = send(gvisor.process, gvisor.token, evaluator_id, archive(payload))
    assert answer.status_code == 400, answer.text
    assert needle in answer.json()["error"]["message"], answer.text
    assert get(gvisor.process, gvisor.token, f"evaluators/{evaluator_id}").status_code == 404
    assert not list(gvisor.storage.rglob("backend-ran"))


@pytest.mark.parametrize("second", ["requirements.txt", "./requirements.txt"])
def test_a_second_requirements_member_is_refused(quota: Server, second: str) -> None:
    evaluator_id = "twice-" + hashlib.sha256(second.encode()).hexdigest()[:8]
    payload = [
        member("test_ok.py", CAPITALS.encode()),
        member("requirements.txt", b"capital-words==1.0\n"),  # what a check of the first member sees
        member("pkg/pyproject.toml", PYPROJECT),
        member("pkg/backend.py", BACKEND),
        member(second, b"file:///evaluator/src/pkg\n"),  # what pip would install, reading the last
    ]
    answer = send(quota.process, quota.token, evaluator_id, archive(payload))
    assert answer.status_code == 400, answer.text
    assert f"{second!r} appears twice" in answer.json()["error"]["message"], answer.text
    assert get(quota.process, quota.token, f"evaluators/{evaluator_id}").status_code == 404


def test_pip_is_given_the_servers_copy_of_the_checked_requirements(quota: Server) -> None:
    text = "\ufeff# the normaliser, saved with a byte order mark\r\ncapital-words == 1.0   # pinned\r\n\r\n"
    files: dict[str, Any] = {"test_words.py": NORMALISED_TEST, "requirements.txt": text.encode("utf-8")}
    assert upload(quota.process, quota.token, "copy", files, "test_words.py::test_normalised").status_code == 200
    evaluator = wait_built(quota.process, quota.token, "copy", timeout=400)
    log = get(quota.process, quota.token, "evaluators/copy/log").json()["log"]
    assert evaluator["state"] == "ACTIVE", log
    directory = quota.evaluator_dir("copy")
    assert directory is not None
    assert (directory / "upload" / "requirements.txt").read_text() == "capital-words==1.0\n"
    assert "-r /upload/requirements.txt" in log and "/evaluator/src/requirements.txt" not in log


# ---- byte quotas: checked while the build writes, nothing left behind -----------------------------------------


class PeakSize:
    """The largest size an evaluator's directory in storage reached, sampled while a build runs."""

    def __init__(self, server: Server, evaluator_id: str) -> None:
        self.server, self.evaluator_id, self.peak = server, evaluator_id, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            directory = self.server.evaluator_dir(self.evaluator_id)
            if directory is not None:
                self.peak = max(self.peak, tree_bytes(directory))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.peak


def tree_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


@pytest.mark.parametrize(
    ("case", "needle", "ceiling"),
    [
        ("unpack", f"unpack the archive wrote more than evaluators.max_build_bytes={MAX_BUILD}", MAX_EVALUATOR),
        ("install", f"install requirements.txt wrote more than evaluators.max_build_bytes={MAX_BUILD}", MAX_EVALUATOR),
        ("export", f"the evaluator's files pass evaluators.max_evaluator_bytes={MAX_EVALUATOR}", MAX_EVALUATOR),
        ("download", f"wheels take more than evaluators.max_build_bytes={MAX_BUILD}", MAX_BUILD + (1 << 20)),
    ],
)
def test_a_build_that_writes_past_its_quota_fails_and_keeps_only_its_archive(
    quota: Server, case: str, needle: str, ceiling: int
) -> None:
    files: dict[str, Any] = {"test_ok.py": CAPITALS}
    if case == "unpack":
        files["zeros.bin"] = b"\0" * (80 << 20)  # 80 KiB compressed; within max_unpacked_bytes
    else:
        files["requirements.txt"] = {"install": "bloat==1.0\n", "export": "chunky==1.0\n", "download": "huge==1.0\n"}[
            case
        ]
    evaluator_id = f"quota-{case}"
    peak = PeakSize(quota, evaluator_id)
    try:
        assert upload(quota.process, quota.token, evaluator_id, files, ENTRY).status_code == 200
        evaluator = wait_built(quota.process, quota.token, evaluator_id, timeout=400)
    finally:
        largest = peak.stop()
    log = get(quota.process, quota.token, f"evaluators/{evaluator_id}/log").json()["log"]
    assert evaluator["state"] == "BUILD_FAILED", log
    assert needle in evaluator["message"], evaluator
    assert "# stopped:" in log and needle.rsplit("=", 1)[0].split()[-1] in log, log
    directory = quota.evaluator_dir(evaluator_id)
    assert directory is not None
    kept = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir())
    assert kept in (["upload/source.tar.gz"], ["upload/requirements.txt", "upload/source.tar.gz"]), kept
    assert sorted(p.name for p in directory.iterdir()) == ["upload"]
    assert largest <= ceiling, f"the evaluator's directory reached {largest >> 20} MiB while building"


# ---- header records: refused before they are read ------------------------------------------------------------


def header_bomb(kind: str, size: int) -> bytes:
    """A .tar.gz whose first header record (a GNU long name or link name, or PAX data) is ``size`` bytes."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as out:
        header = tarfile.TarInfo("././@LongLink" if kind != "pax" else "././@PaxHeader")
        header.type = {"longname": tarfile.GNUTYPE_LONGNAME, "longlink": tarfile.GNUTYPE_LONGLINK}.get(
            kind, tarfile.XHDTYPE
        )
        header.size = size
        out.write(header.tobuf(tarfile.GNU_FORMAT))
        filler = size
        if kind == "pax":
            prefix = f"{size} path=".encode()
            out.write(prefix)
            filler = size - len(prefix) - 1
        chunk = b"a" * (1 << 20)
        while filler > 0:
            out.write(chunk[: min(filler, len(chunk))])
            filler -= min(filler, len(chunk))
        if kind == "pax":
            out.write(b"\n")
        out.write(b"\0" * (-size % 512))
        body = CAPITALS.encode()
        entry = tarfile.TarInfo("test_ok.py")
        if kind == "longlink":
            entry.type, entry.linkname = tarfile.SYMTYPE, "x"
        else:
            entry.size = len(body)
        out.write(entry.tobuf(tarfile.GNU_FORMAT))
        if kind != "longlink":
            out.write(body + b"\0" * (-len(body) % 512))
        out.write(b"\0" * 1024)
    return buffer.getvalue()


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("kind", ["longname", "longlink", "pax"])
def test_an_oversized_header_record_is_refused_before_it_costs_memory(quota: Server, kind: str) -> None:
    bomb = header_bomb(kind, 192 << 20)
    assert len(bomb) < 1 << 20  # the upload is small; the record it declares is not
    warm = send(quota.process, quota.token, f"warm-{kind}", b"not a tarball")
    assert warm.status_code == 400, warm.text
    before = peak_rss(quota.process.process.pid)
    answer = send(quota.process, quota.token, f"bomb-{kind}", bomb)
    growth = peak_rss(quota.process.process.pid) - before
    assert growth < 48 << 20, f"the server's peak memory grew by {growth >> 20} MiB reading one upload"
    assert answer.status_code == 400, answer.text
    assert "header record" in answer.json()["error"]["message"], answer.text
