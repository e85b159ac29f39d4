"""Real server processes for the tests: start ``python -m evalsi.cli.server`` on loopback, talk to it, stop it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import yaml

from evalsi.server._db import migrate, open_engine
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2_grpc as pb_grpc
from evalsi.server._token_store import TokenStore
from tests.server.messages import message_to_json, request_message

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0
CONNECT_PATH = "/evalsi.v1alpha1.RewardService/ScoreRewards"


def write_config(directory: Path, spec: dict[str, Any], name: str = "server.yaml") -> Path:
    """A ServerConfig file with loopback listeners on free ports and the test evaluators imported.

    A ``listen`` section in ``spec`` adds to the loopback defaults, so a test that sets one option still binds free
    ports (not the default 8080, which parallel workers would fight over).
    """
    listen = {"host": "127.0.0.1", "port": 0, "grpc_port": 0, **spec.get("listen", {})}
    body = {"imports": ["tests.server.plugins"], **spec, "listen": listen}
    path = directory / name
    document = {"apiVersion": "evals.si/v1alpha1", "kind": "ServerConfig", "metadata": {"name": "test"}, "spec": body}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def make_token(database_url: str, project: str, permissions: list[str]) -> str:
    """Create a token in the server's database (migrating it first, as the CLI does)."""
    engine = open_engine(database_url)
    try:
        migrate(engine)
        return TokenStore(engine).create(project, permissions)
    finally:
        engine.dispose()


class ServerProcess:
    """One ``evalsi server`` process; ``http`` and ``grpc`` are its addresses once started."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        env = {
            **os.environ,
            **(env or {}),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "evalsi.cli.server", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(config.parent),
        )
        self.stderr_lines: list[str] = []
        self._drain_stderr = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain_stderr.start()
        self.ready = self._wait_ready()
        self.http: str = self.ready["http"]
        self.grpc: str = self.ready["grpc"]

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr_lines.append(line.decode(errors="replace"))

    def _wait_ready(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        result: dict[str, Any] = {}

        def read() -> None:
            assert self.process.stdout is not None
            line = self.process.stdout.readline()
            if line:
                result.update(orjson.loads(line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(READY_TIMEOUT)
        if result.get("event") != "ready":
            self.kill()
            raise RuntimeError(f"server did not start: {''.join(self.stderr_lines)[-3000:]}")
        return result

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the process to drain and exit; returns its exit code."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """Stop the process now (clean-up after a failure)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.terminate(30)


def post_http(
    server: ServerProcess, token: str | None, spec: Any, rollouts: Any, timeout: float = 60
) -> httpx.Response:
    """``POST /v1alpha1/rewards:score`` with a JSON body."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(
        server.http + "/v1alpha1/rewards:score",
        json={"spec": spec, "rollouts": rollouts},
        headers=headers,
        timeout=timeout,
    )


def post_connect_json(server: ServerProcess, token: str | None, spec: Any, rollouts: Any) -> httpx.Response:
    """The Connect unary protocol with the JSON codec, spoken by hand."""
    headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = orjson.dumps({"spec": spec, "rollouts": rollouts})
    return httpx.post(server.http + CONNECT_PATH, content=body, headers=headers, timeout=60)


def call_grpc(server: ServerProcess, token: str | None, spec: Any, rollouts: Any) -> tuple[str, Any]:
    """``ScoreRewards`` over gRPC: ("ok", response as HTTP JSON) or (status code name, details)."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(server.grpc) as channel:
        stub = pb_grpc.RewardServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            response = stub.ScoreRewards(request_message(spec, rollouts), metadata=metadata, timeout=60)
        except grpc.RpcError as exc:
            return exc.code().name.lower(), exc.details()
    return "ok", message_to_json(response)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text output (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        sample, _, raw = key.partition("{")
        if sample == name and ",".join(sorted(raw.rstrip("}").split(","))) == wanted:
            return float(value)
    return 0.0
