"""``--serve vllm``: start ``vllm serve <checkpoint>`` on a free loopback port, wait for health, stop it after.

The server runs in its own process group, so stopping it stops every worker it forked, and a Ctrl-C in the
terminal reaches evalsi alone, which then stops the server itself. Its output goes to a log file whose last
lines are shown when it fails to start.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import httpx

from evalsi.training._serving import ModelRef, Served, ServingError, UnservableError, serving_advice

STOP_GRACE_SECONDS = 30.0
"""How long vLLM gets to exit after SIGTERM before it is killed."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now.

    Args:
        host: The address to find a port on.

    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class VLLM:
    """Starts ``vllm serve`` for each checkpoint (full weights) and stops it once the checkpoint is evaluated.

    Args:
        executable: The ``vllm`` command (a path, or a name on ``PATH``).
        args: Extra arguments for ``vllm serve`` (``--tensor-parallel-size 2``...).
        host: The interface to listen on.
        startup_timeout: Seconds to wait for ``/health`` to answer 200.
        log_dir: Where each server's output is kept (default: a temporary directory).
        tokenizer: The tokenizer (path or name) to serve with (``vllm serve --tokenizer``), for checkpoints saved
            without their own.

    """

    name = "vllm"

    def __init__(
        self,
        executable: str = "vllm",
        args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 900.0,
        log_dir: Path | None = None,
        tokenizer: str | None = None,
    ) -> None:
        self.executable = executable
        self.args = list(args)
        self.tokenizer = tokenizer
        self.host = host
        self.startup_timeout = startup_timeout
        self.log_dir = log_dir

    def command(self, ref: ModelRef, port: int) -> list[str]:
        """The ``vllm serve`` command line for a checkpoint.

        Args:
            ref: The checkpoint.
            port: The port to serve on.

        """
        location = str(ref.files.path) if ref.files is not None else ref.location
        return [
            self.executable,
            "serve",
            location,
            "--host",
            self.host,
            "--port",
            str(port),
            "--served-model-name",
            ref.served_name,
            *(["--tokenizer", self.tokenizer] if self.tokenizer is not None else []),
            *self.args,
        ]

    @contextlib.contextmanager
    def serve(self, ref: ModelRef) -> Iterator[Served]:
        """Start the server, wait until it is healthy, yield its URL and model name, stop it.

        Args:
            ref: The checkpoint (full weights).

        Raises:
            UnservableError: The checkpoint holds something other than full weights (an adapter, a state dictionary).
            ServingError: vLLM could not start, exited, or was not healthy within ``startup_timeout``.

        """
        if ref.files is not None and ref.files.kind != "weights":
            raise UnservableError(
                f"{ref.location} holds a {ref.files.kind}, which vllm serve does not load as a model; "
                + serving_advice(ref.files.kind)
            )
        port = free_port(self.host)
        command = self.command(ref, port)
        log_dir = self.log_dir or Path(tempfile.gettempdir())
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"vllm-{ref.served_name}-{port}.log"
        with log_path.open("wb") as log_file:
            process = self._start(command, log_file)
            try:
                base = f"http://{self.host}:{port}"
                wait_healthy(process, base, self.startup_timeout, log_path, command)
                yield Served(f"{base}/v1", ref.served_name)
            finally:
                stop_process(process)

    def _start(self, command: list[str], log_file: IO[bytes]) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as exc:
            raise ServingError(f"cannot start {shlex.join(command)}: {exc} (is vLLM installed?)") from None


def wait_healthy(
    process: subprocess.Popen[bytes], base: str, timeout: float, log_path: Path, command: list[str]
) -> None:
    """Poll ``GET /health`` until it answers 200; fail when the process exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    with httpx.Client(timeout=5.0) as client:
        while True:
            code = process.poll()
            if code is not None:
                raise ServingError(
                    f"{shlex.join(command)} exited with code {code} before it was healthy; "
                    f"last lines of {log_path}:\n{tail(log_path)}"
                )
            with contextlib.suppress(httpx.TransportError):
                if client.get(f"{base}/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise ServingError(
                    f"{shlex.join(command)} was not healthy within {timeout:g} s; "
                    f"last lines of {log_path}:\n{tail(log_path)}"
                )
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)


def stop_process(process: subprocess.Popen[bytes], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group, wait up to ``grace`` seconds, then SIGKILL it; never leaves an orphan.

    Args:
        process: A process started in its own process group.
        grace: Seconds to wait after SIGTERM.

    """
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    # Workers the server forked may outlive it in its group: end them too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file ('' when it is missing)."""
    try:
        text = path.read_bytes()[-8192:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
