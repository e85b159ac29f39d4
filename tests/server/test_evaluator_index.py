"""Requirements from the operator's package index: the server downloads wheels from it alone, the build installs
them offline, and a requirements file that names any other source is refused before anything is fetched."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evalsi.server.evaluation.evaluators._index import RequirementsError, plain_requirements
from tests.server.evaluation import NORMALISED_TEST, get, upload, wait_built, write_wheel
from tests.server.harness import ServerProcess, make_token, post_http, write_config

pytestmark = [pytest.mark.timeout(300), pytest.mark.sandbox]


@dataclass
class Index:
    """A PEP 503 ``simple`` index served from a directory on loopback, and the paths it was asked for."""

    root: Path
    requests: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def __enter__(self) -> Index:
        index = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(index.root), **kwargs)

            def log_message(self, format: str, *args: Any) -> None:
                index.requests.append(self.path)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()


def simple_index(root: Path) -> None:
    """``/simple/capital-words/`` listing the one wheel, with its sha256 as pip checks it."""
    files = root / "files"
    files.mkdir(parents=True)
    wheel = write_wheel(files)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project = root / "simple" / "capital-words"
    project.mkdir(parents=True)
    link = f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>'
    (project / "index.html").write_text(f"<!doctype html><html><body>{link}</body></html>\n")
    (root / "simple" / "index.html").write_text('<html><body><a href="capital-words/">capital-words</a></body></html>')


@dataclass
class Env:
    server: ServerProcess
    token: str
    index: Index
    elsewhere: Index


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("index")
    storage = Path(tempfile.mkdtemp(prefix="evalsi-index-test-"))  # under /tmp: sandbox users must reach it
    storage.chmod(0o755)
    simple_index(directory / "index")
    simple_index(directory / "elsewhere")
    with Index(directory / "index") as index, Index(directory / "elsewhere") as elsewhere:
        database = f"sqlite:///{directory / 'server.db'}"
        evaluators = {"storage_dir": str(storage / "evaluators"), "index_url": index.url}
        config = write_config(directory, {"database": {"url": database}, "evaluators": evaluators})
        token = make_token(database, "team-a", ["evaluations.run", "resource.runs_code", "evaluators.write"])
        with ServerProcess(config) as server:
            yield Env(server, token, index, elsewhere)
    shutil.rmtree(storage, ignore_errors=True)


def test_requirements_come_from_the_operators_index_and_install_offline(env: Env) -> None:
    files = {"test_words.py": NORMALISED_TEST, "requirements.txt": "# the normaliser\ncapital-words==1.0\n"}
    assert upload(env.server, env.token, "words", files, "test_words.py::test_normalised").status_code == 200
    evaluator = wait_built(env.server, env.token, "words", timeout=240)
    log = get(env.server, env.token, "evaluators/words/log").json()["log"]
    assert evaluator["state"] == "ACTIVE", log
    assert any(path.startswith("/simple/capital-words/") for path in env.index.requests)
    assert any(path.startswith("/files/capital_words-1.0") for path in env.index.requests)
    assert "download requirements" in log and "install requirements.txt" in log
    assert env.index.url not in log  # the operator's index address stays the operator's
    spec = {"components": [{"ref": "evaluator/words", "name": "c"}]}
    rollouts = [{"prompt": "Capital of the USA?", "completion": "washington, d.c.", "answer": "Washington DC"}]
    answer = post_http(env.server, env.token, spec, rollouts)
    assert [r["total"] for r in answer.json()["results"]] == [1.0], answer.text


@pytest.mark.parametrize(
    ("requirements", "needle"),
    [
        ("--index-url {elsewhere}\ncapital-words==1.0\n", "line 1: options such as '--index-url'"),
        ("capital-words==1.0\n--extra-index-url {elsewhere}\n", "line 2: options such as '--extra-index-url'"),
        ("capital-words @ {elsewhere}../files/capital_words-1.0-py3-none-any.whl\n", "line 1: direct references"),
        ("-r other.txt\n", "line 1: options such as '-r'"),
        ("capital words!!\n", "line 1: not a requirement"),
    ],
)
def test_a_requirements_file_naming_another_source_is_refused_at_upload_before_any_download(
    env: Env, requirements: str, needle: str
) -> None:
    evaluator_id = "other-" + hashlib.sha256(requirements.encode()).hexdigest()[:8]
    files = {"test_words.py": NORMALISED_TEST, "requirements.txt": requirements.format(elsewhere=env.elsewhere.url)}
    before = len(env.index.requests)
    answer = upload(env.server, env.token, evaluator_id, files, "test_words.py::test_normalised")
    assert answer.status_code == 400, answer.text
    assert needle in answer.json()["error"]["message"]
    assert get(env.server, env.token, f"evaluators/{evaluator_id}").status_code == 404  # nothing was stored
    assert env.elsewhere.requests == []
    assert len(env.index.requests) == before


def test_a_requirement_the_index_lacks_fails_the_build_with_pips_reason(env: Env) -> None:
    files = {"test_words.py": NORMALISED_TEST, "requirements.txt": "no-such-package-anywhere==9.9\n"}
    assert upload(env.server, env.token, "missing", files, "test_words.py::test_normalised").status_code == 200
    evaluator = wait_built(env.server, env.token, "missing", timeout=240)
    assert evaluator["state"] == "BUILD_FAILED"
    assert "could not be downloaded from the server's index" in evaluator["message"]
    log = get(env.server, env.token, "evaluators/missing/log").json()["log"]
    assert "no-such-package-anywhere" in log


def test_plain_requirements_keeps_names_extras_versions_and_markers() -> None:
    text = "# pinned\n\nnumpy>=1.26 ; python_version >= '3.10'\nrich[jupyter]==13.7.1  # a comment\n"
    assert plain_requirements(text) == ['numpy>=1.26; python_version >= "3.10"', "rich[jupyter]==13.7.1"]
    with pytest.raises(RequirementsError, match="line 1: options"):
        plain_requirements("--trusted-host evil.example\n")
