"""The token store: API tokens in the database (only their sha256), with a short in-memory memo of known ones."""

from __future__ import annotations

import secrets
import threading
import time

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from evalsi.server._tables import api_tokens
from evalsi.server._tokens import PREFIX, Principal, TokenInfo, check_permissions, digest


class TokenStoreUnavailable(Exception):
    """The token database could not be read (the caller answers ``unavailable``; the cause is logged, not sent)."""


class TokenStore:
    """Tokens in the database, with a short in-memory memo so a call costs no query once its token is known.

    Args:
        engine: The server's database.
        memo_seconds: How long a looked-up token (or its absence) is remembered; a revocation takes up to this long.

    """

    def __init__(self, engine: Engine, memo_seconds: float = 5.0) -> None:
        self.engine = engine
        self.memo_seconds = memo_seconds
        self._memo: dict[str, tuple[Principal | None, float]] = {}
        self._lock = threading.Lock()

    def create(self, project: str, permissions: list[str], name: str = "") -> str:
        """Store a new token and return its secret (the only time it is visible).

        Args:
            project: The project the token acts for.
            permissions: The permissions it carries.
            name: A label for listings; the project when empty.

        Raises:
            ValueError: The project is empty or a permission is unknown.

        """
        if not project:
            raise ValueError("a token needs a project")
        perms = check_permissions(permissions)
        secret = PREFIX + secrets.token_urlsafe(32)
        with self.engine.begin() as connection:
            connection.execute(
                insert(api_tokens).values(
                    name=name or project,
                    project=project,
                    permissions=" ".join(perms),
                    token_hash=digest(secret),
                    created_at=time.time(),
                )
            )
        return secret

    def memoized(self, secret: str) -> tuple[bool, Principal | None]:
        """``(True, principal or None)`` when the token was looked up within the memo period, else ``(False, None)``.

        Args:
            secret: The token as sent by the caller.

        """
        with self._lock:
            memo = self._memo.get(digest(secret))
        if memo is not None and memo[1] > time.monotonic():
            return True, memo[0]
        return False, None

    def verify(self, secret: str) -> Principal | None:
        """The principal of a valid, unrevoked token; None otherwise.

        Args:
            secret: The token as sent by the caller.

        Raises:
            TokenStoreUnavailable: The database could not be read.

        """
        key = digest(secret)
        now = time.monotonic()
        with self._lock:
            memo = self._memo.get(key)
        if memo is not None and memo[1] > now:
            return memo[0]
        try:
            principal = self._lookup(key)
        except SQLAlchemyError as exc:
            raise TokenStoreUnavailable(str(exc)) from exc
        with self._lock:
            if len(self._memo) > 10_000:
                self._memo.clear()
            self._memo[key] = (principal, now + self.memo_seconds)
        return principal

    def _lookup(self, key: str) -> Principal | None:
        query = select(api_tokens.c.project, api_tokens.c.permissions, api_tokens.c.name).where(
            api_tokens.c.token_hash == key, api_tokens.c.revoked_at.is_(None)
        )
        with self.engine.connect() as connection:
            row = connection.execute(query).first()
        if row is None:
            return None
        return Principal(project=row.project, permissions=frozenset(row.permissions.split()), token_name=row.name)

    def list(self) -> list[TokenInfo]:
        """Every stored token, oldest first."""
        with self.engine.connect() as connection:
            rows = connection.execute(select(api_tokens).order_by(api_tokens.c.id)).all()
        return [
            TokenInfo(r.id, r.name, r.project, tuple(r.permissions.split()), r.created_at, r.revoked_at is not None)
            for r in rows
        ]

    def revoke(self, token_id: int) -> bool:
        """Revoke a token by id; False when there is no such active token. Memos expire within seconds.

        Args:
            token_id: The token's id in the database.

        """
        with self.engine.begin() as connection:
            result = connection.execute(
                update(api_tokens)
                .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
                .values(revoked_at=time.time())
            )
        with self._lock:
            self._memo.clear()
        return bool(result.rowcount)
