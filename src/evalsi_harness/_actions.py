"""Actions as an LLM writes them, and the tools' schemas in the OpenAI tools format.

An action is one of the tools ``bash``, ``read_file``, ``write_file`` or ``submit`` with its arguments. It can be
given as an :class:`Action`, a mapping (``{"tool": "bash", "command": "ls"}``, ``{"name": "bash", "arguments":
{...}}`` or an OpenAI tool call ``{"type": "function", "function": {"name": ..., "arguments": "<json>"}}``), or
text: that JSON, alone or in a fenced block within prose, or a fenced ```bash block (a command).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ToolName = Literal["bash", "read_file", "write_file", "submit"]

_PARAMS: dict[str, dict[str, str]] = {
    "bash": {"command": "The shell command to run in the work dir (bash -c)."},
    "read_file": {"path": "The file to read, relative to the work dir or absolute."},
    "write_file": {
        "path": "The file to write, relative to the work dir or absolute; parent directories are created.",
        "content": "The file's whole new text.",
    },
    "submit": {},
}
_DESCRIPTIONS: dict[str, str] = {
    "bash": "Run a shell command in the task's work dir. Returns exit_code, stdout, stderr and whether output "
    "was truncated. Each command is a fresh process: background processes do not outlive it.",
    "read_file": "Read a text file. Returns its content, or an error.",
    "write_file": "Create or overwrite a text file with the given content.",
    "submit": "Finish the task: the work dir is graded as it is now. Call it once, when done.",
}
TOOL_NAMES: tuple[ToolName, ...] = ("bash", "read_file", "write_file", "submit")
"""The actions an episode takes, each also an OpenAI tool (see ``tool_schemas``)."""
_FENCE = re.compile(r"```([A-Za-z0-9_-]*)[ \t]*\n(.*?)```", re.DOTALL)


class ActionError(ValueError):
    """An action that cannot be carried out; its message is what the agent sees, saying what would be valid."""


@dataclass(frozen=True)
class Action:
    """One tool call: the tool's name and its string arguments."""

    tool: ToolName
    args: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The action as ``{"tool": ..., **args}``."""
        return {"tool": self.tool, **self.args}


def tool_schemas() -> list[dict[str, Any]]:
    """The tools in the OpenAI ``tools`` format (for chat completions, or TRL's environment tools)."""
    out: list[dict[str, Any]] = []
    for name in TOOL_NAMES:
        properties = {arg: {"type": "string", "description": text} for arg, text in _PARAMS[name].items()}
        parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": list(properties)}
        parameters["additionalProperties"] = False
        function = {"name": name, "description": _DESCRIPTIONS[name], "parameters": parameters}
        out.append({"type": "function", "function": function})
    return out


def parse_action(raw: object) -> Action:
    """The action ``raw`` stands for.

    Args:
        raw: A mapping (``{"tool": ...}`` or an OpenAI tool call), its JSON text, or an :class:`Action`.

    Raises:
        ActionError: ``raw`` is not an action; the message names what is wrong and the valid forms.

    """
    if isinstance(raw, Action):
        return _checked(raw.tool, dict(raw.args))
    if isinstance(raw, str):
        return parse_action(_from_text(raw))
    if not isinstance(raw, Mapping):
        raise ActionError(f"an action is a JSON object or text, not {type(raw).__name__}; {_FORMS}")
    data = dict(raw)
    if isinstance(data.get("function"), Mapping):  # an OpenAI tool call
        data = dict(data["function"])
    name = data.pop("tool", None) or data.pop("name", None)
    arguments = data.pop("arguments", None)
    data.pop("type", None)
    data.pop("id", None)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ActionError(f"the arguments of {name!r} are not valid JSON ({exc.msg} at {exc.pos})") from None
    if arguments is not None:
        if not isinstance(arguments, Mapping):
            raise ActionError(f"the arguments of {name!r} must be a JSON object")
        data.update(arguments)
    if not isinstance(name, str):
        raise ActionError(f"the action names no tool; {_FORMS}")
    return _checked(name, data)


_FORMS = (
    'valid forms: {"tool": "bash", "command": "..."}, {"tool": "read_file", "path": "..."}, '
    '{"tool": "write_file", "path": "...", "content": "..."}, {"tool": "submit"}'
)


def _from_text(text: str) -> object:
    stripped = text.strip()
    if not stripped:
        raise ActionError(f"the action is empty; {_FORMS}")
    candidates = [stripped] + [m.group(2) for m in _FENCE.finditer(text) if m.group(1) in ("", "json")]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, Mapping):
            return value
    for match in _FENCE.finditer(text):
        if match.group(1) in ("bash", "sh", "shell"):
            return {"tool": "bash", "command": match.group(2)}
    raise ActionError(f"the action is not a JSON object nor a ```bash block; {_FORMS}")


def _checked(name: str, args: dict[str, Any]) -> Action:
    if name not in _PARAMS:
        raise ActionError(f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}")
    expected = _PARAMS[name]
    missing = [arg for arg in expected if arg not in args]
    unknown = sorted(set(args) - set(expected))
    if missing or unknown:
        want = ", ".join(expected) or "no arguments"
        problem = f"missing {', '.join(missing)}" if missing else f"unknown argument {', '.join(unknown)}"
        raise ActionError(f"{name}: {problem} (it takes {want})")
    for arg, value in args.items():
        if not isinstance(value, str):
            raise ActionError(f"{name}: {arg} must be a string, not {type(value).__name__}")
    tool: ToolName = name  # type: ignore[assignment]  # checked against _PARAMS above
    return Action(tool, dict(args))
