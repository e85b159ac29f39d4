"""An upstream that accepts connections on loopback and never answers: a hung reward model or judge."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def silent_upstream() -> Iterator[tuple[str, list[socket.socket]]]:
    """``("http://127.0.0.1:PORT", accepted)``: every connection is accepted, held open and never answered."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:  # closed
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()
        thread.join(5)
        for connection in accepted:
            connection.close()
