"""Reward Service throughput over loopback HTTP, against in-process ``Reward.score`` on the same batches.

    .venv/bin/python bench/server_throughput.py [--batch 256] [--requests 40] [--clients 2]

Starts a real ``evalsi server`` process on 127.0.0.1 (temporary SQLite database), then for a math-equiv spec:

- warm cache: the same batch scored repeatedly, in-process vs through the server;
- uncached: fresh batches (distinct completions), each batch scored once in-process and once through the server
  (each side has its own cache, so both score it cold).

Both sides score the same batches, round after round (in-process, then the server, so both see the same machine
load); a round's ratio is its server rollouts/s over its in-process rollouts/s, and the ratio printed is the
median over rounds. Prints rollouts/s and per-batch p50/p99 latency for each, the CPU each side spends per
rollout, and where a server call's time goes (client encode/decode, server handler, scoring, the rest = HTTP and
the event loop). Targets: warm cache >= 0.8x in-process, uncached >= 0.7x. Bounded: a few thousand requests at
most, well under two minutes on two cores.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalsi.evaluators import available_names, close_all  # noqa: E402
from evalsi.rewards import from_mapping  # noqa: E402
from evalsi.rewards.wire import results_json  # noqa: E402
from evalsi.server._db import migrate, open_engine  # noqa: E402
from evalsi.server._token_store import TokenStore  # noqa: E402


def math_spec() -> dict[str, Any]:
    ref = "math-equiv" if "math-equiv" in available_names() else "exact-match"
    return {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RewardSpec",
        "metadata": {"name": "bench-math"},
        "spec": {"components": [{"ref": ref, "name": "math"}]},
    }


def make_batch(size: int, salt: str) -> list[dict[str, Any]]:
    """GSM8K-like rollouts (~1 KiB of reasoning each); GRPO-style: 8 rollouts per prompt, answers repeat."""
    reasoning = "Let me think step by step about the quantities involved. " * 16
    batch = []
    for i in range(size):
        prompt = i // 8
        answer = (prompt * 7 + (i % 3)) % 1000
        batch.append(
            {
                "prompt": f"[{salt}] Question {prompt}: what is {prompt} * 7?",
                "completion": f"{reasoning} [{salt}-{i}] so the final answer is #### {answer}",
                "answer": str(prompt * 7 % 1000),
            }
        )
    return batch


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Server:
    def __init__(self, directory: Path) -> None:
        url = f"sqlite:///{directory / 'bench.db'}"
        engine = open_engine(url)
        migrate(engine)
        self.token = TokenStore(engine).create("bench", ["evaluations.run", "metrics.read"])
        engine.dispose()
        config = directory / "server.yaml"
        config.write_text(
            "apiVersion: evals.si/v1alpha1\nkind: ServerConfig\nmetadata: {name: bench}\nspec:\n"
            f"  listen: {{host: 127.0.0.1, port: 0, grpc_port: null}}\n  database: {{url: '{url}'}}\n"
            "  rewards: {cpu_workers: 4}\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "evalsi.cli.server", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=str(directory),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        line = self.process.stdout.readline() if self.process.stdout else b""
        self.url = orjson.loads(line)["http"]

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", headers={"Authorization": f"Bearer {self.token}"}).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("#") and " " in line:
                key, _, value = line.rpartition(" ")
                out[key] = out.get(key, 0.0) + float(value)
        return out

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (from /proc)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


def run_inprocess(score: Callable[[list[dict[str, Any]]], Any], batches: list[list[dict[str, Any]]]) -> list[float]:
    latencies = []
    for batch in batches:
        started = time.perf_counter()
        score(batch)
        latencies.append(time.perf_counter() - started)
    return latencies


class HttpLoad:
    """``clients`` threads, each with its own keep-alive connection (stdlib ``http.client``), posting batches."""

    def __init__(self, server: Server, spec: dict[str, Any], clients: int) -> None:
        self.server, self.spec, self.clients = server, spec, clients
        self.requests = 0
        self.headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
        self.encode = self.decode = 0.0
        self._lock = threading.Lock()
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        # the stdlib client with keep-alive: a load generator should cost the machine less than the server
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            address = urllib.parse.urlsplit(self.server.url)
            connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=120)
            self._local.connection = connection
        return connection

    def post(self, batch: list[dict[str, Any]]) -> float:
        t0 = time.perf_counter()
        body = orjson.dumps({"spec": self.spec, "rollouts": batch})
        t1 = time.perf_counter()
        connection = self._connection()
        connection.request("POST", "/v1alpha1/rewards:score", body=body, headers=self.headers)
        response = connection.getresponse()
        content = response.read()
        t2 = time.perf_counter()
        results = orjson.loads(content)["results"]
        t3 = time.perf_counter()
        assert response.status == 200 and len(results) == len(batch), content[:300]
        with self._lock:
            self.encode += t1 - t0
            self.decode += t3 - t2
        return t3 - t0

    def run(self, batches: list[list[dict[str, Any]]]) -> tuple[list[float], float]:
        started = time.perf_counter()
        with ThreadPoolExecutor(self.clients) as pool:
            latencies = list(pool.map(self.post, batches))
        return latencies, time.perf_counter() - started


def report(name: str, batch: int, rounds: list[tuple[list[float], list[float], float]]) -> float:
    """Rates per round (in-process and server run back to back, so both see the same machine load); medians."""
    local_rates = [len(local) * batch / sum(local) for local, _, _ in rounds]
    remote_rates = [len(remote) * batch / wall for _, remote, wall in rounds]
    ratios = [r / lr for r, lr in zip(remote_rates, local_rates, strict=True)]
    local = [x for lat, _, _ in rounds for x in lat]
    remote = [x for _, lat, _ in rounds for x in lat]
    print(f"\n== {name}: {len(rounds)} rounds x {len(rounds[0][0])} batches of {batch} rollouts, each side")
    for label, rates, latencies in (("in-process ", local_rates, local), ("server HTTP", remote_rates, remote)):
        print(
            f"  {label} {statistics.median(rates):>10,.0f} rollouts/s   p50 {percentile(latencies, 0.5) * 1e3:7.2f} ms"
            f"   p99 {percentile(latencies, 0.99) * 1e3:7.2f} ms"
        )
    ratio = statistics.median(ratios)
    print(f"  ratio server/in-process throughput: median {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    return ratio


def where_time_goes(load: HttpLoad, before: dict[str, float], after: dict[str, float], calls: int) -> None:
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    handler = delta('evalsi_reward_call_seconds_sum{protocol="http"}') / calls
    scoring = sum(delta(k) for k in after if k.startswith("evalsi_reward_component_seconds_sum")) / calls
    print(
        f"  per call: client encode {load.encode / calls * 1e3:.2f} ms, client decode {load.decode / calls * 1e3:.2f}"
        f" ms, server handler {handler * 1e3:.2f} ms (of which components incl. cache {scoring * 1e3:.2f} ms;"
        f" the rest is JSON, records, composition, thread hop)"
    )


def measure(
    name: str,
    reward: Any,
    load: HttpLoad,
    server: Server,
    batch: int,
    rounds: int,
    make: Callable[[int, int], list[dict[str, Any]]],
) -> float:
    per_round = max(2, load.requests // rounds)
    results = []
    load.encode = load.decode = 0.0
    before = server.metrics()
    cpu = {"local": 0.0, "client": 0.0, "server": 0.0}
    for r in range(rounds):
        batches = [make(r, i) for i in range(per_round)]  # the same batches on both sides
        started = time.process_time()
        local = run_inprocess(reward.score, batches)
        cpu["local"] += time.process_time() - started
        started, server_started = time.process_time(), server.cpu_seconds()
        remote, wall = load.run(batches)
        cpu["client"] += time.process_time() - started
        cpu["server"] += server.cpu_seconds() - server_started
        results.append((local, remote, wall))
    ratio = report(name, batch, results)
    calls = per_round * rounds
    where_time_goes(load, before, server.metrics(), calls)
    per_rollout = {k: v / (calls * batch) * 1e6 for k, v in cpu.items()}
    print(
        f"  CPU per rollout: in-process {per_rollout['local']:.1f} us; server process {per_rollout['server']:.1f} us"
        f" + HTTP client {per_rollout['client']:.1f} us  -> CPU-bound ratio (idle machine estimate) "
        f"{_ratio(per_rollout['local'], per_rollout['server'])} server-only, "
        f"{_ratio(per_rollout['local'], per_rollout['server'] + per_rollout['client'])} with the client"
    )
    return ratio


def _ratio(numerator: float, denominator: float) -> str:
    """``numerator / denominator`` to two places; a short quick run can read zero clock ticks of CPU."""
    return f"{numerator / denominator:.2f}" if denominator > 0 else "n/a (no CPU time measured)"


def breakdown(reward: Any, spec: dict[str, Any], batch: list[dict[str, Any]], repeat: int = 20) -> None:
    """The server's per-call steps, timed one by one in this process on the same (warm) batch."""
    body = orjson.dumps({"spec": spec, "rollouts": batch})
    records = reward.records(batch)
    columns = reward.component_scores(records)
    results = reward.compose(columns)
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("JSON decode", lambda: orjson.loads(body)),
        ("records (from_rollout)", lambda: reward.records(batch)),
        ("cache keys + look-ups", lambda: reward.component_scores(records)),
        ("composition", lambda: reward.compose(columns)),
        ("results to JSON", lambda: orjson.dumps(results_json(results))),
    ]
    parts = []
    for name, step in steps:
        started = time.process_time()
        for _ in range(repeat):
            step()
        parts.append(f"{name} {(time.process_time() - started) / repeat / len(batch) * 1e6:.1f}")
    print(f"  server steps, CPU us per rollout (warm, measured here): {'; '.join(parts)}")


def settle_collector() -> None:
    """Collect, then move every object alive now out of the collector's reach (``gc.freeze``), as the server does.

    This process holds the in-process side and the HTTP client, and the libraries math-equiv imports: a full
    collection walks all of them, and takes longer (0.1-0.2 s here) than a whole round's scoring on either side,
    so wherever one fell, it decided that round's ratio. Frozen, collections walk what the rounds make, on both
    sides alike; the server process froze its own startup objects before serving.
    """
    gc.collect()
    gc.freeze()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--requests", type=int, default=60, help="batches per side and case")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7, help="alternations of in-process and server runs")
    parser.add_argument("--quick", action="store_true", help="small batches, few requests, one round (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.requests, args.rounds = 16, 4, 1
    spec = math_spec()
    print(
        f"spec component: {spec['spec']['components'][0]['ref']}; batch {args.batch}; {args.requests} requests; "
        f"{args.clients} concurrent HTTP clients; cores: {os.cpu_count()}"
    )
    reward = from_mapping(spec)
    with tempfile.TemporaryDirectory(prefix="evalsi-bench-") as tmp:
        server = Server(Path(tmp))
        try:
            load = HttpLoad(server, spec, args.clients)
            load.requests = args.requests
            warm = make_batch(args.batch, "warm")
            reward.score(warm)
            load.post(warm)
            breakdown(reward, spec, warm)
            settle_collector()
            cached_ratio = measure(
                "cached math spec (warm cache)", reward, load, server, args.batch, args.rounds, lambda r, i: warm
            )
            uncached_ratio = measure(
                "uncached math spec (fresh rollouts)",
                reward,
                load,
                server,
                args.batch,
                args.rounds,
                lambda r, i: make_batch(args.batch, f"fresh{r}-{i}"),
            )
            print(
                f"\nserver/in-process throughput, median of {args.rounds} rounds, batch {args.batch}: "
                f"warm cache {cached_ratio:.2f}x (target >= 0.8x: {'met' if cached_ratio >= 0.8 else 'NOT met'}), "
                f"uncached {uncached_ratio:.2f}x (target >= 0.7x: {'met' if uncached_ratio >= 0.7 else 'NOT met'}); "
                f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            )
        finally:
            server.stop()
            reward.close()
            close_all()


if __name__ == "__main__":
    main()
