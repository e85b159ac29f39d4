"""Browser sessions of the results viewer: a random id in the cookie, its digest in the database, an end.

Signing in at ``/ui/login`` with an API token opens a session: the browser keeps a random secret (never the
token), the database keeps the secret's sha256, the token's sha256 and when the session ends, so every replica on
the database knows it. A request's session is looked up with its token on every request: it ends when it expires
(``ui.session_ttl``), when the browser signs out, and as soon as its token is revoked or replaced (the token's
current permissions apply). A token keeps at most :data:`MAX_PER_TOKEN` sessions (the oldest end first), and ended
sessions are removed whenever one is opened.
"""

from __future__ import annotations

import secrets
import time

from sqlalchemy import Engine, delete, insert, select

from evalsi.server._tables import api_tokens
from evalsi.server._tokens import Principal, digest
from evalsi.server.ui._tables import ui_sessions

MAX_PER_TOKEN = 32
"""Sessions one token may have open; signing in again past this ends its oldest."""


class Sessions:
    """Viewer sessions in the server's database."""

    def __init__(self, engine: Engine, ttl: float) -> None:
        self.engine = engine
        self.ttl = ttl

    def open(self, token: str) -> str:
        """A new session for a (checked) API token; returns its secret, for the browser's cookie alone."""
        secret = secrets.token_urlsafe(32)
        token_hash = digest(token)
        now = time.time()
        newest = (
            select(ui_sessions.c.id_hash)
            .where(ui_sessions.c.token_hash == token_hash)
            .order_by(ui_sessions.c.created_at.desc())
            .limit(MAX_PER_TOKEN)
        )
        revoked = select(api_tokens.c.token_hash).where(api_tokens.c.revoked_at.is_not(None))
        with self.engine.begin() as connection:
            connection.execute(
                delete(ui_sessions).where(
                    (ui_sessions.c.expires_at <= now) | ui_sessions.c.token_hash.in_(revoked.scalar_subquery())
                )
            )
            connection.execute(
                insert(ui_sessions).values(
                    id_hash=digest(secret), token_hash=token_hash, created_at=now, expires_at=now + self.ttl
                )
            )
            connection.execute(
                delete(ui_sessions).where(
                    ui_sessions.c.token_hash == token_hash,
                    ui_sessions.c.id_hash.not_in(select(newest.subquery().c.id_hash)),
                )
            )
        return secret

    def principal(self, secret: str) -> Principal | None:
        """The caller of a live session: its token's project and current permissions; None when it has ended."""
        query = (
            select(api_tokens.c.project, api_tokens.c.permissions, api_tokens.c.name)
            .select_from(ui_sessions.join(api_tokens, api_tokens.c.token_hash == ui_sessions.c.token_hash))
            .where(
                ui_sessions.c.id_hash == digest(secret),
                ui_sessions.c.expires_at > time.time(),
                api_tokens.c.revoked_at.is_(None),
            )
        )
        with self.engine.connect() as connection:
            row = connection.execute(query).first()
        if row is None:
            return None
        return Principal(project=row.project, permissions=frozenset(row.permissions.split()), token_name=row.name)

    def close(self, secret: str) -> None:
        """End a session (signing out): its id stops working on every replica at once."""
        with self.engine.begin() as connection:
            connection.execute(delete(ui_sessions).where(ui_sessions.c.id_hash == digest(secret)))
