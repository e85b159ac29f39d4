"""The results viewer under ``/ui`` on a real server process: sign-in, the token check, and its refusals."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.harness import ServerProcess, make_token, write_config
from tests.server.runs_data import results_document


@dataclass
class Ui:
    server: ServerProcess
    token: str
    metrics_only: str
    other: str
    documents: dict[str, dict[str, Any]]

    def store(self, token: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
        answer = httpx.post(
            f"{self.server.http}/v1alpha1/runs",
            json={"results": self.documents[name], "labels": labels},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        run: dict[str, Any] = answer.json()
        return run

    def sources(self, token: str) -> dict[str, Any]:
        answer = httpx.get(f"{self.server.http}/ui/api/sources", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        listing: dict[str, Any] = answer.json()
        return listing


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    directory = tmp_path_factory.mktemp("ui")
    database = f"sqlite:///{directory / 'server.db'}"
    config = write_config(directory, {"database": {"url": database}})
    token = make_token(database, "team-a", ["evaluations.run"])
    metrics_only = make_token(database, "team-a", ["metrics.read"])
    other = make_token(database, "team-b", ["evaluations.run"])
    documents = {
        "base": results_document(directory / "data", "base"),
        "drop": results_document(directory / "data", "drop", wrong=12),
    }
    with ServerProcess(config) as server:
        yield Ui(server, token, metrics_only, other, documents)


def _client(ui: Ui) -> httpx.Client:
    return httpx.Client(base_url=ui.server.http, follow_redirects=False, timeout=30)


def test_a_page_without_a_token_sends_the_browser_to_sign_in(ui: Ui) -> None:
    with _client(ui) as client:
        response = client.get("/ui/")
        assert response.status_code == 303
        assert response.headers["location"] == "/ui/login?next=/ui/"
        login = client.get("/ui/login")
        assert login.status_code == 200
        assert '<form method="post" action="/ui/login">' in login.text
        assert 'type="password" name="token"' in login.text
        assert client.get("/ui/static/view.css").status_code == 200  # the login page's stylesheet needs no token


def test_the_api_without_a_token_is_401_not_a_redirect(ui: Ui) -> None:
    with _client(ui) as client:
        response = client.get("/ui/api/sources")
    assert response.status_code == 401
    assert "missing token" in response.json()["error"]


def test_a_bearer_header_opens_the_api(ui: Ui) -> None:
    with _client(ui) as client:
        response = client.get("/ui/api/sources", headers={"Authorization": f"Bearer {ui.token}"})
    assert response.status_code == 200
    assert set(response.json()) == {"runs", "curves", "rewards"}


def test_stored_runs_and_checkpoint_curves_are_shown_to_their_project_only(ui: Ui) -> None:
    ui.store(ui.token, "base", {})
    for step, name in (("base", "base"), ("100", "base"), ("200", "drop"), ("200", "base")):
        ui.store(ui.token, name, {"training-run": "grpo 1", "training-step": step, "spec": "forgetting"})
    theirs = ui.store(ui.other, "drop", {"owner": "b"})

    listing = ui.sources(ui.token)
    labels = sorted(run["label"] for run in listing["runs"])
    assert labels[:4] == sorted(
        [
            next(label for label in labels if label.startswith("runs/base-run_")),
            *(f"training/grpo_1-{_hash('grpo 1')}/forgetting/{stem}.json" for stem in ("base", "step-100", "step-200")),
        ]
    )
    assert not any(theirs["id"] in label for label in labels)
    (curve,) = listing["curves"]
    data = httpx.get(f"{ui.server.http}/ui/api/curves/{curve['id']}", headers={"Authorization": f"Bearer {ui.token}"})
    assert data.status_code == 200, data.text
    steps = {point["step"]: point for point in data.json()["points"]}
    assert set(steps) == {"base", 100, 200}
    # step 200 was stored twice: the newer run (the base's answers again) is the one drawn, so nothing dropped
    assert steps[200]["status"] != "regressed"
    assert steps[200]["versusBase"]["exact-match"]["difference"] == 0

    other_listing = ui.sources(ui.other)
    assert [run["label"] for run in other_listing["runs"]] == [f"runs/drop-{theirs['id']}.results.json"]
    assert other_listing["curves"] == []
    mine = listing["runs"][0]["id"]
    refused = httpx.get(f"{ui.server.http}/ui/api/runs/{mine}", headers={"Authorization": f"Bearer {ui.other}"})
    assert refused.status_code == 404


def test_a_stored_run_opens_with_its_records(ui: Ui) -> None:
    stored = ui.store(ui.token, "drop", {"purpose": "record-page"})
    (run,) = [r for r in ui.sources(ui.token)["runs"] if stored["id"] in r["label"]]
    with _client(ui) as client:
        client.post("/ui/login", data={"token": ui.token})
        page = client.get(f"/ui/runs/{run['id']}")
        assert page.status_code == 200
        assert "exact-match" in page.text
        record = client.get(f"/ui/runs/{run['id']}/records/0")
        assert record.status_code == 200
        assert "q0" in record.text


def _hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_signing_in_sets_an_httponly_strict_session_cookie_scoped_to_the_viewer(ui: Ui) -> None:
    with _client(ui) as client:
        response = client.post("/ui/login", data={"token": ui.token, "next": "/ui/compare"})
        assert response.status_code == 303
        assert response.headers["location"] == "/ui/compare"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith("evalsi_ui_session=")
        assert ui.token not in cookie  # a session id, never the token
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
        assert "Max-Age=43200" in cookie  # ui.session_ttl: 12 hours by default
        page = client.get("/ui/")  # httpx keeps the cookie
        assert page.status_code == 200
        assert "evalsi view" in page.text
        assert 'action="/ui/logout"' in page.text  # a signed-in page offers to sign out
        logout = client.get("/ui/logout")
        assert logout.status_code == 303
        assert "Max-Age=0" in logout.headers["set-cookie"]
        assert client.get("/ui/").status_code == 303


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        ("evalsi_not-a-token", 401, "unknown or revoked token"),
        ("", 401, "missing token"),
    ],
)
def test_a_bad_token_is_refused_on_the_form(ui: Ui, token: str, status: int, message: str) -> None:
    with _client(ui) as client:
        response = client.post("/ui/login", data={"token": token})
    assert response.status_code == status
    assert message in response.text
    assert "set-cookie" not in response.headers


def test_a_token_without_evaluations_run_cannot_sign_in_or_read(ui: Ui) -> None:
    with _client(ui) as client:
        response = client.post("/ui/login", data={"token": ui.metrics_only})
        assert response.status_code == 403
        assert "evaluations.run" in response.text
        api = client.get("/ui/api/sources", headers={"Authorization": f"Bearer {ui.metrics_only}"})
        assert api.status_code == 403


@pytest.mark.parametrize("target", ["//evil.example/", "https://evil.example/ui/", "/ui/login", "/elsewhere", "/ui\\x"])
def test_after_sign_in_the_browser_only_goes_to_a_viewer_page(ui: Ui, target: str) -> None:
    with _client(ui) as client:
        response = client.post("/ui/login", data={"token": ui.token, "next": target})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/"


def test_an_oversized_login_form_is_refused(ui: Ui) -> None:
    with _client(ui) as client:
        response = client.post("/ui/login", data={"token": "x" * 10_000})
    assert response.status_code == 413


def test_the_viewer_can_be_switched_off(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'server.db'}"
    config = write_config(tmp_path, {"database": {"url": database}, "ui": {"enabled": False}})
    token = make_token(database, "team-a", ["evaluations.run"])
    with ServerProcess(config) as server:
        response = httpx.get(f"{server.http}/ui/", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 404
