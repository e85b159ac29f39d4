"""JSON Schema checking for untrusted schemas: no retrieval, and every regex on the linear-time engine.

jsonschema's stock keywords run ``pattern`` and ``patternProperties`` through Python's backtracking ``re``, and
its default registry reads ``file://`` and fetches ``http(s)://`` references. Here the registry retrieves
nothing, references must stay inside the schema, and the keywords that match patterns use RE2.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, SchemaError, ValidationError
from jsonschema.validators import extend
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

from evalsi.evaluators._patterns import compile_pattern, text_problem

_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are instance data, not schemas: a ``$ref`` key inside them is not a reference."""


def _retrieve_nothing(uri: str) -> Resource[Any]:
    raise NoSuchResource(uri)


NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]  # an attrs alias
"""A registry that knows only the schema it is given; any other URI is unresolvable, never read or fetched."""


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    problem = text_problem(instance)
    if problem is not None:
        yield ValidationError(f"cannot match pattern {pattern!r}: {problem}")
    elif compile_pattern(pattern).search(instance) is None:
        shown = instance if len(instance) <= 80 else instance[:77] + "..."
        yield ValidationError(f"{shown!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = compile_pattern(pattern)
        for key, value in instance.items():
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = [compile_pattern(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in named and not any(p.search(k) is not None for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        listed = ", ".join(repr(k) for k in sorted(extras))
        yield ValidationError(f"additional properties are not allowed ({listed} unexpected)")


_Base: Any = extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)

_SCHEMA_FORMATS = FormatChecker(formats=())
_SCHEMA_FORMATS.checks("regex", raises=ValueError)(
    lambda value: not isinstance(value, str) or bool(compile_pattern(value))
)


def safe_validator(schema: Mapping[str, Any] | bool) -> Any:
    """A draft 2020-12 validator for ``schema`` that retrieves nothing and matches patterns with RE2."""
    return _Base(schema, registry=NO_RETRIEVAL, format_checker=None)


def check_untrusted_schema(schema: Mapping[str, Any] | bool) -> None:
    """Check ``schema`` is valid draft 2020-12, keeps its references inside, and its patterns compile on RE2.

    Raises:
        SchemaError: The schema is invalid; the message names the keyword and its place in the schema.

    """
    if isinstance(schema, Mapping):
        uses = _walk(schema, "#")
        if uses["unevaluatedProperties"] and uses["patternProperties"]:
            raise SchemaError(
                "unevaluatedProperties together with patternProperties is not supported (its pattern matching "
                "cannot be bounded); use additionalProperties beside patternProperties instead"
            )
    Draft202012Validator.check_schema(schema, format_checker=_SCHEMA_FORMATS)


def _walk(node: Any, where: str) -> dict[str, bool]:
    uses = {"unevaluatedProperties": False, "patternProperties": False}
    stack: list[tuple[Any, str]] = [(node, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, list):
            stack.extend((child, f"{at}/{i}") for i, child in enumerate(item))
            continue
        if not isinstance(item, Mapping):
            continue
        for key, value in item.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in ("$ref", "$dynamicRef") and isinstance(value, str) and not value.startswith("#"):
                raise SchemaError(
                    f"{key} {value!r} at {at} points outside the schema; only references within it are "
                    "resolved ('#/$defs/NAME' or '#anchor'): nothing is read from files or fetched from URLs"
                )
            if key == "pattern" and isinstance(value, str):
                _check_regex(value, f"pattern at {at}")
            if key == "patternProperties" and isinstance(value, Mapping):
                for pattern in value:
                    _check_regex(str(pattern), f"patternProperties key {pattern!r} at {at}")
            if key in uses:
                uses[key] = True
            stack.append((value, f"{at}/{key}"))
    return uses


def _check_regex(pattern: str, where: str) -> None:
    try:
        compile_pattern(pattern)
    except ValueError as exc:
        raise SchemaError(f"{where}: {exc}") from None
