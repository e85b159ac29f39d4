"""The agent loop: a scripted policy with tool calls, and an OpenAI-compatible model over real HTTP."""

from __future__ import annotations

import json
from typing import Any

from evalsi_harness import OpenAIPolicy, ScriptedPolicy, TaskEnv, run_episode, tool_schemas
from tests.helpers.openai_server import OpenAIServer

from .conftest import example


def test_scripted_policy_uses_tool_calls_and_the_chat_records_the_episode() -> None:
    actions = [{"tool": "write_file", "path": "greeting.txt", "content": "hello, world\n"}]
    with TaskEnv(example("write-file")) as env:
        episode = run_episode(env, ScriptedPolicy(actions))
    assert episode.reward == 1.0 and episode.terminated and episode.steps == 2
    roles = [m["role"] for m in episode.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert episode.messages[3]["tool_call_id"] == episode.messages[2]["tool_calls"][0]["id"]
    assert json.loads(episode.messages[3]["content"]) == {"written": "greeting.txt", "chars": 13}


def test_an_openai_compatible_model_drives_an_episode() -> None:
    plan = [
        "Let me look around first.\n```bash\nls -la\n```",
        "not an action at all",
        '{"tool": "write_file", "path": "greeting.txt", "content": "hello, world\\n"}',
        '```json\n{"tool": "submit"}\n```',
    ]

    def reply(prompt: str, body: dict[str, Any]) -> str:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return plan[turn]

    with OpenAIServer(default=reply) as server, TaskEnv(example("write-file")) as env:
        policy = OpenAIPolicy(server.base_url, "test-model", api_key="sk-test")
        try:
            episode = run_episode(env, policy)
        finally:
            policy.close()
        requests, headers = server.requests, server.headers
    assert episode.reward == 1.0 and episode.steps == 4
    assert requests[0]["tools"] == tool_schemas() and requests[0]["model"] == "test-model"
    assert headers[0]["authorization"] == "Bearer sk-test"
    # each observation went back to the model: the malformed answer's error too
    second = requests[2]["messages"][-1]
    assert second["role"] == "user" and "not a JSON object" in json.loads(second["content"])["error"]
    assert "drwx" in json.loads(requests[1]["messages"][-1]["content"])["stdout"]


def test_a_model_that_never_submits_is_truncated_and_graded() -> None:
    with OpenAIServer(default='{"tool": "bash", "command": "true"}') as server, TaskEnv(example("write-file")) as env:
        policy = OpenAIPolicy(server.base_url, "m", use_tools=False)
        episode = run_episode(env, policy)
        policy.close()
        assert "tools" not in server.requests[0]
    assert episode.truncated and episode.reward == 0.0 and episode.steps == env.task.max_steps


def test_a_model_answering_with_tool_calls_drives_an_episode() -> None:
    calls = [
        ("write_file", {"path": "greeting.txt", "content": "hello, world\n"}),
        ("read_file", {"path": "greeting.txt"}),
        ("submit", {}),
    ]

    def reply(prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        name, arguments = calls[turn]
        function = {"name": name, "arguments": json.dumps(arguments)}
        return {"content": None, "tool_calls": [{"id": f"call-{turn}", "type": "function", "function": function}]}

    with OpenAIServer(default=reply) as server, TaskEnv(example("write-file")) as env:
        policy = OpenAIPolicy(server.base_url, "test-model")
        episode = run_episode(env, policy)
        policy.close()
        last_request = server.requests[-1]["messages"]
    assert episode.reward == 1.0 and episode.steps == 3
    assert last_request[-1]["role"] == "tool" and last_request[-1]["tool_call_id"] == "call-1"
    assert json.loads(last_request[-1]["content"]) == {"content": "hello, world\n", "truncated": False}


SOLVE_AS_TEXT = ['{"tool": "write_file", "path": "greeting.txt", "content": "hello, world\\n"}', '{"tool": "submit"}']


def solve_as_text(prompt: str, body: dict[str, Any]) -> str:
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return SOLVE_AS_TEXT[min(turn, len(SOLVE_AS_TEXT) - 1)]


def test_the_policy_sends_its_sampling_settings_with_every_request() -> None:
    with OpenAIServer(default=solve_as_text) as server, TaskEnv(example("write-file")) as env:
        policy = OpenAIPolicy(
            server.base_url,
            "m",
            use_tools=False,
            temperature=0.2,
            top_p=0.9,
            max_tokens=64,
            seed=7,
            stop=["</answer>"],
            extra_body={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}},
            headers={"X-Trace": "episode-1"},
        )
        try:
            episode = run_episode(env, policy)
        finally:
            policy.close()
        requests, headers = server.requests, server.headers
    assert episode.reward == 1.0 and len(requests) == 2
    for body in requests:
        assert body["max_tokens"] == 64 and body["temperature"] == 0.2 and body["top_p"] == 0.9
        assert body["seed"] == 7 and body["stop"] == ["</answer>"] and body["top_k"] == 20
        assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["model"] == "m"
    assert all(h["x-trace"] == "episode-1" for h in headers)


def test_the_policy_leaves_unset_sampling_settings_to_the_server() -> None:
    with OpenAIServer(default=solve_as_text) as server, TaskEnv(example("write-file")) as env:
        policy = OpenAIPolicy(server.base_url, "m", use_tools=False)
        run_episode(env, policy)
        policy.close()
        body = server.requests[0]
    assert set(body) == {"model", "messages"}


def test_the_policy_retries_what_the_shared_transport_retries() -> None:
    with OpenAIServer(default=solve_as_text) as server, TaskEnv(example("write-file")) as env:
        server.inject(status=503, times=2)  # with Retry-After: 0
        server.inject(status=429, times=1)
        policy = OpenAIPolicy(server.base_url, "m", use_tools=False, max_retries=3)
        try:
            episode = run_episode(env, policy)
        finally:
            policy.close()
        statuses = list(server.statuses)
    assert episode.reward == 1.0
    assert statuses == [503, 503, 429, 200, 200] and policy.attempts == 5


def test_the_policy_gives_up_after_its_retries_and_not_on_a_client_error() -> None:
    import httpx
    import pytest

    with OpenAIServer(default=solve_as_text) as server, TaskEnv(example("write-file")) as env:
        server.inject(status=500, times=10)
        policy = OpenAIPolicy(server.base_url, "m", use_tools=False, max_retries=2, retry_backoff=0.0)
        with pytest.raises(httpx.HTTPStatusError, match="500"):
            run_episode(env, policy)
        assert server.request_count() == 3
        policy.close()
    with OpenAIServer(default=solve_as_text) as server, TaskEnv(example("write-file")) as env:
        server.inject(status=400, times=10)
        policy = OpenAIPolicy(server.base_url, "m", use_tools=False, max_retries=2)
        with pytest.raises(httpx.HTTPStatusError, match="400"):
            run_episode(env, policy)
        assert server.request_count() == 1
        policy.close()
