"""The operator's caps on upstream waits: a spec's reward-model or judge ``timeout`` and ``retries`` are clamped.

A request may ask for less than the cap, never more: a tenant pointing a component at a slow or never-answering
upstream holds a worker for at most ``(retries + 1) × timeout`` plus the backoff between attempts, whatever the
spec says. Clamping (rather than refusing) keeps specs written for in-process use working on a server; the
cache key of a clamped component is that of the values really used.

An upstream config is any params model (or nested model, such as a judge's) with both a ``timeout`` and a
``retries`` field: the reward-model params and the judge config. A code component's sandbox limits (``timeout``,
``memory_mb``, ``max_processes``, ``max_output_kb``) are clamped the same way to ``sandbox.max_*``: a tenant cannot
size a test case to exhaust the machine. An upstream config's ``max_concurrency`` is clamped to
``rewards.upstream_concurrency``, and the ``timeout`` of a component that neither calls an upstream nor runs code
(math-equiv's per-record check) to ``rewards.record_timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from evalsi.rewards import Reward


@dataclass(frozen=True)
class Caps:
    """The operator's ceilings a request's components are clamped to."""

    timeout: float
    retries: int
    concurrency: int = 32
    record_timeout: float = 10.0
    code_limits: Mapping[str, float] = field(default_factory=dict)


def capped(reward: Reward, caps: Caps) -> Reward:
    """``reward`` with its upstream waits and its code components' sandbox limits within the operator's caps.

    Every upstream config's ``timeout``, ``retries`` and ``backoff`` are clamped to ``caps.timeout`` and
    ``caps.retries`` and its ``max_concurrency`` to ``caps.concurrency``; each code component's params named in
    ``caps.code_limits`` (param name -> ceiling) to their ceilings; any other component's own ``timeout`` to
    ``caps.record_timeout``.
    """
    components = []
    changed = False
    for component in reward.components:
        params = _cap(component.params, caps)
        if component.evaluator.runs_code:
            params = _ceilings(params, caps.code_limits)
        elif not _is_upstream(params):
            params = _ceilings(params, {"timeout": caps.record_timeout})
        changed = changed or params is not component.params
        components.append(replace(component, params=params) if params is not component.params else component)
    if not changed:
        return reward
    reward.close()
    return Reward(reward.spec, components)


def _ceilings(model: Any, limits: Mapping[str, float]) -> Any:
    """``model`` with each field named in ``limits`` at most its ceiling (the same object when nothing changes)."""
    fields = type(model).model_fields
    update: dict[str, Any] = {}
    for name, ceiling in limits.items():
        value = getattr(model, name, None) if name in fields else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > ceiling:
            update[name] = type(value)(ceiling)
    return model.model_copy(update=update) if update else model


def _is_upstream(model: Any) -> bool:
    """Whether a params model is (or holds) an upstream config: one with both ``timeout`` and ``retries``."""
    if not isinstance(model, BaseModel):
        return False
    fields = type(model).model_fields
    return ("timeout" in fields and "retries" in fields) or any(_is_upstream(getattr(model, n)) for n in fields)


def _cap(model: Any, caps: Caps) -> Any:
    """``model`` with its own and its nested upstream configs clamped (the same object when nothing changes)."""
    if not isinstance(model, BaseModel):
        return model
    timeout, retries = caps.timeout, caps.retries
    fields = type(model).model_fields
    update: dict[str, Any] = {}
    if "timeout" in fields and "retries" in fields:
        concurrency = getattr(model, "max_concurrency", None)
        if isinstance(concurrency, int) and concurrency > caps.concurrency:
            update["max_concurrency"] = caps.concurrency
        wait, tries = getattr(model, "timeout", None), getattr(model, "retries", None)
        if isinstance(wait, int | float) and wait > timeout:
            update["timeout"] = timeout
        if isinstance(tries, int) and tries > retries:
            update["retries"] = retries
        backoff = getattr(model, "backoff", None)
        if "backoff" in fields and isinstance(backoff, int | float) and backoff > timeout:
            update["backoff"] = timeout
    for name in fields:
        value = getattr(model, name)
        nested = _cap(value, caps)
        if nested is not value:
            update[name] = nested
    return model.model_copy(update=update) if update else model
