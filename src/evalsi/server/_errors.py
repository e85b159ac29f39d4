"""One error type for the service layer, rendered by each protocol with the same message.

Each protocol renders it as its own: an HTTP status and JSON body, a gRPC status, a Connect error.

HTTP JSON bodies are the error form of :mod:`evalsi.rewards.wire`: a contract ``code`` the library's ``server=``
client acts on, and the canonical gRPC/Connect ``status``.
"""

from __future__ import annotations

import logging
from typing import Any

from evalsi.errors import EvalsiError
from evalsi.rewards.wire import HTTP_STATUS, ErrorBody, error_for, error_json

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
        """The HTTP status answering this error."""
        return HTTP_STATUS.get(self.status, 500)

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
    if status == "internal":
        log.error("internal error while serving a call", exc_info=exc)
    return ServiceError(str(status), str(message), str(code), **fields)
