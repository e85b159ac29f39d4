"""What a request may ask of the server: its spec is untrusted data, the server's config decides the rest.

Before a request's RewardSpec is bound, :func:`server_spec` makes it the server's: a component may not set a param
its evaluator marks operator-only (a URL, a credential, headers, upstream request fields; 403 naming the field),
judges and reward models are named resources of the server config, and code runs at the operator's isolation floor
or higher. :func:`check_depth` refuses data nested deeper than any real spec or rollout needs (400, not a crash).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evalsi.errors import EvalsiError, SpecError
from evalsi.evaluators import Evaluator, evaluator_class, has_operator_fields, operator_fields_set
from evalsi.sandbox import ISOLATION_ORDER, isolation_level
from evalsi.server._config import ServerSpec
from evalsi.server._errors import ServiceError

_CONTAINERS = (dict, list)
MAX_DEPTH = 64
"""Deepest nesting of lists and objects accepted in a spec or a rollout (chat messages and test cases need < 10)."""


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` when its lists and objects nest deeper than ``limit``.

    Raises:
        ServiceError: ``invalid_argument`` naming ``where`` and the limit.

    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            raise ServiceError("invalid_argument", f"{where}: nested more than {limit} levels deep", path=where)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


INT64 = 1 << 63
"""Integers the server stores or sends on are signed 64-bit: ``-INT64 <= n < INT64``."""


def check_int64(value: int, where: str) -> int:
    """``value`` when it fits a signed 64-bit integer (what databases and protobuf hold).

    Raises:
        ServiceError: ``invalid_argument`` naming ``where`` and the range.

    """
    if not -INT64 <= value < INT64:
        raise ServiceError(
            "invalid_argument", f"{where}: {value:.3g} is out of range (a whole number below 2**63)", path=where
        )
    return value


def check_rollouts_depth(rollouts: Sequence[Mapping[str, Any]]) -> None:
    """:func:`check_depth` for each rollout, naming its index (flat rollouts cost one pass over their values).

    The service calls it when scoring failed the way deep data fails (recursion limits), to answer the caller's
    error as such; a pass over every rollout of every call would cost more than the cache hits it precedes.
    """
    for index, rollout in enumerate(rollouts):
        for value in rollout.values():
            if isinstance(value, _CONTAINERS):
                check_depth(rollout, f"rollouts[{index}]")
                break


def server_spec(spec: Mapping[str, Any], config: ServerSpec) -> dict[str, Any]:
    """``spec`` as this server runs it: resources resolved by name, operator-only params refused, floor applied.

    ``spec`` is a whole RewardSpec resource or its body; the caller's mapping is not changed.

    Raises:
        ServiceError: ``permission_denied`` naming a field only the operator may set.
        SpecError: A judge or reward model is not configured here (the message lists the valid names).

    """
    return _each_component(spec, lambda component, where: _component(component, where, config))


def with_named_judges(spec: Mapping[str, Any], judges: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``spec`` with every component's ``judge: NAME`` replaced by the server's judge of that name (nothing else).

    Raises:
        SpecError: A component names a judge the server does not configure (the message lists the valid ones).

    """
    return _each_component(spec, lambda component, where: _named_judge(component, where, judges))


Rewrite = Callable[[dict[str, Any], str], dict[str, Any]]


def _each_component(spec: Mapping[str, Any], rewrite: Rewrite) -> dict[str, Any]:
    out = dict(spec)
    body = out.get("spec") if "apiVersion" in out else out
    if not isinstance(body, Mapping) or not isinstance(body.get("components"), list):
        return out
    body = dict(body)
    body["components"] = [
        rewrite(dict(component), f"spec.components[{index}]") if isinstance(component, Mapping) else component
        for index, component in enumerate(body["components"])
    ]
    if "apiVersion" in out:
        out["spec"] = body
        return out
    return body


def _named_judge(component: dict[str, Any], where: str, judges: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    judge = component.get("judge")
    if isinstance(judge, str):
        component["judge"] = dict(_lookup(judges, judge, "judges", f"{where}.judge"))
    return component


def _component(component: dict[str, Any], where: str, config: ServerSpec) -> dict[str, Any]:
    judge = component.get("judge")
    if isinstance(judge, str):
        component = _named_judge(component, where, config.judges)
        judge = None  # the operator's: trusted as it is
    evaluator = _evaluator(component.get("ref"))
    if evaluator is None:
        return component  # binding reports the unknown ref
    if evaluator.in_process_only:
        raise ServiceError(
            "permission_denied",
            f"{where}.ref: {evaluator.name!r} runs code or reads files the spec names on the machine that scores "
            "it; it is for in-process scoring and is not available on a server",
            path=f"{where}.ref",
        )
    params = component.get("params")
    params = dict(params) if isinstance(params, Mapping) else params
    if isinstance(params, dict):
        _refuse_operator_fields(evaluator, params, f"{where}.params")
    if judge is not None and "judge" in evaluator.params_model.model_fields:
        _refuse_operator_fields(evaluator, {"judge": judge}, where)
    if isinstance(params, dict):
        params = _resolve_resource(evaluator, params, f"{where}.params", config)
        component["params"] = params
    elif evaluator.server_resource is not None and not evaluator.server_resource.nested and params is None:
        component["params"] = _resolve_resource(evaluator, {}, f"{where}.params", config)
    if evaluator.runs_code and "min_isolation" in evaluator.params_model.model_fields:
        _apply_floor(component, config.sandbox.min_isolation)
    return component


def _evaluator(ref: Any) -> type[Evaluator[Any]] | None:
    if not isinstance(ref, str):
        return None
    try:
        return evaluator_class(ref.partition("/")[0])  # `name/argument` refs name the evaluator before the slash
    except EvalsiError:
        return None


def _refuse_operator_fields(evaluator: type[Evaluator[Any]], given: Mapping[str, Any], where: str) -> None:
    """403 for the first operator-only field ``given`` sets, or for an inline config that holds such fields."""
    found = operator_fields_set(evaluator.params_model, given)
    resource = evaluator.server_resource
    hint = ""
    if resource is not None:
        hint = f"; name one of the server's {resource.section.replace('_', ' ')} with `{resource.param}: NAME`"
    if found:
        path = where + "".join(f".{part}" for part in found[0])
        raise ServiceError(
            "permission_denied",
            f"{path}: a request may not set this: where {evaluator.name!r} connects, with which credential and "
            f"what it sends upstream are the server operator's to configure{hint}",
            path=path,
        )
    if resource is not None and resource.nested and isinstance(given.get(resource.param), Mapping):
        nested = evaluator.params_model.model_fields[resource.param].annotation
        if isinstance(nested, type) and has_operator_fields(nested):
            path = f"{where}.{resource.param}"
            raise ServiceError(
                "permission_denied",
                f"{path}: an inline {resource.param} is not accepted on a server (its endpoint and credential are "
                f"the operator's){hint}",
                path=path,
            )


def _resolve_resource(
    evaluator: type[Evaluator[Any]], params: dict[str, Any], where: str, config: ServerSpec
) -> dict[str, Any]:
    resource = evaluator.server_resource
    if resource is None:
        return params
    entries = getattr(config, resource.section, None)
    if not isinstance(entries, Mapping):
        entries = {}  # a section this server does not have: nothing can be named
    name = params.get(resource.param)
    path = f"{where}.{resource.param}"
    if resource.nested:
        if isinstance(name, str):
            params[resource.param] = dict(_lookup(entries, name, resource.section, path))
        return params
    if not isinstance(name, str):
        valid = ", ".join(sorted(entries)) or "none are configured"
        raise SpecError(
            f"on this server {evaluator.name!r} takes `{resource.param}: NAME`, one of the server's "
            f"{_kind(resource.section)}s (valid: {valid})",
            file="request",
            path=path,
        )
    entry = _lookup(entries, name, resource.section, path)
    client = {key: value for key, value in params.items() if key != resource.param}
    return {**client, **entry}


def _lookup(entries: Mapping[str, Mapping[str, Any]], name: str, section: str, path: str) -> Mapping[str, Any]:
    entry = entries.get(name)
    if entry is None:
        valid = ", ".join(sorted(entries)) or "none are configured"
        raise SpecError(
            f"no {_kind(section)} named {name!r} on this server (valid: {valid})", file="request", path=path
        )
    return entry


def _kind(section: str) -> str:
    """``reward_models`` -> ``reward model``: what one entry of a config section is called in messages."""
    return section.removesuffix("s").replace("_", " ")


def _apply_floor(component: dict[str, Any], floor: str) -> None:
    """Raise the component's isolation to the server's floor; a higher rung asked for is kept."""
    sandbox = component.get("sandbox")
    if isinstance(sandbox, Mapping):
        key = "min_isolation" if "min_isolation" in sandbox else "minIsolation"
        component["sandbox"] = {**sandbox, key: _higher(sandbox.get(key), floor)}
        return
    params = component.get("params")
    if params is None:
        params = {}
    if isinstance(params, dict):
        component["params"] = {**params, "min_isolation": _higher(params.get("min_isolation"), floor)}


def _higher(asked: Any, floor: str) -> Any:
    if asked is None:
        return floor
    if asked not in ISOLATION_ORDER:
        return asked  # not a rung: the params validation names it
    return asked if isolation_level(asked) > isolation_level(floor) else floor
