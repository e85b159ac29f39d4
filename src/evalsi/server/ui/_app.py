"""The results viewer under ``/ui``: the same app as ``evalsi view``, behind sign-in, one per project.

A browser cannot send a bearer header, so ``/ui/login`` takes a token in a form, checks it (it must carry
``evaluations.run``) and opens a session (:mod:`evalsi.server.ui._session_store`): the cookie holds the session's random
id, never the token, and is HttpOnly, SameSite=Strict, scoped to ``/ui``, Secure when the request came over https
(as the server sees it, or as a trusted TLS-terminating proxy says: ``listen.trusted_proxies``). A sign-in posted
from another site is refused (``Sec-Fetch-Site``, ``Origin``), so no page elsewhere can sign a browser in to an
attacker's project. API clients may send ``Authorization: Bearer`` instead of a cookie.

Each project sees only its own results and resources: the caller's project is put in the request's scope, the
evaluators, datasets and jobs pages (:mod:`evalsi.server.ui._pages`) read that project alone, and its viewer reads
a :class:`~evalsi.server.ui._catalog.ProjectCatalog` over the database (nothing is copied to disk), and the runs it
opens share one cache bounded in bytes (``ui.cache_bytes``) across projects.
"""

from __future__ import annotations

import asyncio
import html
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, quote, urlsplit

import orjson
from prometheus_client import CollectorRegistry, Gauge
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from evalsi.server._errors import ServiceError
from evalsi.server._tokens import RUN, Principal
from evalsi.server.ui._pages import PREFIXES, PROJECT
from evalsi.server.ui._session_store import Sessions
from evalsi.view import Catalog, RunCache, create_app

COOKIE = "evalsi_ui_session"
"""The cookie holding a browser's session id (HttpOnly: page scripts cannot read it)."""

SIGNED_IN = "evalsi.ui.session"
"""Set in a request's scope when a session (not a bearer header) signed it in: pages then offer to sign out."""

MAX_FORM_BYTES = 4096
"""The largest login form read; a token is far shorter."""

MAX_VIEWERS = 64
"""Project viewers kept warm; the least recently used beyond this is dropped (rebuilt on its next request)."""

_SAME_SITE = frozenset({"same-origin", "none"})
"""``Sec-Fetch-Site`` values of a form posted by the viewer's own page, or of a request the user typed."""
_DEFAULT_PORTS = {"http": 80, "https": 443}

Authenticator = Callable[[str | None], Awaitable[Principal]]


class ServerUi:
    """The ``/ui`` application: sign-in and sessions, and a per-project viewer over the database."""

    def __init__(
        self,
        authenticate: Authenticator,
        sessions: Sessions,
        catalog: Callable[[str], Catalog],
        runs: RunCache,
        registry: CollectorRegistry | None = None,
        pages: ASGIApp | None = None,
    ) -> None:
        self.authenticate = authenticate
        self.pages = pages
        """The evaluators, datasets and jobs pages (:mod:`evalsi.server.ui._pages`), or None: the viewer alone."""
        self.sessions = sessions
        self.catalog = catalog
        self.runs = runs
        self._viewers: OrderedDict[str, ASGIApp] = OrderedDict()
        self._lock = threading.Lock()
        self._static = StaticFiles(packages=[("evalsi.view", "static")])
        if registry is not None:
            Gauge(
                "evalsi_ui_run_cache_bytes",
                "Estimated memory of the runs the results viewer keeps open, across projects (ui.cache_bytes).",
                registry=registry,
            ).set_function(lambda: runs.held_bytes)
            Gauge(
                "evalsi_ui_run_cache_runs", "Runs the results viewer keeps open, across projects.", registry=registry
            ).set_function(lambda: len(runs))

    def close(self) -> None:
        """Nothing is held outside memory; kept for the server's shutdown sequence."""

    def _viewer(self, project: str) -> ASGIApp:
        with self._lock:
            viewer = self._viewers.get(project)
            if viewer is None:
                viewer = create_app(self.catalog(project), runs=self.runs)
                self._viewers[project] = viewer
                while len(self._viewers) > MAX_VIEWERS:
                    self._viewers.popitem(last=False)
            self._viewers.move_to_end(project)
            return viewer

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
            await self._logout(scope, send, root)
            return
        try:
            principal, by_session = await self._principal(scope)
            if not principal.allows(RUN):
                raise ServiceError("permission_denied", f"the viewer needs a token with the `{RUN}` permission")
        except ServiceError as error:
            if path.startswith("/api/"):
                await _plain(send, error.http_status, error.message, "application/json")
            else:
                await _redirect(send, f"{root}/login?next={quote(root + path, safe='/')}")
            return
        scope = dict(scope, **{PROJECT: principal.project})
        if by_session:
            scope[SIGNED_IN] = True
        if self.pages is not None and any(path == p or path.startswith(f"{p}/") for p in PREFIXES):
            await self.pages(scope, receive, send)
            return
        await self._viewer(principal.project)(scope, receive, send)

    async def _principal(self, scope: Scope) -> tuple[Principal, bool]:
        """The caller from a bearer header, else from the session cookie; and whether a session it was."""
        authorization, session = _credentials(scope)
        if authorization is not None or session is None:
            return await self.authenticate(authorization), False
        principal = await asyncio.to_thread(self.sessions.principal, session)
        if principal is None:
            raise ServiceError(
                "unauthenticated", "the sign-in has ended (it expired, was signed out, or its token was revoked)"
            )
        return principal, True

    async def _login(self, scope: Scope, receive: Receive, send: Send, root: str) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        target = _safe_next(query.get("next", [""])[0], root)
        if scope["method"] != "POST":
            await _plain(send, 200, _login_page(root, target, ""), "text/html; charset=utf-8")
            return
        refused = cross_site(scope)
        if refused is not None:
            await _plain(send, 403, _login_page(root, target, refused), "text/html; charset=utf-8")
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
        secret = await asyncio.to_thread(self.sessions.open, token)
        cookie = _cookie(secret, root or "/", secure=scope.get("scheme") == "https", max_age=int(self.sessions.ttl))
        await _redirect(send, target, cookie=cookie)

    async def _logout(self, scope: Scope, send: Send, root: str) -> None:
        refused = cross_site(scope)
        if refused is not None:
            await _plain(send, 403, refused, "text/plain; charset=utf-8")
            return
        _, session = _credentials(scope)
        if session is not None:
            await asyncio.to_thread(self.sessions.close, session)
        expired = f"{COOKIE}=; Path={root or '/'}; Max-Age=0; HttpOnly; SameSite=Strict"
        await _redirect(send, f"{root}/login", cookie=expired)


def cross_site(scope: Scope) -> str | None:
    """Why a sign-in (or sign-out) request is refused as sent from another site, or None when it is not.

    Browsers send ``Sec-Fetch-Site`` with every request, and ``Origin`` with every POST: a form another site posts
    says ``cross-site`` (or ``same-site`` from a sibling domain) and names its own origin, which is not this host.
    ``Origin: null`` (what a page with ``Referrer-Policy: no-referrer``, like the viewer's, sends for its own forms)
    passes only when ``Sec-Fetch-Site`` says the request is the site's own. A request with neither header is not a
    browser's (a script, ``curl``), so no other site can have sent it.
    """
    headers = {key.lower(): value for key, value in scope.get("headers", ())}
    site = headers.get(b"sec-fetch-site")
    own = site is not None and site.decode("latin-1").strip().lower() in _SAME_SITE
    if site is not None and not own:
        return "a sign-in sent from another site is refused: open this page and sign in here"
    origin = headers.get(b"origin")
    if origin is None or (own and origin.strip() == b"null"):
        return None
    if not _same_host(origin.decode("latin-1"), headers.get(b"host", b"").decode("latin-1")):
        return "a sign-in sent from another origin is refused: open this page and sign in here"
    return None


def _same_host(origin: str, host: str) -> bool:
    """Whether an ``Origin`` names this server's ``Host`` (the port defaulting by the origin's scheme for both)."""
    try:
        sent = urlsplit(origin.strip())
        here = urlsplit(f"//{host.strip()}")
        default = _DEFAULT_PORTS.get(sent.scheme)
        sent_port, here_port = sent.port or default, here.port or default
    except ValueError:
        return False
    if sent.scheme not in _DEFAULT_PORTS or not sent.hostname or not here.hostname:
        return False
    return sent.hostname == here.hostname and sent_port == here_port


def _credentials(scope: Scope) -> tuple[str | None, str | None]:
    """The Authorization header, and the session cookie's value."""
    authorization: str | None = None
    cookie_header = b""
    for key, value in scope.get("headers", ()):
        name = key.lower()
        if name == b"authorization":
            authorization = value.decode("latin-1")
        elif name == b"cookie":
            cookie_header = value
    for part in cookie_header.decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return authorization, value
    return authorization, None


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


def _cookie(secret: str, path: str, *, secure: bool, max_age: int) -> str:
    flags = f"; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
    return f"{COOKIE}={secret}{flags}"


async def _redirect(send: Send, location: str, *, cookie: str | None = None) -> None:
    headers: list[tuple[bytes, bytes]] = [
        (b"location", location.encode("latin-1", "replace")),
        (b"content-length", b"0"),
        (b"cache-control", b"no-store"),
    ]
    if cookie is not None:
        headers.append((b"set-cookie", cookie.encode("latin-1")))
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
Your project's runs are shown; this browser keeps a session (not the token) until you sign out.</p>{message}
<form method="post" action="{html.escape(root)}/login">
<input type="hidden" name="next" value="{html.escape(target)}">
<label>Token <input type="password" name="token" autocomplete="off" required autofocus></label>
<button type="submit">Sign in</button></form></main></body></html>
"""
