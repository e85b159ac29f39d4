"""`Reward`: a RewardSpec bound to its evaluators, scoring batches of rollouts into totals with breakdowns."""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalsi.engine import ComponentJob, LookedUp, Pools, ScoreCache, look_up_components, score_components
from evalsi.errors import SpecError, UnknownEvaluatorError
from evalsi.evaluators import Evaluator, Params, Score, get_evaluator, resolve_spec_paths
from evalsi.records import Record, from_rollout
from evalsi.rewards._batch import rows, totals, trl_batch
from evalsi.rewards._compose import ComponentRule, RewardResult, compose_batch
from evalsi.specs import API_VERSION, ComponentSpec, Resource, RewardSpec, RewardSpecBody, load_resources
from evalsi.specs._resource import describe_pydantic_error, document_from_mapping, parse_resources, select_resource


class OwnCache(enum.Enum):
    """The default of ``cache=``: the reward's own score cache."""

    OWN = "own"


OWN_CACHE = OwnCache.OWN
_INLINE = Pools()


@dataclass(frozen=True)
class BoundComponent:
    """A component with its evaluator resolved and its params validated."""

    spec: ComponentSpec
    evaluator: Evaluator[Any]
    params: Params
    rule: ComponentRule

    @property
    def name(self) -> str:
        """The component's name in breakdowns."""
        return self.rule.name

    @property
    def job(self) -> ComponentJob:
        """The engine's view of this component."""
        return ComponentJob(self.rule.name, self.evaluator, self.params)


class Reward:
    """A RewardSpec ready to score: ``reward.score(rollouts)`` returns one :class:`RewardResult` per rollout.

    Rollouts are mappings (see :func:`evalsi.records.from_rollout`). Scores are cached by content when the spec's
    ``cache.enabled`` is true (the default), so rollouts repeated across or within batches cost no evaluator call.
    """

    def __init__(self, spec: RewardSpec, components: Sequence[BoundComponent]) -> None:
        """Hold a spec and its components bound to evaluators (made by :func:`bind`).

        Args:
            spec: The parsed RewardSpec.
            components: Its components, in spec order.

        """
        self.spec = spec
        self.components = list(components)
        self.name = spec.name
        # TRL names a reward function after ``__name__``; the total is logged as rewards/<spec name>/mean.
        self.__name__ = spec.name
        body = spec.spec
        self.cache: ScoreCache | None = ScoreCache(body.cache.max_entries) if body.cache.enabled else None
        self._rules = [c.rule for c in self.components]
        self._component_names = [c.name for c in self.components]
        self._jobs = [c.job for c in self.components]
        self._executor: ThreadPoolExecutor | None = None
        self._own_pools = _INLINE
        self._executor_lock = threading.Lock()

    @property
    def component_names(self) -> list[str]:
        """Component names in spec order (worked out once; read it, do not change it)."""
        return self._component_names

    @property
    def runs_code(self) -> bool:
        """Whether any component runs model-written code (needs the sandbox)."""
        return any(c.evaluator.runs_code for c in self.components)

    def records(self, rollouts: Iterable[Mapping[str, Any]]) -> list[Record]:
        """Normalise rollouts with this spec's ``referenceField``.

        Args:
            rollouts: Rollout mappings.

        """
        field = self.spec.spec.reference_field
        return [from_rollout(r, reference_field=field, index=i) for i, r in enumerate(rollouts)]

    def score(self, rollouts: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """Score a batch of rollouts; the batch completes or fails whole.

        Args:
            rollouts: Rollout mappings (``prompt``, ``completion``, a reference...).

        Raises:
            DataError: A rollout is malformed (names its index).
            RewardBatchError: A component errored under ``onError: raise``.

        """
        return self.score_records(self.records(rollouts))

    @property
    def rules(self) -> list[ComponentRule]:
        """The composition rule of each component, in spec order (read it, do not change it)."""
        return self._rules

    server: str | None = None
    """A Reward scores in this process (a :class:`~evalsi.rewards.RemoteReward` names its server here)."""

    @property
    def source(self) -> str | None:
        """The spec file this reward was loaded from, if any."""
        return self.spec.source

    def to_resource(self) -> dict[str, Any]:
        """The RewardSpec as a whole resource mapping, from which it can be bound again (pickling, servers)."""
        body = self.spec.spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        return {"apiVersion": API_VERSION, "kind": "RewardSpec", "metadata": {"name": self.name}, "spec": body}

    def score_records(
        self,
        records: Sequence[Record],
        *,
        cache: ScoreCache | OwnCache | None = OWN_CACHE,
        pools: Pools | None = None,
        cancelled: threading.Event | None = None,
    ) -> list[RewardResult]:
        """Score already normalised records (the arguments are those of :meth:`component_scores`).

        Each result carries its rollout's scoring time (``latency_ms``): what its components took, summed.

        Args:
            records: Normalised records (:meth:`records`).
            cache: Where component scores are looked up and stored; this reward's own cache unless given.
            pools: Where components run; by default this reward's component threads.
            cancelled: Once set, components not started yet are dropped.

        """
        seconds: list[list[float]] = []
        columns = self.component_scores(records, cache=cache, pools=pools, cancelled=cancelled, seconds=seconds)
        results = self.compose(columns)
        return [
            replace(result, latency_ms=1000.0 * sum(column[i] for column in seconds))
            for i, result in enumerate(results)
        ]

    def component_scores(
        self,
        records: Sequence[Record],
        *,
        cache: ScoreCache | OwnCache | None = OWN_CACHE,
        pools: Pools | None = None,
        cancelled: threading.Event | None = None,
        seconds: list[list[float]] | None = None,
    ) -> list[list[Score]]:
        """Raw scores indexed ``[component][record]``, before composition: the one scoring path of every entry point.

        Args:
            records: The batch, normalised.
            cache: Where component scores are looked up and stored; this reward's own cache unless given (the
                server passes its shared cache).
            pools: Where components run (see :class:`evalsi.engine.Pools`); by default this reward's component
                threads, when it has more than one component.
            cancelled: Once set, components not started yet are dropped
                (:class:`evalsi.engine.ScoringCancelled`).
            seconds: When given, receives the seconds each component spent on each record, indexed as the scores.

        """
        chosen = self.cache if isinstance(cache, OwnCache) else cache
        return score_components(self._jobs, records, chosen, pools or self._pools(), cancelled, seconds)

    def look_up(
        self,
        records: Sequence[Record],
        *,
        cache: ScoreCache | None,
        timed: bool = False,
        keys: Sequence[Sequence[bytes]] | None = None,
    ) -> LookedUp:
        """The cache look-ups of :meth:`component_scores` alone: no evaluator is called.

        Finish with :func:`evalsi.engine.finish_components`; ``timed`` measures each component's look-up (metrics).

        Args:
            records: The batch, normalised.
            cache: Where scores are looked up; None finds none.
            timed: Whether to time each component's look-up.
            keys: The records' content keys by component (in spec order), then record, when computed already
                (a reward pool's coordinator keys every rollout; its actor does not key them again).

        """
        return look_up_components(self._jobs, records, cache, timed=timed, keys=keys)

    def compose(self, columns: Sequence[Sequence[Score]]) -> list[RewardResult]:
        """Totals and breakdowns from scores indexed ``[component][record]``, by this spec's rules.

        Args:
            columns: Scores indexed ``[component][record]``.

        Raises:
            RewardBatchError: A component errored under ``onError: raise`` (names the rollout and component).

        """
        body = self.spec.spec
        return compose_batch(self._rules, columns, body.floor, body.clip)

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        """A TRL reward function: the total of each completion (None where the spec gives none)."""
        return totals(self.score(rows(trl_batch(prompts, completions, kwargs))))

    async def score_async(self, rollouts: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """``score`` on a worker thread, so an event loop keeps serving while a batch is scored.

        Args:
            rollouts: Rollout mappings.

        """
        batch = list(rollouts)
        return await asyncio.to_thread(self.score, batch)

    def _pools(self) -> Pools:
        if len(self._jobs) < 2:
            return _INLINE
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=min(8, len(self._jobs) - 1), thread_name_prefix=f"evalsi-{self.name}"
                )
                self._own_pools = Pools(components=self._executor)
            return self._own_pools

    def close(self) -> None:
        """Stop this reward's component threads (evaluator pools are shared and closed separately)."""
        with self._executor_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None

    def __repr__(self) -> str:
        return f"Reward({self.name!r}, components={self.component_names})"


def load(path: str | Path, name: str | None = None) -> Reward:
    """Load the RewardSpec in a YAML file (``name`` picks one when the file holds several) and bind it.

    Args:
        path: The YAML file.
        name: Which RewardSpec when the file holds several.

    Raises:
        SpecError: The file, a field, a ``ref`` or a param is invalid; the message names file, line and field.

    """
    resources = load_resources(path)
    return bind(select_resource(resources, "RewardSpec", name, str(path)), Path(path).absolute().parent)


def from_mapping(data: Mapping[str, Any], source: str | None = None) -> Reward:
    """Bind a RewardSpec given as a mapping: a whole resource (``apiVersion``, ``kind``...) or just its ``spec``.

    Args:
        data: A RewardSpec resource or its ``spec``.
        source: A name for the mapping in error messages.

    """
    raw = dict(data)
    if "apiVersion" not in raw:
        raw = {"apiVersion": API_VERSION, "kind": "RewardSpec", "metadata": {"name": "reward"}, "spec": raw}
    resources = parse_resources([document_from_mapping(raw, source)])
    return bind(select_resource(resources, "RewardSpec", None, source))


def bind(resource: Resource, base_dir: Path | None = None) -> Reward:
    """Validate a RewardSpec resource and resolve its components to evaluators with validated params.

    ``base_dir`` is the spec file's folder: params naming a file are relative to it (None: to the working directory).

    Args:
        resource: A RewardSpec resource.
        base_dir: The folder relative paths in params resolve against; None leaves them as written.

    """
    try:
        body = RewardSpecBody.model_validate(resource.spec)
    except ValidationError as exc:
        raise resource.validation_error(exc) from None
    spec = RewardSpec(name=resource.name, spec=body, source=resource.document.file)
    seen: dict[str, int] = {}
    bound: list[BoundComponent] = []
    for index, component in enumerate(body.components):
        where = ("spec", "components", index)
        name = component.display_name
        if name in seen:
            raise resource.error(
                f"components[{seen[name]}] is already named {name!r}; give this component a distinct `name`",
                (*where, "name" if component.name else "ref"),
            )
        seen[name] = index
        bound.append(bind_component(resource, component, body, where, base_dir))
    return Reward(spec, bound)


def bind_component(
    resource: Resource,
    component: ComponentSpec,
    body: RewardSpecBody,
    where: tuple[str | int, ...],
    base_dir: Path | None = None,
) -> BoundComponent:
    """Resolve one component's evaluator and validate its params; errors point at ``where`` in the resource.

    Params naming a file (marked ``SPEC_PATH``) are made absolute against ``base_dir``, the spec file's folder.

    Args:
        resource: The RewardSpec resource, for error locations.
        component: The component to bind.
        body: The spec body, for spec-wide defaults.
        where: The component's path in the resource.
        base_dir: The folder relative paths in params resolve against.

    """
    name, slash, argument = component.ref.partition("/")
    try:
        evaluator = get_evaluator(name)
    except UnknownEvaluatorError as exc:
        raise resource.error(str(exc), (*where, "ref")) from None
    raw_params = resolve_spec_paths(evaluator.params_model, component.params, base_dir)
    if slash:
        if evaluator.ref_argument is None or not argument:
            raise resource.error(f"{name!r} takes no argument after '/' in its ref; write ref: {name}", (*where, "ref"))
        raw_params[evaluator.ref_argument] = argument
    fields = evaluator.params_model.model_fields
    if component.sandbox is not None:
        if not evaluator.runs_code:
            raise resource.error(
                f"{component.ref!r} does not run code, so `sandbox` does not apply; remove it", (*where, "sandbox")
            )
        raw_params["min_isolation"] = component.sandbox.min_isolation
    if component.judge is not None:
        if "judge" not in fields:
            raise resource.error(f"{component.ref!r} takes no judge; remove `judge`", (*where, "judge"))
        raw_params["judge"] = component.judge
    try:
        params = evaluator.parse_params(raw_params)
    except ValidationError as exc:
        raise _params_error(resource, exc, evaluator, (*where, "params"), component.judge is not None) from None
    on_error = component.on_error or body.on_error
    rule = ComponentRule(component.display_name, component.weight, component.gate, component.threshold, on_error)
    return BoundComponent(component, evaluator, params, rule)


def _params_error(
    resource: Resource,
    exc: ValidationError,
    evaluator: Evaluator[Any],
    where: tuple[str | int, ...],
    judge_on_component: bool,
) -> SpecError:
    """The first params error, pointed at what the user wrote.

    ``sandbox.minIsolation`` and a component-level ``judge`` are injected into the params, so their errors
    point back at those fields.
    """
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    if loc and loc[0] == "min_isolation":
        where, loc = (*where[:-1], "sandbox", "minIsolation"), loc[1:]
    elif loc and loc[0] == "judge" and judge_on_component:
        where, loc = (*where[:-1], "judge"), loc[1:]
    message = describe_pydantic_error(error)
    if error["type"] == "extra_forbidden":
        valid = ", ".join(sorted(evaluator.params_model.model_fields)) or "none"
        message = f"unknown param for {evaluator.name!r} (valid params: {valid})"
    return resource.error(message, (*where, *loc))
