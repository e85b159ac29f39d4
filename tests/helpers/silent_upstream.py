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
    listener.settimeout(0.1)  # so the accepting thread notices the stop
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:  # closed
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for connection in accepted:
            connection.close()
