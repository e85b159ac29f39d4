"""The ServerConfig file: defaults, either spelling of names, durations, errors with file, line and field; token CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsi.errors import SpecError
from evalsi.server import load_config
from evalsi.server._db import open_engine
from evalsi.server._durations import parse_duration
from evalsi.server._token_store import TokenStore
from evalsi.server.rewards._config import ONE_WEEK


def test_defaults_follow_the_seed() -> None:
    config = load_config(None)
    rewards = config.spec.rewards
    assert (rewards.max_rollouts, rewards.max_inflight, rewards.cache_size) == (16384, 65536, 1048576)
    assert rewards.shared_cache_ttl == ONE_WEEK
    assert config.database_url.startswith("sqlite:////")


def test_a_file_with_seed_and_camel_case_names(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(
        "apiVersion: evals.si/v1alpha1\nkind: ServerConfig\nmetadata: {name: prod}\nspec:\n"
        "  database: {url: sqlite:///data/s.db}\n"
        "  rewards: {max_rollouts: 10, maxInflight: 20, shared_cache: true, shared_cache_ttl: 12h}\n"
        "  quotas:\n    team-a: {max_reward_rollouts: 5}\n"
    )
    config = load_config(path)
    assert config.name == "prod"
    assert (config.spec.rewards.max_rollouts, config.spec.rewards.max_inflight) == (10, 20)
    assert config.spec.rewards.shared_cache_ttl == 12 * 3600
    assert config.spec.quotas["team-a"].max_reward_rollouts == 5
    assert config.database_url == f"sqlite:///{tmp_path / 'data' / 's.db'}"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("  rewards:\n    max_rollouts: lots\n", ":6: spec.rewards.max_rollouts"),
        ("  rewards:\n    shared_cache_ttl: soon\n", ":6: spec.rewards.shared_cache_ttl"),
        ("  quotas:\n    a: {max_reward_rollouts: 0}\n", ":6: spec.quotas.a.max_reward_rollouts"),
        ("  listen:\n    prot: 1\n", ":6: spec.listen.prot"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "server.yaml"
    path.write_text("apiVersion: evals.si/v1alpha1\nkind: ServerConfig\nmetadata: {name: x}\nspec:\n" + body)
    with pytest.raises(SpecError) as raised:
        load_config(path)
    assert str(raised.value).startswith(str(path) + where), str(raised.value)


def test_durations() -> None:
    assert [parse_duration(v) for v in (30, "90s", "30m", "2h", "7d", "1w", "1.5h")] == [
        30,
        90,
        1800,
        7200,
        604800,
        604800,
        5400,
    ]
    with pytest.raises(ValueError, match="7d"):
        parse_duration("a week")


def test_token_cli_stores_only_a_hash(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    command = [
        sys.executable,
        "-m",
        "evalsi.cli.server",
        "token",
        "create",
        "--project",
        "team",
        "--permission",
        "evaluations.run",
        "--permission",
        "resource.runs_code",
        "--database",
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip()
    assert secret.startswith("evalsi_")
    engine = open_engine(url)
    store = TokenStore(engine)
    principal = store.verify(secret)
    assert principal is not None and principal.project == "team"
    assert principal.permissions == {"evaluations.run", "resource.runs_code"}
    assert secret.encode() not in (tmp_path / "t.db").read_bytes()
    assert store.verify(secret + "x") is None
    [info] = store.list()
    assert store.revoke(info.id) and TokenStore(engine).verify(secret) is None
    engine.dispose()
    bad = subprocess.run(
        [*command[:7], "--permission", "admin", "--database", url], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "valid: evaluations.run, resource.runs_code" in bad.stderr


def test_the_trust_boundary_defaults_to_the_safe_choice() -> None:
    spec = load_config(None).spec
    assert spec.sandbox.min_isolation == "namespaced"
    assert spec.rewards.shared_cache_scope == "project"
    assert spec.metrics.port is None


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ("  reward_models:\n    rm: {url: ftp://x}\n", "spec.reward_models: Value error, rm.url"),
        ("  reward_models:\n    rm: {url: http://x, normalize: sigmoid}\n", "rm.normalize"),
        ("  judges:\n    strict: {base_url: http://x}\n", "strict.model"),
        ("  sandbox: {min_isolation: process}\n", "'process' is not allowed on a server"),
        ("  rewards: {shared_cache_scope: everyone}\n", "spec.rewards.shared_cache_scope"),
    ],
)
def test_operator_resources_are_checked_when_the_server_starts(tmp_path: Path, fields: str, needle: str) -> None:
    path = tmp_path / "server.yaml"
    path.write_text("apiVersion: evals.si/v1alpha1\nkind: ServerConfig\nmetadata: {name: s}\nspec:\n" + fields)
    with pytest.raises(SpecError) as caught:
        load_config(path)
    assert needle in str(caught.value)
    assert "server.yaml:" in str(caught.value)
