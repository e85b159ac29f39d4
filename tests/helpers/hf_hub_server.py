"""A Hugging Face Hub stand-in on loopback: the API paths ``huggingface_hub``'s ``HfFileSystem`` reads (``hf://``).

It serves the model repositories given as folders on disk, read-only, at one revision (``main``):
``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (repo info), ``GET
/api/models/{repo}/tree/{rev}[/{path}]`` (listing, ``recursive``), ``POST /api/models/{repo}/paths-info/{rev}``,
and ``GET``/``HEAD /{repo}/resolve/{rev}/{path}`` (file bytes, ``Range`` honoured). Unknown repositories answer
404 with ``X-Error-Code: RepoNotFound``, as the Hub does. Point ``HF_ENDPOINT`` at :attr:`HubServer.endpoint`.

Standard library only, so it runs beside any environment. As a process: ``python -m tests.helpers.hf_hub_server
REPO_ID=FOLDER ...`` prints the endpoint on stdout and serves until killed.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

SHA = "0" * 40
"""The one commit every repository is at."""


class HubServer:
    """Serves ``repos`` (repo id -> folder) on ``127.0.0.1``; a context manager."""

    def __init__(self, repos: dict[str, Path]) -> None:
        self.repos = {name: Path(folder) for name, folder in repos.items()}
        self.requests: list[str] = []
        handler = type("Handler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="hf-hub-standin", daemon=True)

    @property
    def endpoint(self) -> str:
        """The value for ``HF_ENDPOINT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> HubServer:
        """Serve on a thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _entry(root: Path, path: Path) -> dict[str, Any]:
    rel = path.relative_to(root).as_posix()
    if path.is_dir():
        return {"type": "directory", "path": rel, "oid": hashlib.sha1(rel.encode()).hexdigest()}
    data = path.read_bytes()
    return {"type": "file", "path": rel, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        self.hub.requests.append(f"{self.command} {self.path}")

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, *, head: bool = False) -> None:
        self.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, payload: Any, status: int = 200) -> None:
        self._send(status, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def _not_found(self, code: str, head: bool = False) -> None:
        body = json.dumps({"error": f"{code}"}).encode()
        self._send(404, body, {"Content-Type": "application/json", "X-Error-Code": code}, head=head)

    def _repo(self, path: str) -> tuple[str, Path, str] | None:
        """The repo whose id starts ``path``, its folder, and the rest of the path."""
        for name, folder in sorted(self.hub.repos.items(), key=lambda item: -len(item[0])):
            if path == name or path.startswith(name + "/"):
                return name, folder, path[len(name) :].lstrip("/")
        return None

    def do_GET(self) -> None:
        self._get(head=False)

    def do_HEAD(self) -> None:
        self._get(head=True)

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        match = re.fullmatch(r"/api/models/(.+)/paths-info/[^/]+", unquote(url.path))
        found = self._repo(match.group(1)) if match else None
        if found is None:
            return self._not_found("RepoNotFound")
        _, folder, _ = found
        fields = json.loads(body) if body.startswith("{") else {k: v for k, v in parse_qs(body).items()}
        paths = fields.get("paths", [])
        paths = [paths] if isinstance(paths, str) else paths
        self._json([_entry(folder, folder / p) for p in paths if (folder / p).exists()])

    def _get(self, head: bool) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/") :]
            tree = re.fullmatch(r"(.+?)/tree/([^/]+)(?:/(.*))?", rest)
            if tree:
                found = self._repo(tree.group(1))
                if found is None or found[2]:
                    return self._not_found("RepoNotFound")
                folder = found[1] / (tree.group(3) or "")
                if not folder.is_dir():
                    return self._not_found("EntryNotFound")
                walk = folder.rglob("*") if query.get("recursive", ["false"])[0].lower() == "true" else folder.iterdir()
                return self._json([_entry(found[1], p) for p in sorted(walk)])
            revision = re.fullmatch(r"(.+?)(?:/revision/([^/]+))?", rest)
            found = self._repo(revision.group(1)) if revision else None
            if found is None or found[2]:
                return self._not_found("RepoNotFound")
            siblings = [{"rfilename": p.relative_to(found[1]).as_posix()} for p in found[1].rglob("*") if p.is_file()]
            return self._json({"id": found[0], "modelId": found[0], "sha": SHA, "private": False, "siblings": siblings})
        resolve = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
        found = self._repo(resolve.group(1)) if resolve else None
        if resolve is None or found is None or found[2]:
            return self._not_found("RepoNotFound", head)
        file = found[1] / resolve.group(3)
        if not file.is_file():
            return self._not_found("EntryNotFound", head)
        data = file.read_bytes()
        headers = {"ETag": f'"{hashlib.sha1(data).hexdigest()}"', "X-Repo-Commit": SHA, "Accept-Ranges": "bytes"}
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if wanted:
            start = int(wanted.group(1))
            end = min(int(wanted.group(2)) if wanted.group(2) else len(data) - 1, len(data) - 1)
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return self._send(206, data[start : end + 1], headers, head=head)
        self._send(200, data, headers, head=head)


def main() -> None:
    """Serve ``REPO_ID=FOLDER`` arguments until killed; print the endpoint first."""
    repos = dict(arg.split("=", 1) for arg in sys.argv[1:])
    server = HubServer({name: Path(folder) for name, folder in repos.items()}).start()
    print(server.endpoint, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
