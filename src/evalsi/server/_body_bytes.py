"""Request bytes held at once: ``rewards.max_inflight_bytes``, each project within its share, every protocol.

An HTTP JSON or Connect body takes its room before a byte of it is read (its ``Content-Length``, or the maximum
request size when it is chunked); a gRPC call takes the maximum message size before its message is received and
gives back what the message did not need once it has arrived, before it is decoded. A call past the gate waits
unread (TCP and HTTP/2 flow control push back on its sender), so the memory bodies take stays bounded however many
calls of whatever service arrive at once.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from evalsi.server._limits import Held, SharedGate, holding
from evalsi.server._metrics import Metrics


class BodyBytes:
    """The FIFO gate over request bytes, with each project's share and the server's gauges."""

    def __init__(self, capacity: int, share: int, metrics: Metrics) -> None:
        self.gate = SharedGate(capacity, share)
        self.metrics = metrics

    async def enter(self, project: str, length: int) -> Held:
        """Wait until ``length`` bytes (at most the project's share) fit; the :class:`Held` gives them back."""
        waiting = self.metrics.requests_waiting_to_read
        waiting.inc()
        try:
            return await self.gate.enter(project, length, self.metrics.request_bytes.inc)
        finally:
            waiting.dec()

    def hold(self, project: str, length: int) -> AbstractAsyncContextManager[Held]:
        """Hold room for ``length`` bytes for the body of the ``async with``, waiting for it first."""
        return holding(self.enter(project, length))
