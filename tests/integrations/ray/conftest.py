"""A real two-node Ray cluster on this machine, started once for the session and torn down after it.

The head node and a second node are each ``ray start --block`` in a process session of their own (their own
GCS/raylet/worker processes), joined over loopback; each has a custom resource (``evalsi_head``,
``evalsi_node_b``) so tests place actors on a chosen node. Teardown stops exactly those two process sessions
(SIGTERM, then SIGKILL), never other Ray processes on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("EVALSI_INTEGRATION"):  # the `ray` nox session sets it; the core suite has no ray
    collect_ignore_glob = ["*"]

ROOT = Path(__file__).resolve().parents[3]
START_BOUND = 300.0

# Token authentication with a token of this session's own, set before Ray is imported: the nodes, their workers
# and this driver all read it from the environment, and never a token file another Ray instance left in
# ~/.ray (with one there, `ray start` turns token auth on while a driver without the token is refused).
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
"""Seconds a node may take to start and join (a busy shared machine is slow)."""


def _free_port() -> int:
    """A free port below Linux's ephemeral range, so no server binding port 0 meanwhile can take it first."""
    while True:
        port = random.randrange(20_000, 32_000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def _ray_binary() -> str:
    return str(Path(sys.executable).with_name("ray"))


class Cluster:
    """The two nodes: their processes and the head's address."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.metrics_ports: list[int] = [_free_port(), _free_port()]
        """Each node's Prometheus endpoint (Ray's metrics agent)."""

    def start_node(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        # the checkout under test, also where evalsi is installed from another checkout (a shared environment)
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
        handle = (self.tmp / log).open("ab")
        command = [_ray_binary(), "start", "--block", "--disable-usage-stats", *args]
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.nodes.append(process)
        return process

    def log_tails(self) -> str:
        """The last lines each node's ``ray start`` wrote."""
        tails = []
        for log in ("head.log", "node-b.log"):
            path = self.tmp / log
            lines = path.read_text(errors="replace").splitlines()[-15:] if path.exists() else []
            tails.append(f"--- {log}\n" + "\n".join(lines))
        return "\n".join(tails)

    def stop(self) -> None:
        for process in self.nodes:
            _stop_session(process)


def _stop_session(process: subprocess.Popen[bytes]) -> None:
    """Stop a node: every process of the session its ``ray start`` leads (raylet, GCS, workers)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not _session_alive(process.pid):
                process.poll()
                return
            time.sleep(0.5)


def _session_alive(sid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session
            return True
    return False


def _wait_for_nodes(ray: Any, count: int, nodes: Cluster, join: list[str]) -> None:
    """Wait for ``count`` live nodes; a joining node whose ``ray start`` gave up is started again.

    ``ray start`` gives a raylet 30 s (not configurable) to register with the head, which a loaded machine can
    exceed; a new try then usually joins.
    """
    deadline = time.monotonic() + START_BOUND
    joining = nodes.nodes[-1]
    while time.monotonic() < deadline:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        if len(alive) >= count:
            return
        if joining.poll() is not None:
            _stop_session(joining)
            joining = nodes.start_node(*join, log="node-b.log")
        time.sleep(1)
    raise RuntimeError(f"the Ray cluster did not reach {count} nodes in {START_BOUND:g} s")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import ray

    nodes: Cluster | None = None
    try:
        for attempt in range(3):  # a port taken by another process between choosing and binding: choose again
            nodes = Cluster(tmp_path_factory.mktemp("ray-cluster"))
            try:
                _start(nodes, ray)
                break
            except Exception as exc:
                if ray.is_initialized():
                    ray.shutdown()
                nodes.stop()
                # why, on stderr (pytest shows it with the failure): the node logs are gone with the next attempt
                print(f"Ray test cluster, attempt {attempt + 1}: {exc!r}\n{nodes.log_tails()}", file=sys.stderr)
                if attempt == 2:
                    raise
        assert nodes is not None
        yield nodes
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if nodes is not None:
            nodes.stop()


def _start(nodes: Cluster, ray: Any) -> None:
    store = str(100 * 1024 * 1024)
    nodes.start_node(
        "--head",
        f"--port={nodes.port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=2",
        f"--object-store-memory={store}",
        "--include-dashboard=false",
        f"--metrics-export-port={nodes.metrics_ports[0]}",
        "--resources=" + json.dumps({"evalsi_head": 8, "evalsi_slot": 2, "evalsi_failover": 2}),
        log="head.log",
    )
    _wait_for_port(nodes)
    join = [
        f"--address={nodes.address}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=2",
        f"--object-store-memory={store}",
        "--resources=" + json.dumps({"evalsi_node_b": 8, "evalsi_slot": 2}),
        f"--metrics-export-port={nodes.metrics_ports[1]}",
    ]
    nodes.start_node(*join, log="node-b.log")
    ray.init(address=nodes.address, log_to_driver=False)
    _wait_for_nodes(ray, 2, nodes, join)


def add_node(nodes: Cluster, resources: dict[str, float], log: str) -> subprocess.Popen[bytes]:
    """Start one more node joined to the cluster (its own process session) and wait until it is alive.

    A test that loses a node starts one of its own this way, so the session's two nodes stay as they were. The node
    has an address of its own (127.0.0.2): a driver joins a raylet of its own address, so this process, whenever it
    connects, is never on the node that the test loses.
    """
    import ray

    before = {n["NodeID"] for n in ray.nodes()}
    join = [
        f"--address={nodes.address}",
        "--node-ip-address=127.0.0.2",
        "--num-cpus=1",
        "--object-store-memory=" + str(100 * 1024 * 1024),
        "--resources=" + json.dumps(resources),
    ]
    process = nodes.start_node(*join, log=log)
    deadline = time.monotonic() + START_BOUND
    while time.monotonic() < deadline:
        if any(n.get("Alive") and n["NodeID"] not in before for n in ray.nodes()):
            return process
        if process.poll() is not None:  # `ray start` gave up registering (a loaded machine): try again
            _stop_session(process)
            nodes.nodes.remove(process)
            process = nodes.start_node(*join, log=log)
        time.sleep(1)
    raise RuntimeError(f"a node with {resources} did not join in {START_BOUND:g} s")


def kill_node(process: subprocess.Popen[bytes]) -> None:
    """Lose a node: SIGKILL every process of its session at once (raylet, workers, agents), as a crashed host."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    _stop_session(process)


def _wait_for_port(nodes: Cluster) -> None:
    deadline = time.monotonic() + START_BOUND
    while time.monotonic() < deadline:
        if nodes.nodes[0].poll() is not None:
            raise RuntimeError(f"ray start --head exited: {(nodes.tmp / 'head.log').read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", nodes.port)) == 0:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the Ray head did not listen on {nodes.address} in {START_BOUND:g} s")


def node_ids(ray: Any) -> dict[str, str]:
    """Node id by custom resource name (``evalsi_head``, ``evalsi_node_b``)."""
    out = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for name in ("evalsi_head", "evalsi_node_b"):
                if name in node.get("Resources", {}):
                    out[name] = node["NodeID"]
    return out
