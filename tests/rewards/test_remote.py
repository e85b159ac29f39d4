"""The ``server=`` client against a loopback Reward Service double that scores with the real ``Reward``."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalsi.errors import DataError, RewardBatchError, RewardServiceError, SpecError
from evalsi.rewards import from_mapping, load
from evalsi.rewards._remote import RemoteReward
from evalsi.rewards._scorer import open_scorer
from tests.rewards import _adapter_evaluators  # noqa: F401  (registers the test evaluators)
from tests.rewards._servers import ServerThread, ServiceLog, reward_service_app

SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "remote-test"},
    "spec": {
        "onError": "zero",
        "components": [
            {"ref": "exact-match", "name": "exact", "weight": 0.5, "gate": True},
            {"ref": "test-adapters-flaky", "name": "flaky", "weight": 0.25},
            {"ref": "test-adapters-in-tests", "name": "in-tests", "weight": 0.25, "onError": "raise"},
        ],
        "clip": [0.0, 1.0],
    },
}

ROLLOUTS: list[dict[str, Any]] = [
    {"prompt": "p", "completion": "a", "answer": "a", "tests": ["a"]},
    {"prompt": "p", "completion": "boom", "answer": "boom"},
    {"prompt": "p", "completion": "b", "answer": "a", "tests": ["b"]},
    {"completion": [{"role": "assistant", "content": "a"}], "answer": "a"},
]


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


@pytest.fixture
def service() -> Any:
    log = ServiceLog()
    with ServerThread(reward_service_app(log)) as server:
        server.log = log  # type: ignore[attr-defined]
        yield server


def test_remote_results_equal_local_results(spec_file: Path, service: Any) -> None:
    remote = RemoteReward.from_file(spec_file, service.url)
    assert remote.name == "remote-test"
    assert remote.component_names == ["exact", "flaky", "in-tests"]
    assert remote.score(ROLLOUTS) == load(spec_file).score(ROLLOUTS)
    assert len(service.log.requests) == 1
    assert service.log.requests[0]["spec"] == SPEC  # the spec travels as written


def test_a_loaded_reward_is_sent_as_its_parsed_spec(spec_file: Path, service: Any) -> None:
    reward = load(spec_file)
    remote = open_scorer(reward, service.url)
    assert isinstance(remote, RemoteReward)
    assert remote.score(ROLLOUTS) == reward.score(ROLLOUTS)
    sent = service.log.requests[0]["spec"]
    assert sent["metadata"] == {"name": "remote-test"}
    assert sent["spec"]["onError"] == "zero" and sent["spec"]["components"][2]["onError"] == "raise"


def test_a_mapping_spec_with_a_server(service: Any) -> None:
    remote = open_scorer(SPEC["spec"], service.url)
    assert remote.score(ROLLOUTS[:1]) == from_mapping(SPEC["spec"]).score(ROLLOUTS[:1])


def test_empty_batch_sends_nothing(spec_file: Path, service: Any) -> None:
    assert RemoteReward.from_file(spec_file, service.url).score([]) == []
    assert service.log.requests == []


def test_token_is_sent_as_bearer(spec_file: Path, service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    service.log.token = "s3cret"
    with pytest.raises(RewardServiceError, match=r"HTTP 401.*EVALSI_TOKEN"):
        RemoteReward.from_file(spec_file, service.url).score(ROLLOUTS)
    monkeypatch.setenv("EVALSI_TOKEN", "s3cret")
    assert len(RemoteReward.from_file(spec_file, service.url).score(ROLLOUTS)) == 4
    assert service.log.headers[-1]["authorization"] == "Bearer s3cret"


def test_batch_failure_is_a_reward_batch_error(spec_file: Path, service: Any) -> None:
    bad = [*ROLLOUTS, {"completion": "x", "tests": "not-a-list"}]
    with pytest.raises(RewardBatchError) as caught:
        RemoteReward.from_file(spec_file, service.url).score(bad)
    assert (caught.value.index, caught.value.component) == (4, "in-tests")
    assert "tests must be a list" in caught.value.cause


def test_bad_rollout_is_a_data_error_with_its_index(spec_file: Path, service: Any) -> None:
    with pytest.raises(DataError, match="rollout 1") as caught:
        RemoteReward.from_file(spec_file, service.url).score([ROLLOUTS[0], {"prompt": "no completion"}])
    assert caught.value.index == 1
    assert str(caught.value).count("rollout 1") == 1


def test_unavailable_is_retried(spec_file: Path, service: Any) -> None:
    service.log.fail_first = 2
    remote = RemoteReward.from_file(spec_file, service.url, retries=3)
    assert len(remote.score(ROLLOUTS)) == 4
    assert len(service.log.headers) == 3  # two 503s, then the answer


def test_unavailable_past_the_retries_fails(spec_file: Path, service: Any) -> None:
    service.log.fail_first = 5
    with pytest.raises(RewardServiceError, match="HTTP 503"):
        RemoteReward.from_file(spec_file, service.url, retries=1).score(ROLLOUTS)


def test_contract_violation_is_reported(spec_file: Path, service: Any) -> None:
    service.log.drop_last_result = True
    with pytest.raises(RewardServiceError, match="3 results for 4 rollouts"):
        RemoteReward.from_file(spec_file, service.url).score(ROLLOUTS)


def test_unreachable_server(spec_file: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(RewardServiceError, match="cannot reach the Reward Service"):
        RemoteReward.from_file(spec_file, f"http://127.0.0.1:{port}", retries=1).score(ROLLOUTS)


def test_spec_is_validated_before_any_request(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    bad = {**SPEC, "spec": {**SPEC["spec"], "floor": "low"}}
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(SpecError, match=r"bad\.yaml:\d+: spec\.floor"):
        RemoteReward.from_file(path, "http://127.0.0.1:9")


def test_evaluators_are_resolved_on_the_server(service: Any) -> None:
    # the client validates the spec's shape but not its refs: the server may have evaluators this process lacks
    remote = open_scorer({"components": [{"ref": "only-on-the-server"}]}, service.url)
    assert remote.component_names == ["only-on-the-server"]
    with pytest.raises(SpecError, match=r"rejected by the Reward Service.*unknown evaluator 'only-on-the-server'"):
        remote.score(ROLLOUTS[:1])
