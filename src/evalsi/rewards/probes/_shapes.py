r"""The format shell: the shortest completion a component's pattern or JSON Schema accepts, carrying no answer.

A format reward pays for the shell of an answer (``<think></think><answer></answer>``, ``\boxed{x}``, ``{}``).
That is its job, so a format component paying the shell is no finding by itself; a spec whose every component
only checks form is, because its whole total is then earned without an answer. The shell is built from the
pattern itself (each regex node at its minimum: the first branch, the least repeats, a character the class
allows) and from the schema (required properties only, each at its simplest value), so no hand-written
guess of the format is needed.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any

from evalsi.rewards.probes._registry import ProbeContext, ProbeRow, Variant, probe

_parser: Any = importlib.import_module("re._parser")
_constants: Any = importlib.import_module("re._constants")
_MAX_SHELL = 4096


def _category_char(category: Any) -> str:
    name = str(category)
    if "NOT_DIGIT" in name or "NOT_SPACE" in name:
        return "x"
    if "NOT_WORD" in name:
        return " "
    if "DIGIT" in name:
        return "0"
    if "SPACE" in name:
        return " "
    return "x"


def _in_char(items: list[tuple[Any, Any]]) -> str:
    negate = any(op is _constants.NEGATE for op, _ in items)
    allowed = [op_arg for op_arg in items if op_arg[0] is not _constants.NEGATE]
    if negate:
        for char in "x0 _-a":
            if not any(_set_item_has(item, char) for item in allowed):
                return char
        return "\u00e9"
    op, arg = allowed[0]
    if op is _constants.LITERAL:
        return chr(arg)
    if op is _constants.RANGE:
        return chr(arg[0])
    if op is _constants.CATEGORY:
        return _category_char(arg)
    return "x"


def _set_item_has(item: tuple[Any, Any], char: str) -> bool:
    op, arg = item
    code = ord(char)
    if op is _constants.LITERAL:
        return bool(arg == code)
    if op is _constants.RANGE:
        return bool(arg[0] <= code <= arg[1])
    if op is _constants.CATEGORY:
        name = str(arg)
        positive = {"DIGIT": char.isdigit(), "SPACE": char.isspace(), "WORD": char.isalnum() or char == "_"}
        for key, has in positive.items():
            if key in name:
                return has != name.count("NOT_") > 0
    return False


def _minimal(nodes: Any, depth: int = 0) -> str:
    if depth > 50:
        raise ValueError("pattern nested too deeply")
    out: list[str] = []
    for op, arg in nodes:
        if op is _constants.LITERAL:
            out.append(chr(arg))
        elif op is _constants.NOT_LITERAL:
            out.append("x" if arg != ord("x") else "y")
        elif op is _constants.ANY:
            out.append("x")
        elif op is _constants.IN:
            out.append(_in_char(list(arg)))
        elif op in (_constants.MAX_REPEAT, _constants.MIN_REPEAT, getattr(_constants, "POSSESSIVE_REPEAT", None)):
            low, _, sub = arg
            out.append(_minimal(sub, depth + 1) * low)
        elif op is _constants.SUBPATTERN:
            out.append(_minimal(arg[-1], depth + 1))
        elif op is _constants.ATOMIC_GROUP:
            out.append(_minimal(arg, depth + 1))
        elif op is _constants.BRANCH:
            out.append(min((_minimal(branch, depth + 1) for branch in arg[1]), key=len))
        elif op is _constants.CATEGORY:
            out.append(_category_char(arg))
        elif op in (_constants.AT, _constants.ASSERT, _constants.ASSERT_NOT):
            continue
        else:
            raise ValueError(f"cannot build a string for {op}")
    return "".join(out)


def minimal_match(pattern: str) -> str | None:
    """The shortest string the pattern matches whole, built node by node; None when it cannot be built."""
    try:
        text = _minimal(_parser.parse(pattern))
    except Exception:  # RE2-only syntax (\pL), or a construct with no obvious minimum
        return None
    return text if len(text) <= _MAX_SHELL else None


def minimal_instance(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """The simplest JSON value ``schema`` accepts: required properties only, each at its simplest value."""
    root = schema if root is None else root
    if depth > 32 or not isinstance(schema, Mapping):
        return {}
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        return minimal_instance(target, root, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return minimal_instance(options[0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema or "required" in schema else "array" if "items" in schema else None
    if kind == "object":
        properties = schema.get("properties") or {}
        return {
            name: minimal_instance(properties.get(name, {}), root, depth + 1)
            for name in schema.get("required") or []
            if isinstance(name, str)
        }
    if kind == "array":
        count = int(schema.get("minItems") or 0)
        return [minimal_instance(schema.get("items", {}), root, depth + 1) for _ in range(min(count, 64))]
    if kind == "string":
        pattern = schema.get("pattern")
        built = minimal_match(pattern) if isinstance(pattern, str) else None
        return built if built is not None else "x" * min(int(schema.get("minLength") or 0), 4096)
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        if isinstance(low, int | float) and not isinstance(low, bool):
            return low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        return 0
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return {}


@probe(
    "format-shell",
    "The shortest completion the component's format pattern or JSON Schema accepts, empty of any answer.",
    ["format", "schema"],
)
def _format_shell(row: ProbeRow, context: ProbeContext) -> list[Variant]:
    out: list[Variant] = []
    for component in context.components:
        params = component.component.params
        pattern = getattr(params, "pattern", None)
        if isinstance(pattern, str):
            shell = minimal_match(pattern)
            if shell is not None and (component.name, shell) not in out:
                out.append((component.name, shell))
        schema = getattr(params, "schema_", None)
        if schema is not None:
            document = json.dumps(minimal_instance(schema))
            out.append((component.name, document))
            out.append((f"{component.name}-fenced", f"```json\n{document}\n```"))
    return out
