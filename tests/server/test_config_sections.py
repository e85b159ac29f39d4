"""The server config is composed of each package's section: a bad field of any section names the file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsi.errors import SpecError
from evalsi.server._config import ServerSpec, load_config
from evalsi.server.evaluation._config import DatasetsConfig, EvaluatorsConfig, JobsConfig
from evalsi.server.rewards._config import RewardsConfig
from evalsi.server.runs._config import RunsConfig
from evalsi.server.transport._config import ListenConfig, MetricsConfig
from evalsi.server.ui._config import UiConfig

HEADER = "apiVersion: evals.si/v1alpha1\nkind: ServerConfig\nmetadata: {name: x}\nspec:\n"


def test_each_section_is_its_packages_model() -> None:
    fields = ServerSpec.model_fields
    sections = {
        "listen": ListenConfig,
        "metrics": MetricsConfig,
        "rewards": RewardsConfig,
        "runs": RunsConfig,
        "ui": UiConfig,
        "evaluators": EvaluatorsConfig,
        "datasets": DatasetsConfig,
        "jobs": JobsConfig,
    }
    assert {name: fields[name].annotation for name in sections} == sections


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("  database: {}\n  metrics:\n    port: -1\n", ":7: spec.metrics.port"),
        ("  database: {}\n  runs:\n    max_compare_bytes: 1\n", ":7: spec.runs.max_compare_bytes"),
        ("  database: {}\n  ui:\n    session_ttl: never\n", ":7: spec.ui.session_ttl"),
        ("  database: {}\n  jobs:\n    nope: 1\n", ":7: spec.jobs.nope"),
        ("  database: {}\n  datasets:\n    nope: 1\n", ":7: spec.datasets.nope"),
        ("  database: {}\n  evaluators:\n    nope: 1\n", ":7: spec.evaluators.nope"),
        ("  database: {}\n  listen:\n    trusted_proxies: [not-a-network]\n", ":7: spec.listen.trusted_proxies"),
    ],
)
def test_a_bad_field_of_any_section_names_the_file_line_and_field(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(HEADER + body)
    with pytest.raises(SpecError) as raised:
        load_config(path)
    assert str(raised.value).startswith(str(path) + where), str(raised.value)


def test_a_named_judge_with_a_bad_field_is_refused_when_the_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(HEADER + "  judges:\n    strict: {model: m, base_url: http://x/v1, temperature: hot}\n")
    with pytest.raises(SpecError) as raised:
        load_config(path)
    message = str(raised.value)
    assert message.startswith(str(path) + ":5: spec.judges") and "strict.temperature" in message, message
