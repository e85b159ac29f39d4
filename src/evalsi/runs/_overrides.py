"""``--set path.to.field=value`` overrides of a RunSpec, and errors that say they came from ``--set``.

A value is parsed as YAML unless its field wants text and only the text as written is valid there. An error in
an overridden field names the override and suggests close field names, rather than a line of the spec file. A
path an override sets (``output``, ``dataset.path``, a ``target.callable`` file, an evaluator's file param) is
typed on the command line (or given to a Python API), so it is relative to the working directory, unlike the
paths written in the spec file, which are relative to the file.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from evalsi.errors import SpecError, UnknownEvaluatorError
from evalsi.evaluators import evaluator_class, spec_path_params
from evalsi.specs import Resource, RunSpecBody
from evalsi.specs._resource import describe_pydantic_error
from evalsi.specs._run import sample_count_hint
from evalsi.specs._yaml import format_path

_FREE_FORM = frozenset({"params", "extra", "headers", "judge"})
"""Mappings whose keys are passed on as written (not spec fields, so not camelCased)."""


def apply_overrides(resource: Resource, overrides: Sequence[str]) -> Resource:
    """A copy of the resource with each ``path.to.field=value`` applied.

    Paths are relative to ``spec`` (a leading ``spec.`` is allowed; ``metadata.name`` renames the run); list
    items are ``evaluators[0].weight`` or ``evaluators.0.weight``; snake_case names match camelCase fields. A
    value is parsed as YAML, unless the field wants text and only the text as written is valid there
    (``--set dataset.promptTemplate={problem}`` is a template, not a mapping).

    Args:
        resource: The RunSpec resource.
        overrides: ``path.to.field=value`` texts, applied in order.

    Raises:
        SpecError: An override is malformed or makes its field invalid; named as coming from ``--set``, with
            close field names for an unknown one.

    """
    return applied_overrides(resource, overrides)[0]


def applied_overrides(resource: Resource, overrides: Sequence[str]) -> tuple[Resource, list[Override]]:
    """:func:`apply_overrides`, with each override applied (where it landed, its text and its value)."""
    if not overrides:
        return resource, []
    spec = copy.deepcopy(resource.spec)
    name = resource.name
    applied: list[Override] = []
    for override in overrides:
        dotted, sep, text = override.partition("=")
        if not sep or not dotted.strip():
            raise SpecError(f"{override!r} is not path.to.field=value", file="--set")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text  # not YAML: the text itself (validation says whether the field takes text)
        parts = _split(dotted.strip())
        if parts[:2] == ["metadata", "name"] and len(parts) == 2:
            name = str(value)
            continue
        keys = _assign(spec, parts[1:] if parts[0] == "spec" else parts, value, dotted)
        applied.append(Override(dotted.strip(), tuple(keys), text, value))
    _check_overrides(spec, applied)
    _paths_from_the_working_directory(spec, applied)
    return Resource(resource.kind, name, spec, resource.document, resource.labels), applied


def override_at(exc: SpecError, applied: Sequence[Override]) -> Override | None:
    """The override a binding error (an evaluator's params...) lies inside, if any."""
    for override in applied:
        where = format_path(("spec", *override.keys))
        if exc.path and (exc.path == where or exc.path.startswith((where + ".", where + "["))):
            return override
    return None


@dataclass(frozen=True)
class Override:
    """One applied ``--set``: as written, the keys it landed on in the spec, its text and its parsed value."""

    dotted: str
    keys: tuple[str | int, ...]
    text: str
    value: Any


def _check_overrides(spec: dict[str, Any], applied: Sequence[Override]) -> None:
    """Validate the overridden spec; an error inside an overridden field is the override's, not the file's."""
    for override in applied:
        errors = _errors_under(spec, override.keys)
        if errors and not isinstance(override.value, str):
            put(spec, override.keys, override.text)  # the field may want the text as written
            if not _errors_under(spec, override.keys):
                continue
            put(spec, override.keys, override.value)
            errors = _errors_under(spec, override.keys)
        if errors:
            first = errors[0]
            loc = tuple(first["loc"])
            message = describe_pydantic_error(first)
            if first["type"] == "extra_forbidden":
                close = _close_fields(loc)
                message += (f"; did you mean {', '.join(close)}?" if close else "") + sample_count_hint(str(loc[-1]))
            raise SpecError(message, file="--set", path=f"{override.dotted} ({format_path(('spec', *loc))})")


def _paths_from_the_working_directory(spec: dict[str, Any], applied: Sequence[Override]) -> None:
    """Make every relative path an override set absolute against the working directory (where it was typed)."""
    for location in _path_locations(spec):
        if not any(location[: len(o.keys)] == o.keys for o in applied):
            continue
        value: Any = spec
        for key in location:
            value = value[key]
        if isinstance(value, str) and value:
            put(spec, location, _absolute(value, callable_target=location == ("target", "callable")))


def _absolute(value: str, *, callable_target: bool) -> str:
    """A path made absolute against the working directory; for a callable, only its ``file.py`` part."""
    if callable_target:
        file_part, colon, attribute = value.partition(":")
        if not file_part.endswith(".py"):
            return value  # module:function, found on the import path
        return f"{_absolute(file_part, callable_target=False)}{colon}{attribute}"
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else path.absolute())


def _path_locations(spec: Mapping[str, Any]) -> Iterator[tuple[str | int, ...]]:
    """Where the spec mapping holds paths: output, dataset.path, target.callable, evaluators' file params."""
    if "output" in spec:
        yield ("output",)
    for section, key in (("dataset", "path"), ("target", "callable")):
        inner = spec.get(section)
        if isinstance(inner, Mapping) and key in inner:
            yield (section, key)
    evaluators = spec.get("evaluators")
    for index, component in enumerate(evaluators if isinstance(evaluators, list) else []):
        params = component.get("params") if isinstance(component, Mapping) else None
        if not isinstance(params, Mapping) or not isinstance(component.get("ref"), str):
            continue
        try:
            cls = evaluator_class(component["ref"].partition("/")[0])
        except UnknownEvaluatorError:
            continue  # binding reports it, naming the field
        for name in spec_path_params(cls.params_model):
            if name in params:
                yield ("evaluators", index, "params", name)


def _errors_under(spec: dict[str, Any], keys: tuple[str | int, ...]) -> list[Any]:
    try:
        RunSpecBody.model_validate(spec)
    except ValidationError as exc:
        return [e for e in exc.errors(include_url=False) if _related(tuple(e["loc"]), keys)]
    return []


def _related(loc: tuple[Any, ...], keys: tuple[str | int, ...]) -> bool:
    """Whether a validation error at ``loc`` lies inside the overridden field (or the field lies inside it)."""
    if not loc:
        return False
    common = min(len(loc), len(keys))
    return loc[:common] == keys[:common]


def put(root: dict[str, Any], keys: tuple[str | int, ...], value: Any) -> None:
    """Set the value at ``keys`` (which exist) in the spec mapping."""
    node: Any = root
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value


def _close_fields(loc: tuple[Any, ...]) -> list[str]:
    """Spec field paths close to an unknown one: the same name elsewhere, then similar spellings."""
    wanted = ".".join(str(p) for p in loc if not isinstance(p, int))
    known = _field_paths(RunSpecBody)
    last = wanted.rsplit(".", 1)[-1].lower()
    same = [p for p in known if p.rsplit(".", 1)[-1].lower() == last]
    similar = difflib.get_close_matches(wanted, known, n=3, cutoff=0.6)
    return [*dict.fromkeys([*same, *similar])][:4]


def _field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field of a spec model as a dotted camelCase path (nested models and lists of them included)."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        path = prefix + (info.alias or name)
        out.append(path)
        for arg in (info.annotation, *get_args(info.annotation)):
            for inner in (arg, *get_args(arg)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    out += _field_paths(inner, path + ".")
    return out


def _split(dotted: str) -> list[str]:
    return [p for p in dotted.replace("[", ".").replace("]", "").split(".") if p]


def _assign(root: dict[str, Any], parts: list[str], value: Any, dotted: str) -> list[str | int]:
    """Set the field ``parts`` names (creating mappings on the way); returns the keys as they are in the spec."""
    node: Any = root
    parent_key = ""
    keys: list[str | int] = []
    for position, part in enumerate(parts):
        last = position == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise SpecError(f"{part!r} is not an index of a list of {len(node)}", file="--set", path=dotted)
            key: Any = int(part)
        elif isinstance(node, dict):
            key = part if part in node or parent_key in _FREE_FORM else _field_key(node, part)
        else:
            raise SpecError(f"cannot set {part!r} inside a {type(node).__name__}", file="--set", path=dotted)
        keys.append(key)
        if last:
            node[key] = value
            return keys
        if isinstance(node, dict) and not isinstance(node.get(key), dict | list):
            node[key] = {}
        node, parent_key = node[key], str(key)
    return keys


def _field_key(node: Mapping[str, Any], part: str) -> str:
    camel = to_camel(part)
    return camel if camel in node or "_" in part else part
