"""API tokens: created by ``evalsi server token create``, stored as sha256 digests, bound to a project.

This module is what a token means (its permissions, its principal); :mod:`._token_store` keeps them in the database.

A token is ``evalsi_`` followed by 32 random bytes (base64url). Its secret is shown once; the database holds only
its sha256, which is enough for a high-entropy secret (no password-style stretching is needed).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
        """Whether the token carries ``permission``.

        Args:
            permission: One of :data:`PERMISSIONS`, such as ``evaluations.run``.

        """
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
