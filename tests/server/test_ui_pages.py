"""The ``/ui`` pages of a project's evaluators, datasets and evaluation jobs, on a real server and sandbox.

Each project sees only its own: another project's evaluator, build log, dataset or job answers 404 exactly as an
id that does not exist, and its lists never name them.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from evalsi.server._db import open_engine
from evalsi.server.evaluation._tables import evaluation_jobs
from tests.server.evaluation import (
    CAPITALS,
    SLOW,
    TERMINAL,
    chat,
    create_job,
    jsonl,
    post,
    upload,
    wait_built,
    wait_state,
)
from tests.server.harness import ServerProcess, make_token, write_config

pytestmark = [pytest.mark.timeout(300), pytest.mark.sandbox]

ALL = ["evaluations.run", "resource.runs_code", "evaluators.write"]
ROWS = [
    chat("Capital of France?", "It is Paris.", "Paris"),
    chat("Capital of Japan?", "Kyoto", "Tokyo"),
    chat("Capital of Italy?", "Rome, of course", "Rome"),
]
BROKEN = {"test_broken.py": "import nonexistent_module_for_this_test\n"}


@dataclass
class Site:
    server: ServerProcess
    a: str
    b: str
    database: str

    def page(self, token: str, path: str) -> httpx.Response:
        return httpx.get(f"{self.server.http}/ui{path}", headers={"Authorization": f"Bearer {token}"}, timeout=60)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    directory = tmp_path_factory.mktemp("ui-pages")
    database = f"sqlite:///{directory / 'server.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-ui-pages-"))  # under /tmp: sandbox users must reach it
    spec = {
        "database": {"url": database},
        "evaluators": {"storage_dir": str(storage)},
        "jobs": {"workers": 2, "batch_rows": 2},
    }
    a, b = make_token(database, "team-a", ALL), make_token(database, "team-b", ALL)
    with ServerProcess(write_config(directory, spec)) as server:
        entry = "test_capitals.py::test_capitals"
        assert upload(server, a, "capitals", {"test_capitals.py": CAPITALS}, entry).status_code == 200
        assert upload(server, a, "slow", {"test_slow.py": SLOW}, "test_slow.py::test_slow").status_code == 200
        assert upload(server, a, "broken", BROKEN, "test_broken.py::test_x").status_code == 200
        assert upload(server, b, "b-secret", {"test_slow.py": SLOW}, "test_slow.py::test_slow").status_code == 200
        assert post(server, a, "datasets", {"datasetId": "capitals", "jsonl": jsonl(ROWS)}).is_success
        assert post(server, b, "datasets", {"datasetId": "b-rows", "jsonl": jsonl(ROWS)}).is_success
        for token, evaluator_id in ((a, "capitals"), (a, "slow"), (a, "broken"), (b, "b-secret")):
            assert wait_built(server, token, evaluator_id, timeout=240)["state"] != "BUILDING"
        assert create_job(server, a, "scored", "capitals", "capitals", "scored-out").status_code == 200
        assert wait_state(server, a, "scored", TERMINAL, timeout=240)["state"] == "COMPLETED"
        assert create_job(server, b, "b-job", "b-secret", "b-rows", "b-out").status_code == 200
        yield Site(server, a, b, database)
        for token, job_id in ((a, "slowly"), (b, "b-job")):
            post(server, token, f"evaluationJobs/{job_id}/cancel")
    shutil.rmtree(storage, ignore_errors=True)


def test_the_evaluators_page_lists_the_projects_own_with_state_and_version(site: Site) -> None:
    page = site.page(site.a, "/evaluators")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    rows = re.findall(r'<a href="/ui/evaluators/([^"]+)">', page.text)
    assert sorted(rows) == ["broken", "capitals", "slow"]  # never team-b's
    assert "b-secret" not in page.text
    assert "ACTIVE" in page.text and "BUILD_FAILED" in page.text
    capitals = site.page(site.a, "/evaluators/capitals")
    version = re.search(r'<code id="version">([0-9a-f]{64})</code>', capitals.text)
    assert version is not None and version.group(1)[:12] in page.text  # the list shows the version's short form


def test_an_evaluators_page_shows_its_build_log(site: Site) -> None:
    page = site.page(site.a, "/evaluators/broken")
    assert page.status_code == 200
    assert 'id="state">BUILD_FAILED<' in page.text
    log = re.search(r'<pre class="text" id="build-log">(.*?)</pre>', page.text, re.S)
    assert log is not None and "nonexistent_module_for_this_test" in log.group(1)
    built = site.page(site.a, "/evaluators/capitals")
    assert 'id="state">ACTIVE<' in built.text and "ready" in built.text


def test_the_datasets_page_lists_the_projects_own_with_their_rows(site: Site) -> None:
    page = site.page(site.a, "/datasets")
    assert page.status_code == 200
    assert "<td>capitals</td>" in page.text and "<td>scored-out</td>" in page.text
    assert '<td class="num">3</td>' in page.text
    assert '<a href="/ui/jobs/scored">scored</a>' in page.text  # the output dataset names the job that wrote it
    assert "b-rows" not in page.text and "b-out" not in page.text


def test_a_completed_job_shows_its_progress_and_opens_its_results_as_a_run(site: Site) -> None:
    listing = site.page(site.a, "/jobs")
    assert listing.status_code == 200 and "b-job" not in listing.text
    page = site.page(site.a, "/jobs/scored")
    assert page.status_code == 200
    assert 'id="state">COMPLETED<' in page.text
    assert "3 of 3 rows" in page.text
    stored = open_engine(site.database)
    try:  # the running replica stored its count batch by batch, for other replicas' pages
        with stored.connect() as connection:
            done = connection.execute(
                select(evaluation_jobs.c.rows_done).where(evaluation_jobs.c.job_id == "scored")
            ).scalar_one()
    finally:
        stored.dispose()
    assert done == 3
    link = re.search(r'<a id="results" href="(/ui/runs/[^"]+)">', page.text)
    assert link is not None
    assert link.group(1) in listing.text  # the list links the same run page
    run = site.page(site.a, link.group(1).removeprefix("/ui"))
    assert run.status_code == 200 and "job scored" in run.text
    sources = site.page(site.a, "/api/sources").json()
    assert link.group(1).rsplit("/", 1)[1] in {item["id"] for item in sources["runs"]}


def test_a_running_job_shows_rows_done_of_total(site: Site) -> None:
    assert create_job(site.server, site.a, "slowly", "slow", "capitals", "slowly-out").status_code == 200
    assert wait_state(site.server, site.a, "slowly", ("RUNNING",), timeout=120)["state"] == "RUNNING"
    page = site.page(site.a, "/jobs/slowly")
    assert 'id="state">RUNNING<' in page.text
    assert "0 of 3 rows" in page.text  # the first batch of two rows takes the slow evaluator 30 s a row
    assert 'id="results"' not in page.text and "when the job completes" in page.text


@pytest.mark.parametrize(
    ("path", "missing"),
    [
        ("/evaluators/b-secret", "/evaluators/no-such-evaluator"),
        ("/jobs/b-job", "/jobs/no-such-job"),
    ],
)
def test_another_projects_evaluator_or_job_is_404_like_a_missing_one(site: Site, path: str, missing: str) -> None:
    stolen, absent = site.page(site.a, path), site.page(site.a, missing)
    assert stolen.status_code == absent.status_code == 404
    assert stolen.text == absent.text
    assert site.page(site.b, path).status_code == 200  # its own project sees it


def test_the_pages_need_a_sign_in(site: Site) -> None:
    for path in ("/evaluators", "/evaluators/capitals", "/datasets", "/jobs", "/jobs/scored"):
        answer = httpx.get(f"{site.server.http}/ui{path}", follow_redirects=False, timeout=60)
        assert answer.status_code == 303 and answer.headers["location"] == f"/ui/login?next=/ui{path}"
    refused = httpx.post(f"{site.server.http}/ui/jobs", headers={"Authorization": f"Bearer {site.a}"}, timeout=60)
    assert refused.status_code == 405
