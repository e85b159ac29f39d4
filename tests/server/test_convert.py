"""Protocol translation: Struct numbers, result messages, named judges in either spec form, request bodies."""

from __future__ import annotations

from typing import Any

import pytest

from evalsi.errors import SpecError
from evalsi.evaluators import Score
from evalsi.rewards import RewardResult
from evalsi.rewards.wire import results_json
from evalsi.server._convert import plain_numbers, request_parts, results_message
from evalsi.server._errors import ServiceError
from evalsi.server._trust import with_named_judges
from evalsi.server.transport._rewards import parse_score_body
from tests.server.messages import message_to_json, request_message


def test_struct_numbers_come_back_as_ints_when_integral() -> None:
    spec = {"components": [{"ref": "overlong-penalty", "params": {"max_length": 100, "buffer": 20}, "weight": 0.5}]}
    rollouts = [{"completion": "x", "completion_tokens": 12, "completion_ids": [1, 2, 3], "meta": {"p": 1.5}}]
    got_spec, got_rollouts = request_parts(request_message(spec, rollouts))
    assert got_spec == spec and got_rollouts == rollouts
    assert type(got_rollouts[0]["completion_tokens"]) is int
    assert plain_numbers([2.0**60, float("inf")]) == [2.0**60, float("inf")]


def test_results_are_the_same_as_message_and_as_json() -> None:
    shared = Score.ok(True)
    results = [
        RewardResult(1.0, "ok", {"a": shared, "b": Score.ok(0.25, "quarter")}),
        RewardResult(None, "no_total", {"a": shared, "b": Score.error("down")}),
        RewardResult(0.0, "gated", {"a": Score.ok(False), "b": Score.skipped("no reference")}),
    ]
    as_json: dict[str, Any] = dict(results_json(results))
    assert message_to_json(results_message(results)) == as_json
    assert as_json["results"][1] == {
        "index": 1,
        "total": None,
        "status": "no_total",
        "components": {
            "a": {"value": True, "status": "ok", "reason": None},
            "b": {"value": None, "status": "error", "reason": "down"},
        },
    }


def test_named_judges_in_a_resource_and_in_a_bare_body() -> None:
    judges = {"strict": {"model": "m", "temperature": 0}}
    body: Any = {"components": [{"ref": "x", "judge": "strict"}, {"ref": "y", "judge": {"model": "inline"}}]}
    assert with_named_judges(body, judges)["components"][0]["judge"] == {"model": "m", "temperature": 0}
    assert with_named_judges(body, judges)["components"][1]["judge"] == {"model": "inline"}
    resource = {"apiVersion": "evals.si/v1alpha1", "kind": "RewardSpec", "metadata": {"name": "r"}, "spec": body}
    resolved: Any = with_named_judges(resource, judges)
    assert resolved["spec"]["components"][0]["judge"]["model"] == "m"
    assert body["components"][0]["judge"] == "strict"  # the caller's mapping is not changed
    with pytest.raises(SpecError, match=r"spec.components\[0\].judge.*valid: strict"):
        with_named_judges({"components": [{"ref": "x", "judge": "lenient"}]}, judges)


@pytest.mark.parametrize(
    ("body", "code", "needle"),
    [
        ([], "invalid_argument", "JSON object"),
        ({"rollouts": []}, "invalid_spec", "`spec`"),
        ({"spec": {}, "rollouts": {}}, "invalid_argument", "`rollouts`"),
        ({"spec": {}, "rollouts": [{}, "text"]}, "invalid_rollout", "rollout 1"),
    ],
)
def test_bad_request_bodies_are_named(body: object, code: str, needle: str) -> None:
    with pytest.raises(ServiceError) as raised:
        parse_score_body(body)
    assert raised.value.code == code and needle in raised.value.message
    assert raised.value.http_status == 400


def test_a_request_spec_made_the_servers() -> None:
    from evalsi.server._config import ServerSpec
    from evalsi.server._errors import ServiceError
    from evalsi.server._trust import server_spec

    config = ServerSpec.model_validate(
        {
            "reward_models": {"rm": {"url": "http://rm/get_reward", "api_key_env": "RM_KEY", "normalise": "sigmoid"}},
            "sandbox": {"min_isolation": "gvisor"},
        }
    )
    body: Any = {
        "components": [
            {"ref": "reward-model", "params": {"model": "rm", "wait_ms": 1, "normalise": "none"}},
            {"ref": "code-exec-tests", "sandbox": {"minIsolation": "process"}},
            {"ref": "code-exec-tests", "name": "b"},
        ]
    }
    made = server_spec(body, config)["components"]
    assert made[0]["params"] == {
        "wait_ms": 1,
        "url": "http://rm/get_reward",
        "api_key_env": "RM_KEY",
        "normalise": "sigmoid",
    }  # the operator's fields win
    assert made[1]["sandbox"] == {"minIsolation": "gvisor"} and made[2]["params"] == {"min_isolation": "gvisor"}
    assert body["components"][0]["params"]["model"] == "rm"  # the caller's mapping is not changed
    with pytest.raises(ServiceError, match=r"spec.components\[0\].params.url: a request may not set this") as caught:
        server_spec({"components": [{"ref": "reward-model", "params": {"url": "http://x"}}]}, config)
    assert caught.value.status == "permission_denied" and caught.value.fields["path"] == "spec.components[0].params.url"
