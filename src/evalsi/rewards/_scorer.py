"""Scorers: what the adapters score batches with, from a spec file, a mapping or a ``Reward`` (and ``server=``).

It also keeps the once-per-process scorers of the file-loaded adapters (verl, OpenRLHF).

verl and OpenRLHF load the adapter module from its file path, sometimes more than once; the process-wide
scorers live here, in a normally imported module, so every copy shares one loaded spec and its score cache.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalsi.errors import SpecError
from evalsi.rewards._compose import ComponentRule
from evalsi.rewards._remote import RemoteReward
from evalsi.rewards._reward import Reward, from_mapping, load
from evalsi.specs import API_VERSION

Scorer = Reward | RemoteReward
"""Anything with ``name``, ``component_names`` and ``score(rollouts) -> list[RewardResult]``."""

SpecSource = str | Path | Reward | Mapping[str, Any]
"""A RewardSpec file, a mapping (whole resource or just its ``spec``), or a loaded ``Reward``."""

_shared: dict[tuple[str, str | None], Scorer] = {}
_shared_lock = threading.Lock()
_checked: set[tuple[int, str]] = set()
_ready: dict[tuple[str, str | None, str], Scorer] = {}


def open_scorer(spec: SpecSource, server: str | None = None) -> Scorer:
    """A scorer for ``spec``: in-process, or through the Reward Service at ``server``.

    Raises:
        SpecError: The spec is invalid (names file, line and field).

    """
    if isinstance(spec, Reward):
        return spec if server is None else RemoteReward.from_spec(spec.name, spec.spec.spec, server)
    if isinstance(spec, Mapping):
        return from_mapping(spec) if server is None else RemoteReward.from_mapping(spec, server)
    if server is None:
        return load(spec)
    return RemoteReward.from_file(spec, server)


def shared_scorer(spec: str | Path, server: str | None = None, *, total_required_by: str | None = None) -> Scorer:
    """The process's one scorer for this spec file and server, loaded on first use.

    Args:
        spec: The RewardSpec file.
        server: The Reward Service URL, or None to score in-process.
        total_required_by: A trainer that cannot skip a rollout: the spec is checked with
            :func:`require_totals` once, when first used for it.

    """
    key = (str(spec), server or None)
    scorer = _shared.get(key)  # the per-call path: one dict look-up, no file system access
    if scorer is None:
        with _shared_lock:
            resolved = (str(Path(spec).expanduser().resolve()), server or None)
            scorer = _shared.get(resolved)
            if scorer is None:
                scorer = open_scorer(Path(resolved[0]), resolved[1])
                _shared[resolved] = scorer
            _shared[key] = scorer
    if total_required_by is not None and (id(scorer), total_required_by) not in _checked:
        require_totals(scorer, total_required_by)
        _checked.add((id(scorer), total_required_by))
    return scorer


def checked_scorer(spec: str, server: str | None, trainer: str) -> Scorer:
    """:func:`shared_scorer` for a trainer that needs a total for every rollout, memoised after the check.

    After the first call for a (spec, server, trainer), it is one dict look-up: OpenRLHF calls once per sample.
    """
    key = (spec, server, trainer)
    scorer = _ready.get(key)
    if scorer is None:
        scorer = _ready[key] = shared_scorer(spec, server, total_required_by=trainer)
    return scorer


def clear_shared() -> None:
    """Forget the process's shared scorers (tests; a long-lived process that reloads specs)."""
    with _shared_lock:
        scorers = {id(s): s for s in _shared.values()}.values()
        _shared.clear()
        _checked.clear()
        _ready.clear()
    for scorer in scorers:
        scorer.close()


def resource_of(scorer: Scorer) -> dict[str, Any]:
    """The scorer's RewardSpec as a whole resource mapping, from which ``open_scorer`` rebuilds it."""
    if isinstance(scorer, RemoteReward):
        return dict(scorer.resource)
    body = scorer.spec.spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return {"apiVersion": API_VERSION, "kind": "RewardSpec", "metadata": {"name": scorer.name}, "spec": body}


def server_of(scorer: Scorer) -> str | None:
    """The Reward Service a scorer calls, None for in-process scoring."""
    return scorer.server if isinstance(scorer, RemoteReward) else None


def rules_of(scorer: Scorer) -> list[ComponentRule]:
    """The composition rule of each component, in spec order."""
    return list(scorer.rules)


def require_totals(scorer: Scorer, trainer: str) -> None:
    """Refuse a spec that can leave a rollout without a total, for trainers that cannot skip one.

    verl and OpenRLHF would train on NaN, which silently poisons a whole group's advantages; refusing at
    start-up says so before any step runs.

    Raises:
        SpecError: A component has ``onError: none``.

    """
    for rule in rules_of(scorer):
        if rule.on_error == "none":
            source = scorer.spec.source if isinstance(scorer, Reward) else None
            raise SpecError(
                f"component {rule.name!r} has onError: none, which leaves a rollout without a reward, and "
                f"{trainer} cannot skip one; use onError: zero or raise (TRL takes none: it maps to NaN)",
                file=source,
            )
