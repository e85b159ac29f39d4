"""API tokens: created by ``evalsi server token create``, stored as sha256 digests, bound to a project.

A token is ``evalsi_`` followed by 32 random bytes (base64url). Its secret is shown once; the database holds only
its sha256, which is enough for a high-entropy secret (no password-style stretching is needed).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy import Engine, insert, select, update

from evalsi.server._tables import api_tokens

RUN = "evaluations.run"
RUNS_CODE = "resource.runs_code"
METRICS = "metrics.read"
EVALUATORS_WRITE = "evaluators.write"
PERMISSIONS = (RUN, RUNS_CODE, METRICS, EVALUATORS_WRITE)
"""Every permission a token can carry: score rewards, and start, read and cancel evaluation jobs; score components
that run code (in the sandbox, at the server's isolation floor or higher); read ``/metrics`` on the main port
(every project's counts: an operator's); upload evaluators (with ``resource.runs_code``: they are code)."""
PREFIX = "evalsi_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's project and permissions."""

    project: str
    permissions: frozenset[str]
    token_name: str = ""

    def allows(self, permission: str) -> bool:
        """Whether the token carries ``permission``."""
        return permission in self.permissions


@dataclass(frozen=True)
class TokenInfo:
    """A stored token, without its secret."""

    id: int
    name: str
    project: str
    permissions: tuple[str, ...]
    created_at: float
    revoked: bool


def digest(secret: str) -> str:
    """The stored form of a token secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def check_permissions(permissions: list[str]) -> list[str]:
    """The permissions, de-duplicated and in order.

    Raises:
        ValueError: A name is not a known permission (the message lists the valid ones).

    """
    unknown = [p for p in permissions if p not in PERMISSIONS]
    if unknown:
        raise ValueError(f"unknown permission {unknown[0]!r} (valid: {', '.join(PERMISSIONS)})")
    return list(dict.fromkeys(permissions))


class TokenStore:
    """Tokens in the database, with a short in-memory memo so a call costs no query once its token is known."""

    def __init__(self, engine: Engine, memo_seconds: float = 5.0) -> None:
        self.engine = engine
        self.memo_seconds = memo_seconds
        self._memo: dict[str, tuple[Principal | None, float]] = {}
        self._lock = threading.Lock()

    def create(self, project: str, permissions: list[str], name: str = "") -> str:
        """Store a new token and return its secret (the only time it is visible).

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
        """``(True, principal or None)`` when the token was looked up within the memo period, else ``(False, None)``."""
        with self._lock:
            memo = self._memo.get(digest(secret))
        if memo is not None and memo[1] > time.monotonic():
            return True, memo[0]
        return False, None

    def verify(self, secret: str) -> Principal | None:
        """The principal of a valid, unrevoked token; None otherwise."""
        key = digest(secret)
        now = time.monotonic()
        with self._lock:
            memo = self._memo.get(key)
        if memo is not None and memo[1] > now:
            return memo[0]
        principal = self._lookup(key)
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
        """Revoke a token by id; False when there is no such active token. Memos expire within seconds."""
        with self.engine.begin() as connection:
            result = connection.execute(
                update(api_tokens)
                .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
                .values(revoked_at=time.time())
            )
        with self._lock:
            self._memo.clear()
        return bool(result.rowcount)
