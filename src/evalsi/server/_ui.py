"""The results viewer under ``/ui``: the same app as ``evalsi view``, behind the server's tokens, one per project.

A browser cannot send a bearer header, so ``/ui/login`` takes a token in a form, checks it (it must carry
``evaluations.run``) and keeps it in an HttpOnly, SameSite=Strict cookie scoped to ``/ui``; API clients may send
``Authorization: Bearer`` instead. Each project sees only its own results: the server writes them (through a
:class:`ProjectExporter`) into a private directory per project, and a viewer rooted at that directory serves them,
so nothing another project stored, and no other file, is reachable through it.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, quote

import orjson
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from evalsi.server._errors import ServiceError
from evalsi.server._tokens import RUN, Principal
from evalsi.view import create_app

COOKIE = "evalsi_ui_token"
"""The cookie holding a browser's token (HttpOnly: page scripts cannot read it)."""

MAX_FORM_BYTES = 4096
"""The largest login form read; a token is far shorter."""

MAX_VIEWERS = 64
"""Project viewers kept warm; the least recently used beyond this is dropped (its files stay exported)."""

Authenticator = Callable[[str | None], Awaitable[Principal]]


class ProjectExporter(Protocol):
    """Writes a project's stored results into a directory as results files the viewer reads."""

    def export(self, project: str, directory: Path) -> None:
        """Bring ``directory`` up to date with what the server stores for ``project`` (idempotent)."""


class ServerUi:
    """The ``/ui`` application: login, the token check, and a per-project viewer over exported results."""

    def __init__(self, authenticate: Authenticator, exporters: list[ProjectExporter], root: Path | None = None):
        self.authenticate = authenticate
        self.exporters = exporters
        self._owned = root is None
        self.root = Path(tempfile.mkdtemp(prefix="evalsi-ui-")) if root is None else root
        self.root.chmod(0o700)
        self._viewers: OrderedDict[str, ASGIApp] = OrderedDict()
        self._lock = threading.Lock()
        self._static = StaticFiles(packages=[("evalsi.view", "static")])

    def close(self) -> None:
        """Remove the exported files when the directory was made for this process."""
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)

    def project_dir(self, project: str) -> Path:
        """The private directory of a project's exported results (named by a hash: project names are free text)."""
        directory = self.root / hashlib.sha256(project.encode()).hexdigest()[:24]
        directory.mkdir(mode=0o700, exist_ok=True)
        return directory

    def _viewer(self, project: str) -> ASGIApp:
        with self._lock:
            viewer = self._viewers.get(project)
            if viewer is None:
                viewer = create_app([self.project_dir(project)])
                self._viewers[project] = viewer
                while len(self._viewers) > MAX_VIEWERS:
                    self._viewers.popitem(last=False)
            self._viewers.move_to_end(project)
            return viewer

    def _export(self, project: str) -> None:
        directory = self.project_dir(project)
        for exporter in self.exporters:
            exporter.export(project, directory)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a ``/ui`` request (mounted: ``root_path`` ends in ``/ui``)."""
        if scope["type"] != "http":
            return
        root = scope.get("root_path", "")
        path = scope["path"][len(root) :] if scope["path"].startswith(root) else scope["path"]
        if path == "/login":
            await self._login(scope, receive, send, root)
            return
        if path.startswith("/static/"):  # the package's stylesheet and script: no data, needed by the login page
            await self._static(dict(scope, root_path=f"{root}/static"), receive, send)
            return
        if path == "/logout":
            await _redirect(send, f"{root}/login", clear_cookie=root or "/")
            return
        try:
            principal = await self.authenticate(_bearer(scope))
            if not principal.allows(RUN):
                raise ServiceError("permission_denied", f"the viewer needs a token with the `{RUN}` permission")
        except ServiceError as error:
            if path.startswith("/api/"):
                await _plain(send, error.http_status, error.message, "application/json")
            else:
                await _redirect(send, f"{root}/login?next={quote(root + path, safe='/')}")
            return
        await asyncio.to_thread(self._export, principal.project)
        await self._viewer(principal.project)(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send, root: str) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        target = _safe_next(query.get("next", [""])[0], root)
        if scope["method"] != "POST":
            await _plain(send, 200, _login_page(root, target, ""), "text/html; charset=utf-8")
            return
        body = await _read_form(receive)
        if body is None:
            await _plain(send, 413, "the login form is too large", "text/plain; charset=utf-8")
            return
        fields = parse_qs(body.decode("utf-8", "replace"))
        token = fields.get("token", [""])[0].strip()
        target = _safe_next(fields.get("next", [target])[0], root)
        try:
            principal = await self.authenticate(f"Bearer {token}" if token else None)
            if not principal.allows(RUN):
                raise ServiceError("permission_denied", f"this token lacks the `{RUN}` permission the viewer needs")
        except ServiceError as error:
            page = _login_page(root, target, error.message)
            await _plain(send, error.http_status, page, "text/html; charset=utf-8")
            return
        secure = scope.get("scheme") == "https"
        await _redirect(send, target, cookie=(token, root or "/", secure))


def _bearer(scope: Scope) -> str | None:
    """The Authorization header, else the login cookie as a bearer value."""
    cookie_header = b""
    for key, value in scope.get("headers", ()):
        name = key.lower()
        if name == b"authorization":
            return str(value.decode("latin-1"))
        if name == b"cookie":
            cookie_header = value
    for part in cookie_header.decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return f"Bearer {value}"
    return None


def _safe_next(target: str, root: str) -> str:
    """Where to go after logging in: a path under the mount only (never another site)."""
    home = f"{root}/"
    if not target.startswith(home) or target.startswith(("//", f"{root}/login")) or "\\" in target:
        return home
    return target


async def _read_form(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _plain(send: Send, status: int, text: str, media_type: str) -> None:
    body = text.encode() if not media_type.startswith("application/json") else _json_error(text)
    headers = [
        (b"content-type", media_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"x-frame-options", b"DENY"),
        (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _json_error(message: str) -> bytes:
    return orjson.dumps({"error": message})


async def _redirect(
    send: Send, location: str, *, cookie: tuple[str, str, bool] | None = None, clear_cookie: str | None = None
) -> None:
    headers: list[tuple[bytes, bytes]] = [
        (b"location", location.encode("latin-1", "replace")),
        (b"content-length", b"0"),
        (b"cache-control", b"no-store"),
    ]
    if cookie is not None:
        token, path, secure = cookie
        flags = f"; Path={path}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
        headers.append((b"set-cookie", f"{COOKIE}={token}{flags}".encode("latin-1")))
    if clear_cookie is not None:
        expired = f"{COOKIE}=; Path={clear_cookie}; Max-Age=0; HttpOnly; SameSite=Strict"
        headers.append((b"set-cookie", expired.encode()))
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _login_page(root: str, target: str, error: str) -> str:
    message = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>evalsi · sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{html.escape(root)}/static/view.css"></head>
<body><main class="login"><h1>evalsi results</h1>
<p>Paste a token with the <code>{RUN}</code> permission (<code>evalsi server token create</code>).
Your project's runs are shown; the token stays in an HttpOnly cookie for this path.</p>{message}
<form method="post" action="{html.escape(root)}/login">
<input type="hidden" name="next" value="{html.escape(target)}">
<label>Token <input type="password" name="token" autocomplete="off" required autofocus></label>
<button type="submit">Sign in</button></form></main></body></html>
"""
