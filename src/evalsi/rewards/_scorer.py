"""Scorers: what the adapters score batches with, from a spec file, a mapping or a ``Reward`` (and ``server=``).

It also keeps the once-per-process scorers of the file-loaded adapters (verl, OpenRLHF).

verl and OpenRLHF load the adapter module from its file path, sometimes more than once; the process-wide
scorers live here, in a normally imported module, so every copy shares one loaded spec and its score cache.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evalsi.errors import SpecError
from evalsi.rewards._compose import ComponentRule, RewardResult
from evalsi.rewards._reward import Reward, from_mapping, load

if TYPE_CHECKING:
    from evalsi.rewards._remote import RemoteReward


class Components(Protocol):
    """What an adapter reads of whatever scored a batch to answer its trainer: the components, in spec order.

    A :class:`Scorer` and a Ray reward pool both offer it.
    """

    @property
    def component_names(self) -> list[str]:
        """Component names in spec order."""
        ...

    @property
    def rules(self) -> list[ComponentRule]:
        """The composition rule of each component, in spec order."""
        ...


class Scorer(Components, Protocol):
    """What the adapters score with: a :class:`Reward` in this process, or a :class:`RemoteReward` on a server."""

    @property
    def name(self) -> str:
        """The RewardSpec's name (TRL logs the total under it)."""
        ...

    @property
    def server(self) -> str | None:
        """The Reward Service it calls; None for in-process scoring."""
        ...

    @property
    def source(self) -> str | None:
        """The spec file it was loaded from, if any."""
        ...

    def score(self, rollouts: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """One result per rollout; the batch completes or fails whole."""
        ...

    def to_resource(self) -> dict[str, Any]:
        """The RewardSpec as a whole resource mapping, from which ``open_scorer`` rebuilds it."""
        ...

    def close(self) -> None:
        """Release threads and connections."""
        ...


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
    if server is not None:
        return _remote_scorer(spec, server)
    if isinstance(spec, Reward):
        return spec
    if isinstance(spec, Mapping):
        return from_mapping(spec)
    return load(spec)


def _remote_scorer(spec: SpecSource, server: str) -> RemoteReward:
    """The Reward Service client for ``spec`` (its HTTP client, httpx, is imported only here)."""
    from evalsi.rewards._remote import RemoteReward

    if isinstance(spec, Reward):
        return RemoteReward.from_spec(spec.name, spec.spec.spec, server)
    if isinstance(spec, Mapping):
        return RemoteReward.from_mapping(spec, server)
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
    return scorer.to_resource()


def server_of(scorer: Scorer) -> str | None:
    """The Reward Service a scorer calls, None for in-process scoring."""
    return scorer.server


def require_totals(scorer: Scorer, trainer: str) -> None:
    """Refuse a spec that can leave a rollout without a total, for trainers that cannot skip one.

    verl and OpenRLHF would train on NaN, which silently poisons a whole group's advantages; refusing at
    start-up says so before any step runs.

    Raises:
        SpecError: A component has ``onError: none``.

    """
    for rule in scorer.rules:
        if rule.on_error == "none":
            source = scorer.source
            raise SpecError(
                f"component {rule.name!r} has onError: none, which leaves a rollout without a reward, and "
                f"{trainer} cannot skip one; use onError: zero or raise (TRL takes none: it maps to NaN)",
                file=source,
            )
