"""The Reward Service, once for every protocol: authorise, bind the spec (memoised), admit, score, compose.

HTTP JSON, Connect and gRPC all call :meth:`RewardService.score`; they only translate bytes in and out. Scoring
runs on the library's worker path (:func:`evalsi.engine.score_component`, :func:`evalsi.rewards.compose_batch`)
off the event loop: a call runs on the ``cpu`` pool, its further components in parallel on the component pool, and
its code components on the ``sandbox`` pool, so code never runs on the cpu pool and a slow sandbox does not hold up
math components.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from evalsi.engine import ComponentJob, ScoreCache, score_component
from evalsi.evaluators import Score
from evalsi.records import canonical_json
from evalsi.rewards import Reward, RewardResult, compose_batch, from_mapping
from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError, from_exception, redact
from evalsi.server._limits import Admission
from evalsi.server._metrics import Metrics
from evalsi.server._shared_cache import ProjectCache, SharedScores, TieredCache
from evalsi.server._tokens import RUN, RUNS_CODE, Principal, TokenStore
from evalsi.server._trust import check_depth, check_rollouts_depth, server_spec

log = logging.getLogger("evalsi.server")
_BOUND_SPECS = 256  # distinct specs kept bound; a trainer uses one or a few


class RewardService:
    """The shared service layer behind every protocol."""

    def __init__(self, config: ServerConfig, tokens: TokenStore, shared: SharedScores | None, metrics: Metrics):
        rewards = config.spec.rewards
        self.config = config
        self.tokens = tokens
        self.metrics = metrics
        self.cache = TieredCache(rewards.cache_size, shared, metrics.on_lookup)
        self.cpu_pool = ThreadPoolExecutor(rewards.cpu_workers, thread_name_prefix="evalsi-cpu")
        self.component_pool = ThreadPoolExecutor(rewards.cpu_workers, thread_name_prefix="evalsi-component")
        self.sandbox_pool = ThreadPoolExecutor(rewards.sandbox_workers, thread_name_prefix="evalsi-sandbox")
        quotas = {name: q.max_reward_rollouts for name, q in config.spec.quotas.items()}
        self._admission: Admission | None = None
        self._quotas = quotas
        self._bound: OrderedDict[bytes, Reward] = OrderedDict()
        self._bound_lock = threading.Lock()
        self._project_caches: dict[str, ProjectCache] = {}
        self.draining = False
        """Set on SIGTERM: new calls are refused (``unavailable``) while those in flight finish."""

    @property
    def admission(self) -> Admission:
        """The admission gates (made on first use, inside the serving event loop)."""
        if self._admission is None:
            rewards = self.config.spec.rewards
            self._admission = Admission(rewards.max_inflight, self._quotas, self.metrics.on_gauge)
        return self._admission

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer <token>`` value (a known token costs no query).

        Raises:
            ServiceError: ``unauthenticated`` when the header is missing, malformed or names no valid token;
                ``unavailable`` when the token database cannot be read.

        """
        if not authorization:
            raise ServiceError("unauthenticated", "missing token: send `Authorization: Bearer <token>` "
                               "(create one with `evalsi server token create`)")
        scheme, _, secret = authorization.strip().partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            raise ServiceError("unauthenticated", "malformed Authorization header: expected `Bearer <token>`")
        known, principal = self.tokens.memoized(secret)
        if not known:
            try:  # a database round trip: off the event loop
                principal = await asyncio.to_thread(self.tokens.verify, secret)
            except SQLAlchemyError as exc:
                log.error("token look-up failed: %s", exc)
                raise ServiceError("unavailable", "the token database is unavailable; retry later") from None
        if principal is None:
            raise ServiceError("unauthenticated", "unknown or revoked token")
        return principal

    async def score(
        self, principal: Principal, spec: Mapping[str, Any], rollouts: Sequence[Mapping[str, Any]]
    ) -> list[RewardResult]:
        """Score ``rollouts`` with ``spec`` for ``principal``; waits while the server or project is at capacity.

        Raises:
            ServiceError: Refused (permissions, limits, bad spec or rollout) or failed (``onError: raise``).

        """
        if self.draining:
            raise ServiceError("unavailable", "the server is shutting down; retry (another replica will answer)")
        require(principal, RUN)
        limit = self.config.spec.rewards.max_rollouts
        if len(rollouts) > limit:
            raise ServiceError(
                "invalid_argument",
                f"{len(rollouts)} rollouts in one call exceed rewards.max_rollouts={limit}; split the batch",
                "too_many_rollouts", limit=limit,
            )
        check_depth(spec, "spec")
        reward = await self._bound_reward(spec)
        if reward.runs_code:
            require(principal, RUNS_CODE, "the spec has a code component")
        if not rollouts:
            return []
        async with self.admission.hold(principal.project, len(rollouts)):
            work = asyncio.wrap_future(self.cpu_pool.submit(self._score_sync, reward, rollouts, principal.project))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                self.metrics.cancelled.inc()
                # The caller went away, but the batch runs to its end on its thread: it keeps its capacity until
                # then, so back-pressure still counts the work that is really running.
                while not work.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait([work])
                raise
            except ServiceError:
                raise
            except Exception as exc:
                if isinstance(exc, RecursionError | TypeError):
                    # rollouts are checked only here, where depth broke something: a walk per call costs every call
                    check_rollouts_depth(rollouts)
                raise from_exception(exc) from None

    async def _bound_reward(self, spec: Mapping[str, Any]) -> Reward:
        key = canonical_json(spec)
        with self._bound_lock:
            reward = self._bound.get(key)
            if reward is not None:
                self._bound.move_to_end(key)
                return reward
        try:  # binding may import an evaluator's pack or start its pool: off the event loop
            reward = await asyncio.wrap_future(self.cpu_pool.submit(self._bind, spec))
        except ServiceError:
            raise
        except Exception as exc:
            raise from_exception(exc) from None
        with self._bound_lock:
            self._bound[key] = reward
            while len(self._bound) > _BOUND_SPECS:
                self._bound.popitem(last=False)[1].close()
        return reward

    def _bind(self, spec: Mapping[str, Any]) -> Reward:
        if not isinstance(spec, Mapping) or not spec:
            raise ServiceError("invalid_argument", "`spec` must be a RewardSpec mapping", "invalid_spec", path="spec")
        return from_mapping(server_spec(spec, self.config.spec), source="request")

    def _cache_for(self, project: str) -> ScoreCache:
        """The cache a project's calls use: its own view, unless the operator shares scores server-wide."""
        if self.config.spec.rewards.shared_cache_scope == "server":
            return self.cache
        cache = self._project_caches.get(project)
        if cache is None:
            cache = self._project_caches[project] = ProjectCache(self.cache, project)
        return cache

    def _score_sync(self, reward: Reward, rollouts: Sequence[Mapping[str, Any]], project: str) -> list[RewardResult]:
        records = reward.records(rollouts)
        cache: ScoreCache | None = self._cache_for(project) if reward.spec.spec.cache.enabled else None
        components = reward.components
        # Code components go to the sandbox pool; other components after the first go to the component pool; the
        # first runs here. So a slow component does not hold up the others, and no pool ever waits on itself
        # (calls wait on components, components wait on nothing), which rules out pool deadlocks.
        first_cpu = next((i for i, c in enumerate(components) if not c.evaluator.runs_code), None)
        pending: dict[int, Future[list[Score]]] = {}
        for i, c in enumerate(components):
            if i != first_cpu:
                pool = self.sandbox_pool if c.evaluator.runs_code else self.component_pool
                pending[i] = pool.submit(self._run_component, c.job, records, cache)
        columns: list[list[Score]] = [[] for _ in components]
        if first_cpu is not None:
            columns[first_cpu] = self._run_component(components[first_cpu].job, records, cache)
        for i, future in pending.items():
            columns[i] = future.result()
        body = reward.spec.spec
        try:
            results = compose_batch([c.rule for c in components], columns, body.floor, body.clip)
        except Exception:
            self.metrics.rollouts.labels(project, "failed").inc(len(records))
            raise
        for status in ("ok", "gated", "no_total"):
            count = sum(1 for r in results if r.status == status)
            if count:
                self.metrics.rollouts.labels(project, status).inc(count)
        return results

    def _run_component(self, job: ComponentJob, records: Sequence[Any], cache: ScoreCache | None) -> list[Score]:
        started = time.perf_counter()
        scores = score_component(job, records, cache)
        self.metrics.component_seconds.labels(job.evaluator.name).observe(time.perf_counter() - started)
        errors = sum(1 for s in scores if s.status == "error")
        if errors:
            self.metrics.component_errors.labels(job.evaluator.name).inc(errors)
            # reasons go to a tenant: no host paths or exception class names of the server's own failures
            scores = [Score(s.value, s.status, redact(s.reason), s.details) if s.status == "error" else s
                      for s in scores]
        return scores

    def close(self) -> None:
        """Stop the pools and close bound rewards."""
        self.cpu_pool.shutdown(wait=False, cancel_futures=True)
        self.component_pool.shutdown(wait=False, cancel_futures=True)
        self.sandbox_pool.shutdown(wait=False, cancel_futures=True)
        with self._bound_lock:
            for reward in self._bound.values():
                reward.close()
            self._bound.clear()


def require(principal: Principal, permission: str, why: str = "") -> None:
    """Refuse with ``permission_denied`` naming the permission the token lacks."""
    if not principal.allows(permission):
        reason = f" ({why})" if why else ""
        raise ServiceError(
            "permission_denied",
            f"the token for project {principal.project!r} lacks the {permission} permission{reason}",
            permission=permission,
        )

