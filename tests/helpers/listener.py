"""A bare TCP listener on loopback that counts the connections made to it: a request that must never be sent
(a fetch of a client-chosen URL) shows up as one."""

from __future__ import annotations

import socket
import threading


class Listener:
    """Accepts and closes every connection on a free loopback port; ``connections`` counts them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/schema.json"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        """Stop listening."""
        self.sock.close()
