"""Uploading evaluators: builds that fail with their log, requirements from the operator's wheels, hostile archives
refused before anything is unpacked, and datasets checked row by row; against a real server and sandbox.
"""

from __future__ import annotations

import base64
import io
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.server.evaluation import (
    CAPITALS,
    NORMALISED_TEST,
    TERMINAL,
    chat,
    create_job,
    get,
    headers,
    jsonl,
    post,
    targz,
    upload,
    upload_raw,
    wait_built,
    wait_state,
    write_wheel,
)
from tests.server.harness import ServerProcess, make_token, post_http, write_config

pytestmark = [pytest.mark.timeout(300), pytest.mark.sandbox]


class Env:
    def __init__(self, server: ServerProcess, token: str, other: str) -> None:
        self.server, self.token, self.other = server, token, other


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("builds")
    storage = Path(tempfile.mkdtemp(prefix="evalsi-builds-test-"))  # under /tmp: sandbox users must reach it
    storage.chmod(0o755)
    wheels = storage / "wheelhouse"
    wheels.mkdir()
    write_wheel(wheels)
    for path in (wheels, *wheels.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    database = f"sqlite:///{directory / 'server.db'}"
    spec = {
        "database": {"url": database},
        "evaluators": {
            "storage_dir": str(storage / "evaluators"),
            "find_links": str(wheels),
            "max_upload_bytes": 256 << 10,
            "max_unpacked_bytes": 1 << 20,
            "max_files": 20,
        },
        "datasets": {"max_bytes": 64 << 10, "max_rows": 5},
    }
    config = write_config(directory, spec)
    permissions = ["evaluations.run", "resource.runs_code", "evaluators.write"]
    token = make_token(database, "team-a", permissions)
    other = make_token(database, "team-b", permissions)
    with ServerProcess(config) as server:
        yield Env(server, token, other)
    shutil.rmtree(storage, ignore_errors=True)


def _failed(env: Env, evaluator_id: str) -> tuple[dict[str, str], str]:
    evaluator = wait_built(env.server, env.token, evaluator_id)
    assert evaluator["state"] == "BUILD_FAILED", evaluator
    log = get(env.server, env.token, f"evaluators/{evaluator_id}/log").json()["log"]
    assert log, evaluator  # a build that ran has a log
    return evaluator, log


def test_an_evaluator_that_cannot_be_imported_ends_build_failed_with_its_log(env: Env) -> None:
    files = {"test_broken.py": "import module_that_is_not_installed_anywhere\n"}
    assert upload(env.server, env.token, "broken", files, "test_broken.py::test_x").status_code == 200
    evaluator, log = _failed(env, "broken")
    assert "module_that_is_not_installed_anywhere" in evaluator["message"]
    assert "ModuleNotFoundError" in log and "check the entry" in log


def test_an_entry_that_is_not_an_evaluation_test_ends_build_failed_naming_the_tests_there(env: Env) -> None:
    files = {"checks/test_mixed.py": CAPITALS + "\n\ndef plain(row):\n    return row\n"}
    assert upload(env.server, env.token, "plain", files, "checks/test_mixed.py::plain").status_code == 200
    evaluator, _ = _failed(env, "plain")
    assert "no @evaluation_test named 'plain'" in evaluator["message"]
    assert "test_capitals" in evaluator["message"]


def test_requirements_install_from_the_operators_wheels_only(env: Env) -> None:
    files = {"test_words.py": NORMALISED_TEST, "requirements.txt": "capital-words==1.0\n"}
    assert upload(env.server, env.token, "words", files, "test_words.py::test_normalised").status_code == 200
    evaluator = wait_built(env.server, env.token, "words", timeout=240)
    assert evaluator["state"] == "ACTIVE", get(env.server, env.token, "evaluators/words/log").text
    spec = {"components": [{"ref": "evaluator/words", "name": "c"}]}
    rollouts = [
        {"prompt": "Capital of the USA?", "completion": "washington, d.c.", "answer": "Washington DC"},
        {"prompt": "Capital of Chile?", "completion": "Lima", "answer": "Santiago"},
    ]
    answer = post_http(env.server, env.token, spec, rollouts)
    assert [r["total"] for r in answer.json()["results"]] == [1.0, 0.0], answer.text
    missing = {"test_words.py": NORMALISED_TEST, "requirements.txt": "requests==2.32.3\n"}
    assert upload(env.server, env.token, "needs-index", missing, "test_words.py::test_normalised").is_success
    evaluator, log = _failed(env, "needs-index")
    assert evaluator["message"].startswith("install requirements.txt failed")
    assert "requests" in log and "--no-index" in log


@pytest.mark.parametrize(
    ("name", "member", "needle"),
    [
        ("absolute", tarfile.TarInfo("/etc/cron.d/evil"), "absolute path"),
        ("climbing", tarfile.TarInfo("ok/../../outside.py"), "climbs out"),
        ("link-out", tarfile.TarInfo("shadow"), "is a symbolic link"),
        ("link-up", tarfile.TarInfo("sub/up"), "is a symbolic link"),
        ("hard-link", tarfile.TarInfo("hard"), "hard link"),
        ("device", tarfile.TarInfo("dev/sda"), "special file"),
        ("fifo", tarfile.TarInfo("pipe"), "special file"),
    ],
)
def test_a_hostile_archive_is_refused_naming_the_member(
    env: Env, name: str, member: tarfile.TarInfo, needle: str
) -> None:
    if name == "link-out":
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/shadow"
    elif name == "link-up":
        member.type, member.linkname = tarfile.SYMTYPE, "../../etc"
    elif name == "hard-link":
        member.type, member.linkname = tarfile.LNKTYPE, "test_ok.py"
    elif name == "device":
        member.type, member.devmajor, member.devminor = tarfile.CHRTYPE, 8, 0
    elif name == "fifo":
        member.type = tarfile.FIFOTYPE
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        ok = tarfile.TarInfo("test_ok.py")
        ok.size = len(CAPITALS)
        archive.addfile(ok, io.BytesIO(CAPITALS.encode()))
        archive.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    body = {"evaluatorId": f"hostile-{name}", "entry": "test_ok.py::test_capitals",
            "archive": base64.b64encode(buffer.getvalue()).decode()}  # fmt: skip
    answer = upload_raw(env.server, env.token, body)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert needle in message and member.name.lstrip("/") in message
    assert get(env.server, env.token, f"evaluators/hostile-{name}").status_code == 404  # nothing was stored


def test_archives_past_the_operators_limits_are_refused(env: Env) -> None:
    entry = "test_ok.py::test_capitals"
    many = {f"data/{i}.txt": "x" for i in range(25)} | {"test_ok.py": CAPITALS}
    answer = upload(env.server, env.token, "many", many, entry)
    assert answer.status_code == 400 and "evaluators.max_files=20" in answer.text
    bomb = {"test_ok.py": CAPITALS, "zeros.bin": b"\0" * (2 << 20)}  # compresses to a few KiB
    answer = upload(env.server, env.token, "bomb", bomb, entry)
    assert answer.status_code == 400 and "evaluators.max_unpacked_bytes=1048576" in answer.text
    big = {"test_ok.py": CAPITALS, "noise.bin": os.urandom(300 << 10)}  # incompressible
    answer = upload(env.server, env.token, "big", big, entry)
    assert answer.status_code == 400 and "evaluators.max_upload_bytes=262144" in answer.text
    garbage = {"evaluatorId": "garbage", "entry": entry, "archive": base64.b64encode(b"not a tarball").decode()}
    answer = upload_raw(env.server, env.token, garbage)
    assert answer.status_code == 400 and "not a readable .tar.gz" in answer.text


def test_uploads_with_a_bad_id_or_entry_or_a_taken_id_are_refused(env: Env) -> None:
    files = {"test_ok.py": CAPITALS}
    assert upload(env.server, env.token, "../x", files, "test_ok.py::test_capitals").status_code == 400
    outside = upload(env.server, env.token, "entry-out", files, "../test_ok.py::test_capitals")
    assert outside.status_code == 400 and "entry" in outside.json()["error"]["message"]
    absent = upload(env.server, env.token, "entry-absent", files, "test_other.py::test_capitals")
    assert absent.status_code == 400 and "test_ok.py" in absent.json()["error"]["message"]
    assert upload(env.server, env.token, "taken", files, "test_ok.py::test_capitals").status_code == 200
    again = upload(env.server, env.token, "taken", files, "test_ok.py::test_capitals")
    assert again.status_code == 422 and "already exists" in again.text
    assert upload(env.server, env.other, "taken", files, "test_ok.py::test_capitals").status_code == 200


def test_a_dataset_is_checked_row_by_row_naming_the_line(env: Env) -> None:
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "ground_truth": 1}
    cases = [
        (jsonl([good]) + "{not json\n", "line 2: not valid JSON"),
        (jsonl([good, good, {"messages": "hello"}]), "line 3: `messages` must be a non-empty list"),
        (jsonl([{"messages": [{"role": "user", "content": "q"}, {"content": "a"}]}]), "line 1: messages[1].role"),
        (jsonl([good]) + "[1, 2]\n", "line 2: a row is a JSON object"),
        (jsonl([good] * 6), "datasets.max_rows=5"),
        ("x" * (65 << 10), "datasets.max_bytes=65536"),
        ("\n\n", "no rows"),
    ]
    for text, needle in cases:
        answer = post(env.server, env.token, "datasets", {"datasetId": "checked", "jsonl": text})
        assert answer.status_code == 400 and needle in answer.json()["error"]["message"], (needle, answer.text)
    created = post(env.server, env.token, "datasets", {"datasetId": "checked", "jsonl": jsonl([good, good])})
    assert created.status_code == 200 and created.json()["rowCount"] == 2
    assert get(env.server, env.token, "datasets/checked").json()["rowCount"] == 2
    deleted = httpx.delete(env.server.http + "/v1alpha1/datasets/checked", headers=headers(env.token), timeout=30)
    assert deleted.status_code == 200
    assert get(env.server, env.token, "datasets/checked").status_code == 404


def test_the_archives_these_tests_upload_are_plain_tar_gz() -> None:
    data = targz({"a/b.py": "x = 1\n"})
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        assert archive.getnames() == ["a/b.py"]


def test_the_evaluators_own_code_first_runs_with_its_directory_read_only(env: Env) -> None:
    writer = "open('/evaluator/src/planted.py', 'w').write('x = 1')\n" + CAPITALS
    assert upload(env.server, env.token, "writer", {"test_w.py": writer}, "test_w.py::test_capitals").is_success
    evaluator, log = _failed(env, "writer")
    assert "Read-only file system" in log and "OSError" in evaluator["message"]


PEER_SHAPED = """
from evalsi.testing import EvaluateResult, EvaluationRow, MetricResult, SingleTurnRolloutProcessor, evaluation_test


@evaluation_test(
    input_dataset=["capitals.jsonl"],
    completion_params=[{"model": "fireworks_ai/accounts/fireworks/models/gpt-oss-120b", "temperature": 0.0}],
    rollout_processor=SingleTurnRolloutProcessor(),
    passed_threshold=0.8,
    mode="pointwise",
)
def test_capital_cities(row: EvaluationRow) -> EvaluationRow:
    expected = row.ground_truth
    answer = row.messages[-1].content or ""
    named = expected.lower() in answer.lower()
    row.evaluation_result = EvaluateResult(
        score=1.0 if named else 0.0,
        reason="names the capital" if named else "another city",
        metrics={"named": MetricResult(score=float(named), reason="the reply names it")},
    )
    return row
"""


def _cli_env(env: Env) -> dict[str, str]:
    return {"EVALSI_SERVER": env.server.http, "EVALSI_TOKEN": env.token}


def test_upload_finds_the_only_evaluation_test_and_its_eval_protocol_shapes_score_on_the_server(
    env: Env, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from evalsi.cli.main import app

    project = tmp_path / "peer"
    project.mkdir()
    (project / "test_capital.py").write_text(PEER_SHAPED)
    (project / "capitals.jsonl").write_text(jsonl([chat("What is the capital of France?", None, "Paris")]))
    (project / "helpers.py").write_text("def normalise(text):\n    return text.lower()\n")
    uploaded = CliRunner().invoke(app, ["evaluators", "upload", str(project)], env=_cli_env(env))
    assert uploaded.exit_code == 0, uploaded.output
    assert "evaluation test: test_capital.py::test_capital_cities" in uploaded.output
    assert "evaluator id: capital-cities" in uploaded.output and '"state": "ACTIVE"' in uploaded.stdout
    spec = {"components": [{"ref": "evaluator/capital-cities", "name": "c"}]}
    rollouts = [
        {"prompt": "What is the capital of France?", "completion": "It is Paris.", "answer": "Paris"},
        {"prompt": "What is the capital of Japan?", "completion": "Osaka", "answer": "Tokyo"},
    ]
    answer = post_http(env.server, env.token, spec, rollouts)
    results = answer.json()["results"]
    assert [r["total"] for r in results] == [1.0, 0.0], answer.text
    assert results[1]["components"]["c"]["reason"] == "another city"
    rows = [chat("Capital of Italy?", "Rome.", "Rome"), chat("Capital of Peru?", "Cusco", "Lima")]
    assert post(env.server, env.token, "datasets", {"datasetId": "peer-rows", "jsonl": jsonl(rows)}).is_success
    created = create_job(env.server, env.token, "peer-job", "capital-cities", "peer-rows", "peer-out")
    assert created.is_success, created.text
    job = wait_state(env.server, env.token, "peer-job", TERMINAL)
    assert job["state"] == "COMPLETED", job
    assert job["metrics"]["score"] == pytest.approx(0.5) and job["metrics"]["named"] == pytest.approx(0.5)


def test_upload_on_a_terminal_asks_which_of_several_evaluation_tests(env: Env, tmp_path: Path) -> None:
    import select
    import sys

    project = tmp_path / "several"
    project.mkdir()
    (project / "test_capitals.py").write_text(CAPITALS)
    (project / "test_peer.py").write_text(PEER_SHAPED)
    primary, secondary = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "evalsi", "evaluators", "upload", str(project), "--id", "picked", "--no-wait"],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env={**os.environ, **_cli_env(env), "COLUMNS": "200"},
        close_fds=True,
    )
    os.close(secondary)
    seen = b""

    def read_until(marker: bytes | None, timeout: float = 120) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while (marker is None or marker not in seen) and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the process ended and closed the terminal
                return
            if not chunk:
                return
            seen += chunk

    try:
        read_until(b"Which one (1-2)")
        assert b"1. test_capitals.py::test_capitals" in seen and b"2. test_peer.py::test_capital_cities" in seen
        os.write(primary, b"3\n")  # out of range: asked again
        read_until(b"choose a number from 1 to 2")
        os.write(primary, b"2\n")
        read_until(None)
        assert process.wait(timeout=120) == 0, seen.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
        os.close(primary)
    evaluator = wait_built(env.server, env.token, "picked")
    assert evaluator["entry"] == "test_peer.py::test_capital_cities" and evaluator["state"] == "ACTIVE", evaluator


def test_a_storage_directory_the_sandbox_cannot_reach_refuses_uploads_without_showing_paths(tmp_path: Path) -> None:
    hidden = tmp_path / "private"  # pytest's temporary directories are 0700: sandbox users cannot pass them
    database = f"sqlite:///{tmp_path / 'server.db'}"
    config = write_config(tmp_path, {"database": {"url": database}, "evaluators": {"storage_dir": str(hidden)}})
    token = make_token(database, "p", ["evaluations.run", "resource.runs_code", "evaluators.write"])
    with ServerProcess(config) as server:
        assert not hidden.exists()  # nothing is written before the first upload
        answer = upload(server, token, "e", {"test_ok.py": CAPITALS}, "test_ok.py::test_capitals")
        assert answer.status_code == 422 and "evaluators.storage_dir is unusable" in answer.text
        assert str(tmp_path) not in answer.text
        assert get(server, token, "evaluators/e").status_code == 404


def _sleepers() -> list[str]:
    for _ in range(100):  # the sandbox starts a moment after the job is RUNNING
        listing = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout
        found = [line for line in listing.splitlines() if "evalsi_runner.py serve test_sleepy.py" in line]
        if found:
            return found
        time.sleep(0.05)
    return []


def _gone_within(seconds: float) -> bool:
    """Whether the job's sandbox is gone within ``seconds`` (killed at shutdown; a busy machine reaps it late)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        listing = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout
        if not any("evalsi_runner.py serve test_sleepy.py" in line for line in listing.splitlines()):
            return True
        time.sleep(0.1)
    return False


def test_a_job_running_when_the_server_stops_is_failed_on_restart_and_its_sandbox_is_gone(tmp_path: Path) -> None:
    from tests.server.evaluation import SLOW, chat, create_job, wait_state

    storage = Path(tempfile.mkdtemp(prefix="evalsi-restart-test-"))
    storage.chmod(0o755)
    database = f"sqlite:///{tmp_path / 'server.db'}"
    spec = {"database": {"url": database}, "evaluators": {"storage_dir": str(storage)}, "drain_timeout": 10}
    config = write_config(tmp_path, spec)
    token = make_token(database, "p", ["evaluations.run", "resource.runs_code", "evaluators.write"])
    try:
        with ServerProcess(config) as server:
            assert upload(server, token, "slow", {"test_sleepy.py": SLOW}, "test_sleepy.py::test_slow").is_success
            built = wait_built(server, token, "slow")
            assert built["state"] == "ACTIVE", built
            rows = jsonl([chat("q", "a", "t")])
            assert post(server, token, "datasets", {"datasetId": "rows", "jsonl": rows}).is_success
            assert create_job(server, token, "interrupted", "slow", "rows", "out").is_success
            assert wait_state(server, token, "interrupted", ("RUNNING",))["state"] == "RUNNING"
            assert _sleepers(), "the job's sandbox never started"
            assert server.terminate(30) == 0  # the job's sandbox is killed; reward calls (none) drain
        assert _gone_within(60.0), "the stopped server's job sandbox outlived it"
        with ServerProcess(config) as server:
            job = get(server, token, "evaluationJobs/interrupted").json()
            assert job["state"] == "FAILED" and "server stopped" in job["message"]
            assert get(server, token, "evaluators/slow").json()["state"] == "ACTIVE"
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def test_on_a_gvisor_floor_the_entry_check_and_the_jobs_scoring_run_under_gvisor(tmp_path: Path) -> None:
    from tests.server.evaluation import TERMINAL, chat, create_job, wait_state

    storage = Path(tempfile.mkdtemp(prefix="evalsi-gvisor-test-"))
    storage.chmod(0o755)
    database = f"sqlite:///{tmp_path / 'server.db'}"
    spec = {
        "database": {"url": database},
        "evaluators": {"storage_dir": str(storage)},
        "sandbox": {"min_isolation": "gvisor"},
    }
    config = write_config(tmp_path, spec)
    token = make_token(database, "p", ["evaluations.run", "resource.runs_code", "evaluators.write"])
    kernel = """
import platform

from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test()
def test_kernel(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0
    row.reason = platform.release()  # gVisor reports its own kernel, not the host's
    return row
"""
    try:
        with ServerProcess(config) as server:
            assert upload(server, token, "kernel", {"test_kernel.py": kernel}, "test_kernel.py::test_kernel").is_success
            built = wait_built(server, token, "kernel")
            assert built["state"] == "ACTIVE", get(server, token, "evaluators/kernel/log").text
            assert post(server, token, "datasets", {"datasetId": "rows", "jsonl": jsonl([chat("q", "a", "t")])})
            assert create_job(server, token, "g", "kernel", "rows", "out").is_success
            assert wait_state(server, token, "g", TERMINAL)["state"] == "COMPLETED"
            out = get(server, token, "datasets/out?rows=true").json()["jsonl"]
            reason = orjson.loads(out.splitlines()[0])["evaluation_result"]["reason"]
            assert reason != platform.release(), "the scoring ran on the host's kernel, not under gVisor"
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def test_the_sandboxed_unpacker_refuses_what_the_server_refuses_should_an_archive_get_past_it() -> None:
    from evalsi.sandbox import Mount, Workspace
    from evalsi.server.evaluation.evaluators._sandbox import UNPACK, _python

    folder = Path(tempfile.mkdtemp(prefix="evalsi-unpack-test-"))
    folder.chmod(0o755)
    here, up = tarfile.TarInfo("a"), tarfile.TarInfo("b")
    here.type, here.linkname, up.type, up.linkname = tarfile.SYMTYPE, ".", tarfile.SYMTYPE, "a/.."
    through = tarfile.TarInfo("b/planted.txt")
    cases: dict[str, list[tarfile.TarInfo]] = {
        "climb": [tarfile.TarInfo("../escape.py")],
        "link": [tarfile.TarInfo("etc")],
        "chain": [here, up, through],
    }
    cases["link"][0].type, cases["link"][0].linkname = tarfile.SYMTYPE, "/etc"
    try:
        for name, members in cases.items():
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
                for member in members:
                    archive.addfile(member, io.BytesIO(b"") if member.isfile() else None)
            (folder / f"{name}.tar.gz").write_bytes(buffer.getvalue())
            (folder / f"{name}.tar.gz").chmod(0o644)
        with Workspace("namespaced", mounts=[Mount(str(folder), "/upload")]) as workspace:
            for name in cases:
                argv = [_python(), "-I", "-S", "-c", UNPACK, f"/upload/{name}.tar.gz", f"/work/{name}"]
                result = workspace.exec(argv)
                assert result.exit_code == 1 and "refused" in result.stderr, (name, result)
                found = workspace.exec(["/usr/bin/find", "/work"]).stdout.split()
                assert not [path for path in found if path.endswith(("escape.py", "planted.txt", "/etc"))], found
                assert not workspace.exec(["/usr/bin/find", "/work", "-type", "l"]).stdout.strip()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
