"""Loading a RunSpec: ``--set`` overrides, validation with file/line/field errors, and binding its evaluators.

Evaluators are bound exactly as a RewardSpec's components (same binder, same params checks), into a
:class:`~evalsi.rewards.Reward` whose ``component_scores`` is the run's only scoring path.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from evalsi.errors import SpecError
from evalsi.rewards import Reward, bind_component
from evalsi.runs._builtin import builtin_evaluators
from evalsi.runs._summary import MetricInfo, pass_k_names
from evalsi.specs import (
    ComponentSpec,
    Resource,
    RewardSpec,
    RewardSpecBody,
    RunSpec,
    RunSpecBody,
    document_from_mapping,
    format_path,
    load_resources,
    parse_resources,
    select_resource,
)
from evalsi.specs._resource import describe_pydantic_error

_FREE_FORM = frozenset({"params", "extra", "headers", "judge"})
"""Mappings whose keys are passed on as written (not spec fields, so not camelCased)."""


@dataclass
class BoundRun:
    """A RunSpec ready to run: the validated spec, its evaluators bound into a Reward, and its metrics."""

    spec: RunSpec
    reward: Reward
    metrics: list[MetricInfo]
    base_dir: Path | None

    @property
    def body(self) -> RunSpecBody:
        """The validated ``spec`` section."""
        return self.spec.spec

    @property
    def output(self) -> Path:
        """Where the results file goes: ``spec.output`` (relative to the spec file), else ``<name>.results.json``."""
        if not self.body.output:
            return Path(f"{self.spec.name}.results.json")
        path = Path(self.body.output).expanduser()
        return path if path.is_absolute() or self.base_dir is None else self.base_dir / path

    def metric_names(self) -> list[str]:
        """Component means, then pass@k and pass^k metrics."""
        return [m.name for m in self.metrics] + [name for name, _, _ in pass_k_names(self.body.pass_k)]


def load_run(path: str | Path, name: str | None = None, overrides: Sequence[str] = ()) -> BoundRun:
    """Load the RunSpec in a YAML file, apply ``path.to.field=value`` overrides, validate and bind it.

    Raises:
        SpecError: The file, an override, a field, a ``ref`` or a param is invalid (file, line, field path).

    """
    resource = select_resource(load_resources(path), "RunSpec", name, str(path))
    overridden, applied = _apply_overrides(resource, overrides)
    try:
        return bind_run(overridden, Path(path).parent)
    except SpecError as exc:
        culprit = _override_at(exc, applied)
        if culprit is None:
            raise
        error = SpecError(exc.detail, file="--set", path=f"{culprit.dotted} ({exc.path})")
    if isinstance(culprit.value, str):
        raise error
    # an evaluator param may want text: retry with the value as written
    _put(overridden.spec, culprit.keys, culprit.text)
    try:
        return bind_run(overridden, Path(path).parent)
    except SpecError:
        raise error from None


def run_from_mapping(data: Mapping[str, Any], source: str | None = None, base_dir: Path | None = None) -> BoundRun:
    """Bind a RunSpec given as a mapping: a whole resource, or just its ``spec`` (named ``run``)."""
    raw = dict(data)
    if "apiVersion" not in raw:
        raw = {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec", "metadata": {"name": "run"}, "spec": raw}
    resource = select_resource(parse_resources([document_from_mapping(raw, source)]), "RunSpec", None, source)
    return bind_run(resource, base_dir)


def apply_overrides(resource: Resource, overrides: Sequence[str]) -> Resource:
    """A copy of the resource with each ``path.to.field=value`` applied.

    Paths are relative to ``spec`` (a leading ``spec.`` is allowed; ``metadata.name`` renames the run); list
    items are ``evaluators[0].weight`` or ``evaluators.0.weight``; snake_case names match camelCase fields. A
    value is parsed as YAML, unless the field wants text and only the text as written is valid there
    (``--set dataset.promptTemplate={problem}`` is a template, not a mapping).

    Raises:
        SpecError: An override is malformed or makes its field invalid; named as coming from ``--set``, with
            close field names for an unknown one.

    """
    return _apply_overrides(resource, overrides)[0]


def _apply_overrides(resource: Resource, overrides: Sequence[str]) -> tuple[Resource, list[_Override]]:
    if not overrides:
        return resource, []
    spec = copy.deepcopy(resource.spec)
    name = resource.name
    applied: list[_Override] = []
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
        applied.append(_Override(dotted.strip(), tuple(keys), text, value))
    _check_overrides(spec, applied)
    return Resource(resource.kind, name, spec, resource.document, resource.labels), applied


def _override_at(exc: SpecError, applied: Sequence[_Override]) -> _Override | None:
    """The override a binding error (an evaluator's params...) lies inside, if any."""
    for override in applied:
        where = format_path(("spec", *override.keys))
        if exc.path and (exc.path == where or exc.path.startswith((where + ".", where + "["))):
            return override
    return None


@dataclass(frozen=True)
class _Override:
    dotted: str
    keys: tuple[str | int, ...]
    text: str
    value: Any


def _check_overrides(spec: dict[str, Any], applied: Sequence[_Override]) -> None:
    """Validate the overridden spec; an error inside an overridden field is the override's, not the file's."""
    for override in applied:
        errors = _errors_under(spec, override.keys)
        if errors and not isinstance(override.value, str):
            _put(spec, override.keys, override.text)  # the field may want the text as written
            if not _errors_under(spec, override.keys):
                continue
            _put(spec, override.keys, override.value)
            errors = _errors_under(spec, override.keys)
        if errors:
            first = errors[0]
            loc = tuple(first["loc"])
            message = describe_pydantic_error(first)
            if first["type"] == "extra_forbidden":
                close = _close_fields(loc)
                message += f"; did you mean {', '.join(close)}?" if close else ""
            raise SpecError(message, file="--set", path=f"{override.dotted} ({format_path(('spec', *loc))})")


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


def _put(root: dict[str, Any], keys: tuple[str | int, ...], value: Any) -> None:
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


def bind_run(resource: Resource, base_dir: Path | None = None) -> BoundRun:
    """Validate a RunSpec resource and bind its evaluators (a built-in eval's own when none are given)."""
    try:
        body = RunSpecBody.model_validate(resource.spec)
    except ValidationError as exc:
        raise resource.validation_error(exc) from None
    spec = RunSpec(name=resource.name, spec=body, source=resource.document.file)
    components = list(body.evaluators)
    where_root: tuple[str | int, ...] = ("spec", "evaluators")
    if not components and body.dataset.builtin is not None:
        components = [ComponentSpec.model_validate(e) for e in builtin_evaluators(body.dataset.builtin)]
        where_root = ("spec", "dataset", "builtin")
    reward_body = RewardSpecBody(components=components, on_error="zero")
    bound = []
    seen: set[str] = set()
    for index, component in enumerate(components):
        where = (*where_root, index) if where_root[-1] == "evaluators" else where_root
        if component.display_name in seen:
            raise resource.error(f"two evaluators are named {component.display_name!r}; give one a `name`", where)
        seen.add(component.display_name)
        bound.append(bind_component(resource, component, reward_body, where))
    reward = Reward(RewardSpec(name=resource.name, spec=reward_body, source=resource.document.file), bound)
    metrics = [MetricInfo(c.display_name, c.threshold) for c in components]
    run = BoundRun(spec, reward, metrics, base_dir)
    _check_metric_names(resource, run)
    return run


def _check_metric_names(resource: Resource, run: BoundRun) -> None:
    names = {m.name for m in run.metrics}
    for key, ks in (("atK", run.body.pass_k.at_k), ("powK", run.body.pass_k.pow_k)):
        for index, metric in enumerate(ks.metrics if ks else []):
            if metric not in names:
                raise resource.error(
                    f"{metric!r} is not an evaluator of this run (evaluators: {', '.join(sorted(names))})",
                    ("spec", "passK", key, "metrics", index),
                )
    known = run.metric_names()
    for index, gate in enumerate(run.body.gates):
        if gate.metric not in known:
            raise resource.error(
                f"unknown metric {gate.metric!r} (metrics of this run: {', '.join(known)})",
                ("spec", "gates", index, "metric"),
            )
