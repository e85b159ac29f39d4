"""Replicas share component scores through the database (SQLite file, real PostgreSQL), and old ones are pruned."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from evalsi.evaluators import Score
from evalsi.server._db import current_revision, head_revision, migrate, open_engine
from evalsi.server.rewards._shared_cache import ProjectCache, SharedScores, TieredCache
from tests.server.harness import ServerProcess, make_token, metric, post_http, write_config
from tests.server.postgres import fresh_database, running_postgres

"""The newest migration: a started server's schema is at it."""


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with running_postgres() as url:
        yield url


def _scored(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _replicas_share(directory: Path, url: str) -> None:
    log = directory / "count.log"
    config = write_config(directory, {"database": {"url": url}, "rewards": {"shared_cache": True}})
    token = make_token(url, "p", ["evaluations.run", "metrics.read"])
    spec = {"components": [{"ref": "test-server-count", "params": {"log": str(log)}}]}
    batch = [{"completion": f"c{i % 12}", "answer": "c1"} for i in range(24)]  # 12 distinct, each twice
    with ServerProcess(config) as first, ServerProcess(config) as second:
        one = post_http(first, token, spec, batch)
        assert one.status_code == 200, one.text
        assert _scored(log) == 12  # duplicates in a batch are scored once
        two = post_http(second, token, spec, batch)
        assert two.json() == one.json()
        assert _scored(log) == 12  # the second replica called no evaluator: every score came from the database
        text = httpx.get(second.http + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
        assert metric(text, "evalsi_reward_cache_hits_total", tier="shared") == 24
        assert metric(text, "evalsi_reward_cache_misses_total", tier="shared") == 0
        # and the other way round, for scores the second replica computed first
        fresh = [{"completion": "new", "answer": "new"}]
        assert post_http(second, token, spec, fresh).json()["results"][0]["total"] == 1.0
        assert post_http(first, token, spec, fresh).json()["results"][0]["total"] == 1.0
        assert _scored(log) == 13


def test_two_servers_on_one_sqlite_file_share_scores(tmp_path: Path) -> None:
    _replicas_share(tmp_path, f"sqlite:///{tmp_path / 'shared.db'}")


def test_two_servers_on_postgresql_share_scores(tmp_path: Path, postgres_url: str) -> None:
    _replicas_share(tmp_path, fresh_database(postgres_url, "replicas"))


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ttl.db'}"
    return fresh_database(str(request.getfixturevalue("postgres_url")), "ttl")


def test_ttl_hides_and_prunes_old_entries(database_url: str) -> None:
    engine = open_engine(database_url)
    migrate(engine)
    migrate(engine)  # idempotent: a second replica starting on a migrated database changes nothing
    assert current_revision(engine) == head_revision()
    now = [1_000_000.0]
    shared = SharedScores(engine, ttl=3600.0, clock=lambda: now[0])
    old, new, error = b"o" * 32, b"n" * 32, b"e" * 32
    shared.put_many([(old, Score.ok(0.5, "half"))])
    now[0] += 3000
    shared.put_many([(new, Score.skipped("no reference")), (error, Score.error("down"))])
    assert shared.get_many([old, new, error]) == {old: Score.ok(0.5, "half"), new: Score.skipped("no reference")}
    now[0] += 1000  # old is now 4000 s old, past the 3600 s TTL; new is 1000 s old
    assert set(shared.get_many([old, new])) == {new}
    assert shared.prune() == 1
    assert shared.count() == 1
    engine.dispose()


def test_tiered_cache_copies_shared_hits_into_memory(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'tier.db'}")
    migrate(engine)
    lookups: list[tuple[str, int, int]] = []
    writer = TieredCache(100, SharedScores(engine, ttl=60))
    writer.put_many([(b"k" * 32, Score.ok(True)), (b"x" * 32, Score.error("never stored"))])
    reader = TieredCache(100, SharedScores(engine, ttl=60), lambda *a: lookups.append(a))
    assert reader.get_many([b"k" * 32, b"x" * 32]) == [Score.ok(True), None]
    assert reader.get_many([b"k" * 32]) == [Score.ok(True)]
    assert lookups == [("memory", 0, 2), ("shared", 1, 1), ("memory", 1, 0)]
    engine.dispose()


def test_a_running_server_prunes_entries_older_than_the_ttl(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'prune.db'}"
    engine = open_engine(url)
    migrate(engine)
    shared = SharedScores(engine, ttl=7 * 86400)
    now = time.time()
    shared.put_many([(b"a" * 32, Score.ok(1.0))], now=now - 8 * 86400)  # older than the default week
    shared.put_many([(b"b" * 32, Score.ok(1.0))], now=now - 6 * 86400)
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"shared_cache": True}})
    token = make_token(url, "p", ["evaluations.run", "metrics.read"])
    with ServerProcess(config) as server:
        deadline = time.monotonic() + 60
        headers = {"Authorization": f"Bearer {token}"}
        # the server prunes when it starts, then every ttl/10 (at most hourly), and counts what it pruned
        while (
            metric(httpx.get(server.http + "/metrics", headers=headers).text, "evalsi_reward_shared_cache_pruned_total")
            != 1
        ):
            assert time.monotonic() < deadline, "the server never pruned"
            time.sleep(0.05)
        assert shared.count() == 1
    assert set(shared.get_many([b"a" * 32, b"b" * 32])) == {b"b" * 32}
    engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_replicas_starting_together_migrate_once(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'together.db'}"
    else:
        url = fresh_database(str(request.getfixturevalue("postgres_url")), "together")
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"shared_cache": True}})
    with ThreadPoolExecutor(2) as pool:
        starting = [pool.submit(ServerProcess, config) for _ in range(2)]
    servers = [f.result() for f in starting if f.exception() is None]
    try:
        assert len(servers) == 2, [str(f.exception()) for f in starting]
        engine = open_engine(url)
        assert current_revision(engine) == head_revision()
        token = make_token(url, "p", ["evaluations.run", "metrics.read"])
        engine.dispose()
        spec = {"components": [{"ref": "exact-match"}]}
        for server in servers:
            assert post_http(server, token, spec, [{"completion": "a", "answer": "a"}]).status_code == 200
    finally:
        for server in servers:
            server.terminate()


def test_project_views_of_one_cache_never_see_each_others_scores(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'cache.db'}")
    migrate(engine)
    shared = SharedScores(engine, ttl=3600)
    tiers = TieredCache(100, shared)
    alpha, beta = ProjectCache(tiers, "alpha"), ProjectCache(tiers, "beta")
    key = bytes(32)
    alpha.put_many([(key, Score.ok(1.0))])
    assert alpha.get_many([key])[0] == Score.ok(1.0)
    assert beta.get_many([key]) == [None]  # neither in memory nor in the database
    assert ProjectCache(TieredCache(100, shared), "alpha").get_many([key])[0] == Score.ok(1.0)  # a replica's view
    assert tiers.get_many([key]) == [None] and shared.count() == 1
    engine.dispose()
