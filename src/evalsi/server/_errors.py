"""One error type for the service layer, rendered by each protocol with the same message.

Each protocol renders it as its own: an HTTP status and JSON body, a gRPC status, a Connect error.

HTTP JSON bodies are ``{"error": {"code", "status", "message", ...}}``: ``code`` is the contract the library's
``server=`` client reads (``invalid_spec``, ``invalid_rollout`` with ``index``, ``reward_batch_failed`` with
``index``, ``component``, ``cause``; see ``evalsi.rewards._remote``), and ``status`` is the canonical gRPC/Connect
code (``invalid_argument``, ``failed_precondition``, ``unauthenticated``, ``permission_denied``...).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import sys
import tempfile
from typing import Any

from evalsi.errors import DataError, RewardBatchError, SpecError

log = logging.getLogger("evalsi.server")

HTTP_STATUS = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "failed_precondition": 422,
    "resource_exhausted": 429,
    "unavailable": 503,
    "internal": 500,
}
"""HTTP status of each canonical code. A batch failed under ``onError: raise`` is 422: the request was valid,
but the state of a component (e.g. the sandbox is down) prevented a reward."""


class ServiceError(Exception):
    """A refused or failed call: canonical ``status`` code, message, and contract ``code`` with extra fields."""

    def __init__(self, status: str, message: str, code: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or status
        self.fields = fields

    @property
    def http_status(self) -> int:
        """The HTTP status answering this error."""
        return HTTP_STATUS.get(self.status, 500)

    def payload(self) -> dict[str, Any]:
        """The JSON body of the HTTP answer."""
        return {"error": {"code": self.code, "status": self.status, "message": self.message, **self.fields}}


def from_exception(exc: BaseException) -> ServiceError:
    """The service error for an exception raised while binding or scoring."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, RewardBatchError):
        return ServiceError(
            "failed_precondition", str(exc), "reward_batch_failed",
            index=exc.index, component=exc.component, cause=exc.cause,
        )
    if isinstance(exc, DataError):
        return ServiceError("invalid_argument", str(exc), "invalid_rollout", index=exc.index)
    if isinstance(exc, SpecError):
        return ServiceError("invalid_argument", str(exc), "invalid_spec", path=exc.path or None)
    incident = secrets.token_hex(4)
    log.error("internal error %s", incident, exc_info=(type(exc), exc, exc.__traceback__))
    return ServiceError("internal", f"internal error (the server logged it as {incident})", incident=incident)


_CLASS_NAME = re.compile(r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Timeout)(?=: )(?:: )")
"""A Python exception's class name as ``f"{type(exc).__name__}: {exc}"`` writes it (dotted module path too)."""


def _host_paths() -> re.Pattern[str]:
    prefixes = {tempfile.gettempdir(), sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.expanduser("~"),
                os.getcwd()}
    words = sorted((p.rstrip("/") for p in prefixes if len(p.rstrip("/")) > 1), key=len, reverse=True)
    return re.compile("(?:" + "|".join(re.escape(w) for w in words) + r")(?:/[^\s'\",:;()\[\]]*)?")


_HOST_PATHS = _host_paths()


def redact(reason: str | None) -> str | None:
    """An error reason fit for a tenant: host paths become ``<server path>``, exception class names are dropped.

    The failure itself (what failed, and the message) stays, so the tenant can still act on it.
    """
    if not reason:
        return reason
    return _CLASS_NAME.sub("", _HOST_PATHS.sub("<server path>", reason))
