"""One error type for the service layer, rendered by each protocol with the same message.

Each protocol renders it as its own: an HTTP status and JSON body, a gRPC status, a Connect error.

HTTP JSON bodies are the error form of :mod:`evalsi.rewards.wire`: a contract ``code`` the library's ``server=``
client acts on, and the canonical gRPC/Connect ``status``.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import sys
import tempfile
from typing import Any

from evalsi.errors import EvalsiError
from evalsi.rewards.wire import ErrorBody, error_for, error_json
from evalsi.server._status import http_status

log = logging.getLogger("evalsi.server")


class ServiceError(EvalsiError):
    """A refused or failed call: canonical ``status`` code, message, and contract ``code`` with extra fields."""

    def __init__(self, status: str, message: str, code: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or status
        self.fields = fields

    @property
    def http_status(self) -> int:
        """The HTTP status answering this error: a request too large to serve (``*_too_large``) is 413."""
        return http_status(self.status, self.code)

    def payload(self) -> ErrorBody:
        """The JSON body of the HTTP answer."""
        return error_json(self.code, self.status, self.message, **self.fields)


def from_exception(exc: BaseException) -> ServiceError:
    """The service error for an exception raised while binding or scoring (the wire's mapping).

    An unexpected exception is logged here with its traceback, for the operator; the caller is told only that
    the call failed inside the server, never the exception's text, which may hold paths or internal state.
    """
    if isinstance(exc, ServiceError):
        return exc
    _, body = error_for(exc)
    fields = dict(body["error"])
    code, status, message = fields.pop("code"), fields.pop("status"), fields.pop("message")
    if status != "internal":
        return ServiceError(str(status), str(message), str(code), **fields)
    incident = secrets.token_hex(4)
    log.error("internal error %s", incident, exc_info=(type(exc), exc, exc.__traceback__))
    return ServiceError("internal", f"internal error (the server logged it as {incident})", incident=incident)


_CLASS_NAME = re.compile(r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Timeout)(?=: )(?:: )")
"""A Python exception's class name as ``f"{type(exc).__name__}: {exc}"`` writes it (dotted module path too)."""


def _host_paths() -> re.Pattern[str]:
    prefixes = {
        tempfile.gettempdir(),
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.expanduser("~"),
        os.getcwd(),
    }
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
