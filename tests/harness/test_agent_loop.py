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
