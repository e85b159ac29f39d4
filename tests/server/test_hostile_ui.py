"""A tenant with an ordinary token attacks the results viewer under ``/ui`` on real server processes.

Each test is one kind of attack: a run too large to list cheaply, runs whose summary or records are the wrong shape,
a cross-site sign-in, a stolen or stale session, a forged proxy header, runs opened to fill the server's memory or
disk. The hostile documents and request headers are data the tests iterate over.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from evalsi.server._db import open_engine
from evalsi.server._tables import api_tokens
from evalsi.server._token_store import TokenStore
from evalsi.server._tokens import digest
from evalsi.server.runs._store import RunStore
from tests.server.harness import ServerProcess, make_token, write_config
from tests.server.runs_data import results_document

CACHE_BYTES = 4_000_000
"""The tight server's ``ui.cache_bytes``: less than two of the runs its test opens."""
SESSION_TTL = 10
"""The tight server's ``ui.session_ttl``, in seconds."""


@dataclass
class Site:
    """Two replicas of one server on one database (the plain config), and a tight one with its own database."""

    server: ServerProcess
    replica: ServerProcess
    tight: ServerProcess
    database: str
    tight_database: str
    temp: Path
    document: dict[str, Any]
    tokens: dict[str, str]

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def store(self, server: ServerProcess, token: str, document: dict[str, Any], **labels: str) -> httpx.Response:
        return httpx.post(
            f"{server.http}/v1alpha1/runs",
            json={"results": document, "labels": labels},
            headers=self.bearer(token),
            timeout=300,
        )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    directory = tmp_path_factory.mktemp("hostile-ui")
    temp = directory / "tmp"  # the servers' TMPDIR: the viewer must copy nothing there
    temp.mkdir()
    database = f"sqlite:///{directory / 'server.db'}"
    tight_database = f"sqlite:///{directory / 'tight.db'}"
    config = write_config(directory, {"database": {"url": database}})
    tight_config = write_config(
        directory,
        {
            "database": {"url": tight_database},
            "listen": {"trusted_proxies": ["127.0.0.1"]},
            "ui": {"cache_bytes": CACHE_BYTES, "session_ttl": f"{SESSION_TTL}s"},
        },
        name="tight.yaml",
    )
    tokens = {
        name: make_token(database, project, ["evaluations.run"])
        for name, project in (("a", "team-a"), ("b", "team-b"), ("lister", "lister"), ("revoked", "team-a"))
    }
    tokens["metrics"] = make_token(database, "ops", ["metrics.read"])
    tokens["tight"] = make_token(tight_database, "team-t", ["evaluations.run"])
    tokens["tight-metrics"] = make_token(tight_database, "ops", ["metrics.read"])
    document = results_document(directory / "data", "small")
    env = {"TMPDIR": str(temp)}
    with (
        ServerProcess(config, env) as server,
        ServerProcess(config, env) as replica,
        ServerProcess(tight_config, env) as tight,
    ):
        yield Site(server, replica, tight, database, tight_database, temp, document, tokens)


def _client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.http, follow_redirects=False, timeout=300)


def _cpu_seconds(server: ServerProcess) -> float:
    """User plus system CPU time the server process has used (``/proc/<pid>/stat``, fields 14 and 15)."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _large(document: dict[str, Any], records: int, completion_bytes: int) -> dict[str, Any]:
    """The document with ``records`` records whose completions are ``completion_bytes`` long (a real shape)."""
    template = document["records"][0]
    sample = template["samples"][0]
    return {
        **document,
        "name": "large",
        "records": [
            {
                **template,
                "key": f"large-{i}",
                "id": f"large-{i}",
                "index": i,
                "samples": [{**sample, "completion": f"{i} " + "x" * completion_bytes}],
            }
            for i in range(records)
        ],
    }


# -- listing costs the same whatever the runs' sizes ----------------------------------------------------------------


def test_listing_a_project_costs_the_same_with_a_run_of_tens_of_megabytes(site: Site) -> None:
    def listing_cpu(times: int) -> float:
        with _client(site.server) as client:
            assert client.get("/ui/", headers=site.bearer("lister")).status_code == 200  # new headers read here
            before = _cpu_seconds(site.server)
            for _ in range(times):
                page = client.get("/ui/", headers=site.bearer("lister"))
                assert page.status_code == 200, page.text
            return _cpu_seconds(site.server) - before

    assert site.store(site.server, "lister", site.document).status_code == 200
    small = listing_cpu(20)
    large = _large(site.document, records=2500, completion_bytes=12_000)  # about 30 MB of JSON
    stored = site.store(site.server, "lister", large)
    assert stored.status_code == 200, stored.text
    with_large = listing_cpu(20)
    with _client(site.server) as client:
        page = client.get("/ui/", headers=site.bearer("lister")).text
    assert ">large</a>" in page and ">small</a>" in page
    assert with_large < 3 * max(small, 0.05), (small, with_large)


# -- a run the viewer cannot read is refused, and one stored before breaks nothing ----------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting the field at a dotted path (``records.0.samples.0.tokens``), making missing objects."""

    def mutate(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


BAD_RESULTS = [  # (what, the field set, its value, where the refusal points)
    ("a gate that is a number", "summary.gates", [5], "summary.gates[0]"),
    ("metrics as a list", "summary.metrics", [1], "summary.metrics"),
    ("a mean that is text", "summary.metrics.exact-match.mean", "high", "summary.metrics.exact-match.mean"),
    ("a verdict that is text", "summary.gates", [{"metric": "m", "passed": "yes"}], "summary.gates[0].passed"),
    ("counts that are text", "summary.counts.exact-match", "many", "summary.counts.exact-match"),
    ("a date that is a number", "timings.started", 5, "timings.started"),
    ("a metric without a name", "metrics", [{"threshold": 1}], "metrics[0].name"),
    ("an unknown onError", "onError", "sometimes", "onError"),
    ("a checkpoint step that is text", "checkpoint", {"step": "ten"}, "checkpoint.step"),
    ("a score that is text", "records.0.samples.0.scores.m.value", "yes", "records[0].samples[0].scores.m.value"),
    ("a strange score status", "records.1.samples.0.scores.m.status", "great", "records[1].samples[0].scores.m.status"),
    ("tokens that are text", "records.2.samples.0.tokens", "5", "records[2].samples[0].tokens"),
    ("a prompt that is a number", "records.3.prompt", 7, "records[3].prompt"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value", "where"), [b[1:] for b in BAD_RESULTS], ids=[b[0] for b in BAD_RESULTS])
def test_a_run_the_viewer_cannot_read_is_refused_naming_the_field(
    site: Site, field: str, value: Any, where: str
) -> None:
    document = _deep_copy(site.document)
    _set(field, value)(document)
    answer = site.store(site.server, "a", document, purpose="bad")
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["status"] == "invalid_argument"
    assert f"`results.{where}`" in error["message"]
    listed = httpx.get(f"{site.server.http}/v1alpha1/runs?label=purpose=bad", headers=site.bearer("a")).json()
    assert listed["runs"] == []


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def test_a_bad_run_stored_before_it_was_checked_is_listed_as_unreadable_and_can_be_deleted(site: Site) -> None:
    engine = open_engine(site.database)
    try:  # as an older server stored it: the store keeps what the header says
        bad = RunStore(engine).create("team-a", {**_deep_copy(site.document), "summary": {"gates": [5]}}, {})
    finally:
        engine.dispose()
    good = site.store(site.server, "a", site.document, purpose="good").json()
    for server in (site.server, site.replica):  # every replica, every time: not only the first page after a restart
        with _client(server) as client:
            listing = client.get("/ui/api/sources", headers=site.bearer("a"))
            assert listing.status_code == 200, listing.text
            runs = {r["label"]: r for r in listing.json()["runs"]}
            (entry,) = [r for label, r in runs.items() if bad.id in label]
            assert entry["status"] == "unreadable" and "`summary.gates[0]`: must be an object" in entry["error"]
            assert any(good["id"] in label for label in runs)
            page = client.get("/ui/", headers=site.bearer("a"))
            assert page.status_code == 200 and "summary.gates[0]" in page.text
            opened = client.get(f"/ui/api/runs/{entry['id']}", headers=site.bearer("a"))
            assert opened.status_code == 422 and "summary.gates[0]" in opened.json()["error"]

    other = httpx.delete(f"{site.server.http}/v1alpha1/runs/{bad.id}", headers=site.bearer("b"))
    assert other.status_code == 404  # another project's run answers as an unknown one
    deleted = httpx.delete(f"{site.server.http}/v1alpha1/runs/{bad.id}", headers=site.bearer("a"))
    assert deleted.status_code == 200 and deleted.json() == {"id": bad.id}
    assert httpx.delete(f"{site.server.http}/v1alpha1/runs/{bad.id}", headers=site.bearer("a")).status_code == 404
    with _client(site.replica) as client:
        labels = [r["label"] for r in client.get("/ui/api/sources", headers=site.bearer("a")).json()["runs"]]
        assert not any(bad.id in label for label in labels)
        opened = client.get(f"/ui/api/runs/{entry['id']}", headers=site.bearer("a"))
        assert opened.status_code == 404


def test_a_deleted_run_is_gone_from_the_viewer_at_once(site: Site) -> None:
    run = site.store(site.server, "a", site.document, purpose="deleted").json()
    with _client(site.server) as client:
        (entry,) = [
            r for r in client.get("/ui/api/sources", headers=site.bearer("a")).json()["runs"] if run["id"] in r["label"]
        ]
        assert client.get(f"/ui/api/runs/{entry['id']}", headers=site.bearer("a")).status_code == 200  # now cached
        assert (
            httpx.delete(f"{site.server.http}/v1alpha1/runs/{run['id']}", headers=site.bearer("a")).status_code == 200
        )
        assert client.get(f"/ui/api/runs/{entry['id']}", headers=site.bearer("a")).status_code == 404
        assert client.get(f"/ui/runs/{entry['id']}/records/0", headers=site.bearer("a")).status_code == 404


# -- nothing is copied to disk; the memory of open runs is bounded in bytes -----------------------------------------


def test_the_viewer_copies_no_runs_to_disk(site: Site) -> None:
    stored = site.store(site.server, "a", site.document, **{"training-run": "disk", "training-step": "base"})
    assert stored.status_code == 200, stored.text
    with _client(site.server) as client:
        listing = client.get("/ui/api/sources", headers=site.bearer("a")).json()
        for entry in listing["runs"]:
            assert client.get(f"/ui/runs/{entry['id']}", headers=site.bearer("a")).status_code in (200, 422)
        for curve in listing["curves"]:
            assert client.get(f"/ui/curves/{curve['id']}", headers=site.bearer("a")).status_code == 200
    assert [c["label"] for c in listing["curves"] if c["label"].startswith("training/disk/")] == ["training/disk/small"]
    written = [p for p in site.temp.rglob("*") if p.is_file()]
    assert written == [], written


def _gauge(server: ServerProcess, token: str, name: str) -> float:
    text = httpx.get(f"{server.http}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"no metric {name}")


def test_open_runs_are_kept_within_the_configured_bytes(site: Site) -> None:
    server, token = site.tight, "tight"
    documents = [_large(site.document, records=200, completion_bytes=5_000) for _ in range(3)]  # about 1 MB each
    ids = []
    for n, document in enumerate(documents):
        answer = site.store(server, token, {**document, "name": f"open-{n}"})
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["id"])
    with _client(server) as client:
        listing = client.get("/ui/api/sources", headers=site.bearer(token)).json()["runs"]
        sources = [next(r["id"] for r in listing if run_id in r["label"]) for run_id in ids]
        held = []
        for source in [*sources, sources[0]]:  # the first again, after the others pushed it out
            page = client.get(f"/ui/runs/{source}?sort=exact-match", headers=site.bearer(token))
            assert page.status_code == 200 and "200 of 200 records" in page.text
            held.append(_gauge(server, site.tokens["tight-metrics"], "evalsi_ui_run_cache_bytes"))
            assert _gauge(server, site.tokens["tight-metrics"], "evalsi_ui_run_cache_runs") == 1
    assert all(1_000_000 < h <= CACHE_BYTES for h in held), held  # one run's estimate (~2x its JSON), never more


# -- sign-in: no cross-site login, sessions not tokens, shared by replicas, ended by sign-out, revocation, time -----


CROSS_SITE = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Origin": "http://127.0.0.1:1"},
    {"Origin": "http://127.0.0.1.evil.example"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "{here}"},  # a forged Origin does not help a cross-site form
]


@pytest.mark.parametrize("headers", CROSS_SITE, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()))
def test_a_sign_in_posted_from_another_site_is_refused(site: Site, headers: dict[str, str]) -> None:
    sent = {k: v.replace("{here}", site.server.http) for k, v in headers.items()}
    with _client(site.server) as client:
        response = client.post("/ui/login", data={"token": site.tokens["a"]}, headers=sent)
    assert response.status_code == 403
    assert "another" in response.text
    assert "set-cookie" not in response.headers


def test_a_sign_in_from_the_viewers_own_page_is_accepted(site: Site) -> None:
    with _client(site.server) as client:
        response = client.post(
            "/ui/login",
            data={"token": site.tokens["a"]},
            headers={"Sec-Fetch-Site": "same-origin", "Origin": site.server.http},
        )
    assert response.status_code == 303 and response.headers["set-cookie"].startswith("evalsi_ui_session=")


def _sign_in(server: ServerProcess, token: str) -> tuple[str, str]:
    with _client(server) as client:
        response = client.post("/ui/login", data={"token": token})
    assert response.status_code == 303, response.text
    cookie = response.headers["set-cookie"]
    return cookie.split(";", 1)[0], cookie


def _with(server: ServerProcess, cookie: str, path: str = "/ui/api/sources") -> httpx.Response:
    return httpx.get(f"{server.http}{path}", headers={"Cookie": cookie}, follow_redirects=False, timeout=60)


def test_a_session_is_shared_by_replicas_and_ends_when_it_signs_out(site: Site) -> None:
    cookie, _ = _sign_in(site.server, site.tokens["a"])
    assert site.tokens["a"] not in cookie
    assert _with(site.replica, cookie).status_code == 200  # the other replica knows the session
    with _client(site.replica) as client:
        out = client.post("/ui/logout", headers={"Cookie": cookie})
        assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
    for server in (site.server, site.replica):  # a copy of the cookie kept by an attacker is worth nothing now
        assert _with(server, cookie).status_code == 401
        assert _with(server, cookie, "/ui/").status_code == 303


def test_a_sign_out_posted_from_another_site_is_refused(site: Site) -> None:
    cookie, _ = _sign_in(site.server, site.tokens["a"])
    with _client(site.server) as client:
        refused = client.post("/ui/logout", headers={"Cookie": cookie, "Sec-Fetch-Site": "cross-site"})
    assert refused.status_code == 403
    assert _with(site.server, cookie).status_code == 200


def test_the_viewers_own_sign_out_form_is_accepted(site: Site) -> None:
    cookie, _ = _sign_in(site.server, site.tokens["a"])
    # The viewer's pages say Referrer-Policy: no-referrer, so a browser posts their forms with Origin: null.
    own = {"Cookie": cookie, "Sec-Fetch-Site": "same-origin", "Origin": "null"}
    with _client(site.server) as client:
        assert client.post("/ui/logout", headers=own).status_code == 303
    assert _with(site.server, cookie).status_code == 401


def test_revoking_the_token_ends_its_sessions(site: Site) -> None:
    cookie, _ = _sign_in(site.server, site.tokens["revoked"])
    assert _with(site.replica, cookie).status_code == 200
    engine = open_engine(site.database)
    try:
        with engine.connect() as connection:
            token_id = connection.execute(
                select(api_tokens.c.id).where(api_tokens.c.token_hash == digest(site.tokens["revoked"]))
            ).scalar_one()
        assert TokenStore(engine).revoke(token_id)
    finally:
        engine.dispose()
    for server in (site.server, site.replica):  # at once: a session's token is looked up on every request
        assert _with(server, cookie).status_code == 401


def test_a_session_expires(site: Site) -> None:
    cookie, header = _sign_in(site.tight, site.tokens["tight"])
    assert f"Max-Age={SESSION_TTL}" in header
    deadline = time.monotonic() + SESSION_TTL + 90
    while _with(site.tight, cookie).status_code == 200:
        assert time.monotonic() < deadline, "the session outlived its ui.session_ttl"
        time.sleep(0.5)
    assert _with(site.tight, cookie).status_code == 401


def test_the_cookie_is_secure_behind_a_trusted_https_proxy_only(site: Site) -> None:
    https = {"X-Forwarded-Proto": "https"}
    with _client(site.server) as client:  # no trusted proxies: a client cannot claim https
        plain = client.post("/ui/login", data={"token": site.tokens["a"]}, headers=https)
    assert plain.status_code == 303 and "Secure" not in plain.headers["set-cookie"]
    with _client(site.tight) as client:  # listen.trusted_proxies: [127.0.0.1]
        proxied = client.post("/ui/login", data={"token": site.tokens["tight"]}, headers=https)
        direct = client.post("/ui/login", data={"token": site.tokens["tight"]})
    assert proxied.status_code == 303 and "; Secure" in proxied.headers["set-cookie"]
    assert direct.status_code == 303 and "Secure" not in direct.headers["set-cookie"]
