"""A process-wide gate on requests to upstreams (judges, reward models, run targets): none unless one is set.

Every upstream HTTP attempt of evalsi's clients goes through its retrying transports, which take
a slot of the gate for the request's upstream (its scheme, host and port) around each attempt. With no gate set
(the default) a slot costs one ``None`` check. A gate shared beyond the process (``evalsi.ray``'s limiter
actors) lets every process of a cluster keep one concurrency and rate limit per upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx


class UpstreamGate(Protocol):
    """Grants slots per upstream; ``acquire`` waits for one and returns a token that ``release`` gives back."""

    def acquire(self, upstream: str) -> Any:
        """Wait for a slot (from a thread)."""
        ...

    async def acquire_async(self, upstream: str) -> Any:
        """Wait for a slot (from an event loop)."""
        ...

    def release(self, upstream: str, token: Any) -> None:
        """Give a slot back (never blocks)."""
        ...


_gate: UpstreamGate | None = None


def set_gate(gate: UpstreamGate | None) -> UpstreamGate | None:
    """Install ``gate`` for this process (None removes it); returns the one it replaces."""
    global _gate
    previous, _gate = _gate, gate
    return previous


def upstream_of(url: httpx.URL) -> str:
    """``scheme://host:port`` of a URL: what a limit is keyed by.

    Example:
        >>> import httpx
        >>> upstream_of(httpx.URL("http://rm.internal:5000/get_reward"))
        'http://rm.internal:5000'

    """
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{url.scheme}://{url.host}:{port}"


@contextmanager
def slot(url: httpx.URL) -> Iterator[None]:
    """Hold a slot of the gate for ``url``'s upstream (nothing when no gate is set)."""
    gate = _gate
    if gate is None:
        yield
        return
    upstream = upstream_of(url)
    token = gate.acquire(upstream)
    try:
        yield
    finally:
        gate.release(upstream, token)


@asynccontextmanager
async def slot_async(url: httpx.URL | str) -> AsyncIterator[None]:
    """:func:`slot` for an event loop (a URL given as text is parsed only when a gate is set)."""
    gate = _gate
    if gate is None:
        yield
        return
    if isinstance(url, str):
        import httpx  # only with a gate set: a run without one never loads httpx

        url = httpx.URL(url)
    upstream = upstream_of(url)
    token = await gate.acquire_async(upstream)
    try:
        yield
    finally:
        gate.release(upstream, token)
