"""The operator's job targets in the ServerConfig, a job's completion params, and the migration adding them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic import command
from alembic.config import Config

from evalsi.errors import SpecError
from evalsi.server._config import config_from_mapping
from evalsi.server._db import MIGRATIONS, current_revision, head_revision, open_database, open_engine
from evalsi.server._errors import ServiceError
from evalsi.server.evaluation._config import TargetConfig
from evalsi.server.evaluation.jobs._generation import check_params

TARGET = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", "max_tokens": 100}


def test_a_target_is_read_with_its_ceilings_and_becomes_a_run_engine_target() -> None:
    config = config_from_mapping({"targets": {"m": {**TARGET, "timeout": "2m", "retries": 0, "apiKeyEnv": "K"}}})
    target = config.spec.targets["m"]
    assert (target.timeout, target.retries, target.max_concurrency, target.api_key_env) == (120.0, 0, 16, "K")
    spec = target.target_spec()
    assert (spec.base_url, spec.model, spec.api, spec.timeout, spec.max_retries) == (TARGET["base_url"], "m", "chat",
                                                                                     120.0, 0)  # fmt: skip
    assert spec.headers == {}


def test_a_target_of_replicas_becomes_a_run_engine_target_spreading_over_them() -> None:
    replicas = ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]
    config = config_from_mapping({"targets": {"dp": {"baseUrls": replicas, "model": "m"}}})
    spec = config.spec.targets["dp"].target_spec()
    assert (spec.base_url, spec.base_urls, spec.endpoints()) == (None, replicas, replicas)


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"model": "m"}, "targets.m: Value error, give baseUrl (one server) or baseUrls (its replicas)"),
        ({**TARGET, "base_urls": ["http://127.0.0.1:8001/v1"]}, "baseUrls (its replicas), not both"),
        ({"model": "m", "base_urls": ["http://127.0.0.1:8001/v1", "file:///etc"]}, "base_urls[1] must be an http"),
        ({"model": "m", "base_urls": ["http://127.0.0.1:8001/v1"] * 2}, "base_urls lists a replica twice"),
        ({"model": "m", "base_urls": []}, "targets.m.base_urls"),
        ({"model": "m", "base_url": "gopher://x"}, "targets.m.base_url"),
        ({**TARGET, "max_tokens": 0}, "targets.m.max_tokens"),
        ({**TARGET, "headers": {"X": "1"}}, "targets.m.headers"),
    ],
)
def test_a_bad_target_is_refused_when_the_config_loads_naming_the_field(entry: dict[str, Any], named: str) -> None:
    with pytest.raises(SpecError) as refused:
        config_from_mapping({"targets": {"m": entry}})
    assert named in str(refused.value)


def test_completion_params_keep_sampling_fields_and_clamp_max_tokens() -> None:
    target = TargetConfig.model_validate(TARGET)
    assert check_params({}, target) == {"max_tokens": 100}
    assert check_params({"maxTokens": 50.0, "topP": 0.9, "seed": 3.0, "stop": "END"}, target) == {
        "max_tokens": 50, "top_p": 0.9, "seed": 3, "stop": ["END"]
    }  # fmt: skip
    assert check_params({"max_tokens": 10_000, "temperature": 0}, target) == {"max_tokens": 100, "temperature": 0}


@pytest.mark.parametrize(
    ("params", "status", "named"),
    [
        ({"baseUrl": "http://x"}, "permission_denied", "completionParams.baseUrl"),
        ({"baseUrls": ["http://127.0.0.1:8000/v1", "http://x"]}, "permission_denied", "completionParams.baseUrls"),
        ({"base_urls": ["http://x"]}, "permission_denied", "completionParams.base_urls"),
        ({"extraBody": {}}, "permission_denied", "completionParams.extraBody"),
        ({"top_k": 5}, "invalid_argument", "completionParams.top_k"),
        ({"seed": "7"}, "invalid_argument", "completionParams.seed"),
        ({"top_p": 0}, "invalid_argument", "completionParams.top_p"),
        ({"stop": [1]}, "invalid_argument", "completionParams.stop"),
    ],
)
def test_completion_params_beyond_sampling_are_refused_naming_them(
    params: dict[str, Any], status: str, named: str
) -> None:
    with pytest.raises(ServiceError) as refused:
        check_params(params, TargetConfig.model_validate(TARGET))
    assert refused.value.status == status and named in refused.value.message


def test_the_migration_gives_existing_jobs_no_target(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = open_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0004")
        connection.execute(
            sqlalchemy.text(
                "INSERT INTO evaluation_jobs VALUES ('p', 'j', 'e', 'in', 'out', 'COMPLETED', '', '{}', '{}', :t, :t)"
            ),
            {"t": time.time()},
        )
    engine.dispose()
    upgraded = open_database(url)
    try:
        assert current_revision(upgraded) == head_revision()
        with upgraded.connect() as connection:
            row = connection.execute(sqlalchemy.text("SELECT target, completion_params FROM evaluation_jobs")).one()
        assert tuple(row) == ("", "{}")
    finally:
        upgraded.dispose()
