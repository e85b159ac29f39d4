"""HTTP connections before any token: how many are held, and how long one may take to send a request's headers.

uvicorn arms its keep-alive timer only after an answer, and any byte cancels it: a socket that connects and never
sends, or sends a header line now and then, is otherwise held forever, and enough of them exhaust the server's file
descriptors. :func:`limited_protocol` makes uvicorn's protocol class close

- a connection accepted while ``listen.max_connections`` are open, at once;
- a connection that has not sent a request's complete headers within ``listen.header_timeout`` of its connect (or
  of the end of its previous answer), however slowly it sends them.

The request body then has ``rewards.body_timeout`` (see :mod:`evalsi.server.transport._guard`), and an idle keep-alive
connection ``listen.idle_timeout`` (uvicorn's own timer).
"""

from __future__ import annotations

import asyncio
from typing import Any

_Protocol = Any  # uvicorn's HttpToolsProtocol or H11Protocol


def limited_protocol(base: type[asyncio.Protocol], max_connections: int, header_timeout: float) -> type[Any]:
    """``base`` (a uvicorn HTTP protocol class) with a connection cap and a deadline on each request's headers."""

    class Limited(base):  # type: ignore[valid-type,misc]
        _refused = False
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            if len(self.server_state.connections) >= max_connections:
                self._refused = True
                transport.close()
                return
            super().connection_made(transport)
            self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._stop_header_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:  # a request's headers are complete: its body has its own deadline
                self._stop_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self._await_headers()  # waiting for the next request on this connection

        def _await_headers(self) -> None:
            self._stop_header_timer()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _stop_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    Limited.__name__ = Limited.__qualname__ = f"Limited{base.__name__}"
    return Limited
