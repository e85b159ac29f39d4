"""The transport's sections of the server config: ``listen`` (HTTP/Connect and gRPC) and ``metrics``."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from evalsi.server._durations import Duration
from evalsi.specs._model import SpecModel as _Model


class ListenConfig(_Model):
    """Where the server listens."""

    host: str = "127.0.0.1"
    """Address of both listeners (HTTP/Connect and gRPC)."""
    port: int = Field(default=8080, ge=0, le=65535)
    """HTTP port: JSON API, Connect, ``/healthz``, and ``/metrics`` for tokens with ``metrics.read`` (0 picks a
    free port)."""
    grpc_port: int | None = Field(default=50051, ge=0, le=65535)
    """gRPC port (0 picks a free port; null disables gRPC)."""
    max_connections: int = Field(default=1024, ge=1)
    """Most connections each listener (HTTP, gRPC) holds open at once; a further connection is closed as soon as
    it is accepted, so sockets no one sends on can never exhaust the server's file descriptors."""
    header_timeout: Duration = Field(default=10.0, gt=0)
    """Seconds a connection has to send a request's complete headers (counted from its connect, or from the end of
    its previous answer) and a gRPC client to complete its handshake; a slower one is closed: seconds, or ``10s``."""
    idle_timeout: Duration = Field(default=5.0, gt=0)
    """Seconds an HTTP connection may stay open between requests (keep-alive) without sending a byte."""
    grpc_idle_timeout: Duration = Field(default=300.0, gt=0)
    """Seconds a gRPC connection may stay open with no call in flight; then the server closes it (clients
    reconnect on their next call)."""
    max_grpc_calls: int = Field(default=1024, ge=1)
    """Most gRPC calls in flight at once (waiting ones included); a further call is refused
    ``resource_exhausted`` at once."""

    trusted_proxies: list[str] = Field(default_factory=list)
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/8``) of TLS-terminating proxies in front of the HTTP port:
    their ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed (the viewer's session cookie is then Secure
    behind an https proxy). Empty (the default): those headers are ignored, whoever sends them."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/8)") from None
        return value


class MetricsConfig(_Model):
    """Where Prometheus scrapes ``/metrics``."""

    port: int | None = Field(default=None, ge=0, le=65535)
    """A separate port serving ``/metrics`` without a token (keep it off the tenants' network); null: only the main
    port serves it, to tokens with the ``metrics.read`` permission."""
    host: str | None = None
    """Address of the metrics listener (default: ``listen.host``)."""
