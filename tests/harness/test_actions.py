"""Actions as an LLM writes them: every accepted form, clear errors, and the OpenAI tool schemas."""

from __future__ import annotations

import json

import jsonschema
import pytest

from evalsi_harness import TOOL_NAMES, Action, ActionError, parse_action, tool_schemas


@pytest.mark.parametrize(
    "raw",
    [
        {"tool": "bash", "command": "ls"},
        {"name": "bash", "arguments": {"command": "ls"}},
        {"name": "bash", "arguments": '{"command": "ls"}'},
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
        '{"tool": "bash", "command": "ls"}',
        'I will list the files.\n```json\n{"tool": "bash", "command": "ls"}\n```\n',
        "Let me look.\n```bash\nls```",
        Action("bash", {"command": "ls"}),
    ],
)
def test_every_form_of_the_same_action(raw: object) -> None:
    action = parse_action(raw)
    assert action.tool == "bash" and action.args["command"].strip() == "ls"


def test_submit_and_file_actions() -> None:
    assert parse_action('{"tool": "submit"}') == Action("submit", {})
    assert parse_action({"name": "submit", "arguments": ""}) == Action("submit", {})
    write = parse_action({"tool": "write_file", "path": "a/b.txt", "content": "x\n"})
    assert write.args == {"path": "a/b.txt", "content": "x\n"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "the action is empty"),
        ("just prose, no action", "not a JSON object nor a ```bash block"),
        ('{"tool": "rm_rf"}', "unknown tool 'rm_rf'; the tools are bash, read_file, write_file, submit"),
        ('{"tool": "bash"}', "bash: missing command (it takes command)"),
        ('{"tool": "read_file", "path": "a", "mode": "r"}', "read_file: unknown argument mode"),
        ('{"tool": "bash", "command": ["ls"]}', "bash: command must be a string, not list"),
        ({"name": "bash", "arguments": "{not json"}, "the arguments of 'bash' are not valid JSON"),
        ({"command": "ls"}, "the action names no tool"),
        (42, "an action is a JSON object or text, not int"),
    ],
)
def test_malformed_actions_say_what_is_wrong_and_what_is_valid(raw: object, message: str) -> None:
    with pytest.raises(ActionError) as info:
        parse_action(raw)
    assert message in str(info.value)


def test_tool_schemas_are_openai_tools_with_valid_json_schemas() -> None:
    tools = tool_schemas()
    assert [t["function"]["name"] for t in tools] == list(TOOL_NAMES)
    for tool in tools:
        assert tool["type"] == "function" and tool["function"]["description"]
        schema = tool["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
    write = tools[TOOL_NAMES.index("write_file")]["function"]["parameters"]
    assert write["required"] == ["path", "content"]
    jsonschema.validate({"path": "a", "content": "b"}, write)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"path": "a"}, write)
    json.dumps(tools)  # plain JSON, ready for a request body
