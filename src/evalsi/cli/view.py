"""``evalsi view [PATH ...]``: serve a read-only web viewer of results files, log directories and score files.

The viewer needs the ``view`` extra (starlette, uvicorn, jinja2); it is imported when the command runs.
"""

from __future__ import annotations

import ipaddress
import threading
import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from evalsi.cli._console import fail, stderr

LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1", "[::1]"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def view_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Results files, reward score files or directories (log dirs) to show (default: .)."),
    ] = None,
    port: Annotated[int, typer.Option("--port", "-p", help="Port to listen on (0 picks a free one).")] = 0,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; anything but loopback exposes the files.")
    ] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open", help="Open the viewer in a web browser.")] = False,
) -> None:
    """Serve a read-only web viewer: runs, record drill-down, comparisons, learning curves, reward files.

    Only the files and directories given are readable through it. It listens on loopback unless --host says
    otherwise. Stop it with Ctrl-C.

    Exit codes: 0 stopped; 2 a path does not exist, the port is taken, or the `view` extra is missing.
    """
    try:
        import uvicorn

        from evalsi.rewards.serve import listening_socket
        from evalsi.view import create_app
    except ModuleNotFoundError as exc:
        fail(f"the viewer needs the `view` extra ({exc.name} is missing): pip install 'evalsi[view]'")
    roots = paths or [Path.cwd()]
    for path in roots:
        if not path.exists():
            fail(f"{path}: no such file or directory")
    loopback = _is_loopback(host)
    app = create_app(roots, allowed_hosts=LOOPBACK_NAMES if loopback else None)
    try:
        sock = listening_socket(host, port)
        sock.listen(128)  # connections made as soon as the URL is printed wait in the backlog
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    if not loopback:
        stderr.print(
            f"[yellow]warning:[/] listening on {host}: anyone who can reach it can read these results", highlight=False
        )
    stderr.print(f"evalsi view: {url} (Ctrl-C stops)", highlight=False)
    print(url, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    server.run(sockets=[sock])
