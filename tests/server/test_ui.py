"""The results viewer under ``/ui`` on a real server process: sign-in, the token check, and its refusals."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.server.harness import ServerProcess, make_token, write_config


@dataclass
class Ui:
    server: ServerProcess
    token: str
    metrics_only: str


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    directory = tmp_path_factory.mktemp("ui")
    database = f"sqlite:///{directory / 'server.db'}"
    config = write_config(directory, {"database": {"url": database}})
    token = make_token(database, "team-a", ["evaluations.run"])
    metrics_only = make_token(database, "team-a", ["metrics.read"])
    with ServerProcess(config) as server:
        yield Ui(server, token, metrics_only)


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
    assert response.json() == {"runs": [], "curves": [], "rewards": []}


def test_signing_in_sets_an_httponly_strict_cookie_scoped_to_the_viewer(ui: Ui) -> None:
    with _client(ui) as client:
        response = client.post("/ui/login", data={"token": ui.token, "next": "/ui/compare"})
        assert response.status_code == 303
        assert response.headers["location"] == "/ui/compare"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"evalsi_ui_token={ui.token};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
        page = client.get("/ui/")  # httpx keeps the cookie
        assert page.status_code == 200
        assert "evalsi view" in page.text
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
