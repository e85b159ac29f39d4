"""The operator's caps on upstream waits: a spec's reward-model or judge ``timeout`` and ``retries`` are clamped.

A request may ask for less than the cap, never more: a tenant pointing a component at a slow or never-answering
upstream holds a worker for at most ``(retries + 1) × timeout`` plus the backoff between attempts, whatever the
spec says. Clamping (rather than refusing) keeps specs written for in-process use working on a server; the
cache key of a clamped component is that of the values really used.

An upstream config is any params model (or nested model, such as a judge's) with both a ``timeout`` and a
``retries`` field: the reward-model params and the judge config. A code component's sandbox limits (``timeout``,
``memory_mb``, ``max_processes``, ``max_output_kb``) are clamped the same way to ``sandbox.max_*``: a tenant cannot
size a test case to exhaust the machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from evalsi.rewards import Reward


def capped(reward: Reward, timeout: float, retries: int, code_limits: Mapping[str, float] | None = None) -> Reward:
    """``reward`` with its upstream waits and its code components' sandbox limits within the operator's caps.

    Every upstream config's ``timeout``, ``retries`` and ``backoff`` are clamped to ``timeout`` and ``retries``; each
    code component's params named in ``code_limits`` (param name -> ceiling) to their ceilings.
    """
    components = []
    changed = False
    for component in reward.components:
        params = _cap(component.params, timeout, retries)
        if code_limits and component.evaluator.runs_code:
            params = _ceilings(params, code_limits)
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


def _cap(model: Any, timeout: float, retries: int) -> Any:
    """``model`` with its own and its nested upstream configs clamped (the same object when nothing changes)."""
    if not isinstance(model, BaseModel):
        return model
    fields = type(model).model_fields
    update: dict[str, Any] = {}
    if "timeout" in fields and "retries" in fields:
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
        nested = _cap(value, timeout, retries)
        if nested is not value:
            update[name] = nested
    return model.model_copy(update=update) if update else model
