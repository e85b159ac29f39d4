"""The Reward Service, once for every protocol: authorise, bind the spec (memoised), admit, score, compose.

HTTP JSON, Connect and gRPC all call :meth:`RewardService.score`; they only translate bytes in and out. Scoring
runs on the library's one path (:meth:`evalsi.rewards.Reward.score_records`) off the event loop, with the server's
pool strategy: a call runs on the ``cpu`` pool, its further components in parallel on the component pool, and its
code components on the ``sandbox`` pool, so code never runs on the cpu pool and a slow sandbox does not hold up
math components. Each project runs within its share of every pool (``rewards.project_share``), and a spec's
upstream ``timeout`` and ``retries`` are clamped to the operator's caps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from evalsi.engine import ComponentJob, LookedUp, Pools, ScoreCache, ScoringCancelled, finish_components
from evalsi.errors import RewardBatchError
from evalsi.evaluators import Score
from evalsi.records import Record, canonical_json
from evalsi.rewards import Reward, RewardResult, from_mapping
from evalsi.server._body_bytes import BodyBytes
from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError, from_exception, redact
from evalsi.server._fair import FairPool, share_of
from evalsi.server._limits import Admission, SharedGate
from evalsi.server._metrics import Metrics
from evalsi.server._token_store import TokenStore, TokenStoreUnavailable
from evalsi.server._tokens import RUNS_CODE, Principal
from evalsi.server._trust import check_depth, check_rollouts_depth, server_spec
from evalsi.server.rewards._caps import Caps, capped
from evalsi.server.rewards._probes import FirstUseProbes
from evalsi.server.rewards._records import records_of
from evalsi.server.rewards._score_store import SharedScores
from evalsi.server.rewards._shared_cache import ProjectCache, TieredCache
from evalsi.server.rewards._spec_cache import BoundSpecs
from evalsi.server.rewards._verdicts import Verdicts

log = logging.getLogger("evalsi.server")

INLINE_ROLLOUTS = 1024
"""Largest batch whose records and cache look-ups run on the event loop (a few milliseconds at most); a fully
cached one is answered there, with no thread hand-off. Larger batches are scored wholly on the cpu pool."""

VERDICT_ROWS = 16384
"""Rows of cached scores whose composed results (and JSON) are kept for reuse (see :mod:`._verdicts`): a warm
batch of ``max_rollouts``' default size, about 12 MiB for a one-component spec."""


class SpecResolver(Protocol):
    """Rewrites a request's spec for the caller's project before it is bound (see ``evaluation.evaluators._reward``)."""

    def applies(self, spec: Mapping[str, Any]) -> bool:
        """Whether ``spec`` needs :meth:`resolve` (cheap: no I/O)."""
        ...

    def resolve(self, spec: Mapping[str, Any], project: str) -> Mapping[str, Any]:
        """``spec`` resolved for ``project``; raises ``ServiceError`` naming a bad component."""
        ...


class RewardService:
    """The shared service layer behind every protocol.

    Args:
        config: The operator's server configuration: pools, limits, caches.
        tokens: Where callers' tokens are checked.
        shared: The score cache shared through the database; None for the in-memory cache only.
        metrics: Where calls, cache lookups and latencies are counted.

    """

    def __init__(self, config: ServerConfig, tokens: TokenStore, shared: SharedScores | None, metrics: Metrics):
        rewards = config.spec.rewards
        self.config = config
        self.tokens = tokens
        self.metrics = metrics
        self.cache = TieredCache(rewards.cache_size, shared, metrics.on_lookup)
        share = rewards.project_share
        self.cpu = FairPool(rewards.cpu_workers, share_of(rewards.cpu_workers, share), "evalsi-cpu")
        self.components = FairPool(rewards.cpu_workers, share_of(rewards.cpu_workers, share), "evalsi-component")
        self.sandboxes = FairPool(rewards.sandbox_workers, share_of(rewards.sandbox_workers, share), "evalsi-sandbox")
        quotas = {n: q.max_reward_rollouts for n, q in config.spec.quotas.items() if q.max_reward_rollouts is not None}
        self._admission: Admission | None = None
        self._quotas = quotas
        capacity = rewards.max_inflight_bytes
        self.body_bytes = BodyBytes(capacity, int(capacity * share), metrics)
        """Request bytes held at once, every protocol's (see :mod:`evalsi.server._body_bytes`)."""
        self.compared_bytes = SharedGate(capacity, int(capacity * share))
        """Stored bytes of the runs ``CompareRuns`` calls are reading, within the same bounds as request bytes."""
        self.bound = BoundSpecs(
            rewards.spec_cache_bytes, int(rewards.spec_cache_bytes * share), metrics.on_spec_cache_bytes
        )
        """Bound specs kept for reuse (see :mod:`evalsi.server.rewards._spec_cache`)."""
        self._project_caches: dict[str, ProjectCache] = {}
        self.draining = False
        """Set on SIGTERM: new calls are refused (``unavailable``) while those in flight finish."""
        self.resolver: SpecResolver | None = None
        """Fills in components that name the caller's server resources (``ref: evaluator/ID``) before binding."""
        self.probes = FirstUseProbes(self)
        """Probes each spec on a project's first use of it (``rewards.probe_on_first_use``)."""
        self.verdicts = Verdicts(min(VERDICT_ROWS, rewards.cache_size))
        """Results of fully cached rows, composed and encoded once (see :mod:`evalsi.server.rewards._verdicts`)."""

    @property
    def admission(self) -> Admission:
        """The admission gates (made on first use, inside the serving event loop)."""
        if self._admission is None:
            rewards = self.config.spec.rewards
            self._admission = Admission(rewards.max_inflight, self._quotas, self.metrics.on_gauge)
        return self._admission

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer <token>`` value (a known token costs no query).

        Args:
            authorization: The ``Authorization`` header's value, None when absent.

        Raises:
            ServiceError: ``unauthenticated`` when the header is missing, malformed or names no valid token;
                ``unavailable`` when the token database cannot be read.

        """
        if not authorization:
            raise ServiceError(
                "unauthenticated",
                "missing token: send `Authorization: Bearer <token>` (create one with `evalsi server token create`)",
            )
        scheme, _, secret = authorization.strip().partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            raise ServiceError("unauthenticated", "malformed Authorization header: expected `Bearer <token>`")
        known, principal = self.tokens.memoized(secret)
        if not known:
            try:  # a database round trip: off the event loop
                principal = await asyncio.to_thread(self.tokens.verify, secret)
            except TokenStoreUnavailable as exc:
                log.error("token look-up failed: %s", exc)
                raise ServiceError("unavailable", "the token database is unavailable; retry later") from None
        if principal is None:
            raise ServiceError("unauthenticated", "unknown or revoked token")
        return principal

    async def score(
        self, principal: Principal, spec: Mapping[str, Any], rollouts: Sequence[Mapping[str, Any]]
    ) -> list[RewardResult]:
        """Score ``rollouts`` with ``spec`` for ``principal``; waits while the server or project is at capacity.

        Cancelling the awaiting task (the caller went away) drops the call's work that has not started: the
        queued call itself, or its components not yet running. A component already running finishes on its
        thread, and the call keeps its capacity until then, so back-pressure counts the work really running.

        Args:
            principal: The caller, from :meth:`authenticate`.
            spec: The RewardSpec mapping sent by the caller (untrusted).
            rollouts: The rollout mappings to score (untrusted).

        Returns:
            One result per rollout, in order.

        Raises:
            ServiceError: Refused (permissions, limits, bad spec or rollout) or failed (``onError: raise``).

        """
        limit = self.config.spec.rewards.max_rollouts
        if len(rollouts) > limit:
            raise ServiceError(
                "invalid_argument",
                f"{len(rollouts)} rollouts in one call exceed rewards.max_rollouts={limit}; split the batch",
                "too_many_rollouts",
                limit=limit,
            )
        check_depth(spec, "spec")
        key = self._spec_key(spec)
        if self.resolver is not None and self.resolver.applies(spec):  # a database look-up: off the event loop
            spec = await asyncio.to_thread(self.resolver.resolve, spec, principal.project)
            key = canonical_json(spec)
        reward = await self._bound_reward(spec, key, principal.project)
        if reward.runs_code:
            require(principal, RUNS_CODE, "the spec has a code component")
        if not rollouts:
            return []
        await self.probes.check(reward, rollouts, principal.project)
        project = principal.project
        release = await self.admission.enter(project, len(rollouts))
        try:
            inline = self._score_inline(reward, rollouts, project)
        except BaseException as exc:
            release()
            raise _service_error(exc, rollouts) from None
        if isinstance(inline, list):  # answered from the cache without leaving the event loop
            release()
            return inline
        cancelled = threading.Event()
        if inline is None:
            work = self.cpu.submit(project, self._score_sync, reward, rollouts, project, cancelled)
        else:
            work = self.cpu.submit(project, self._finish_sync, reward, inline, project, cancelled)
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            cancelled.set()
            work.cancel()  # dropped if still queued for the project's share of the cpu pool
            self.metrics.cancelled.inc()
            raise
        except Exception as exc:
            raise _service_error(exc, rollouts) from None
        finally:
            _release_when_done(work, release)

    def _spec_key(self, spec: Mapping[str, Any]) -> bytes:
        """The spec's canonical JSON (its cache key), refused past ``rewards.max_spec_bytes``."""
        try:
            key = canonical_json(spec)
        except (TypeError, ValueError) as exc:  # a value JSON cannot hold (an integer past 64 bits)
            raise ServiceError("invalid_argument", f"spec: {exc}", "invalid_spec", path="spec") from None
        limit = self.config.spec.rewards.max_spec_bytes
        if len(key) > limit:
            raise ServiceError(
                "invalid_argument",
                f"the spec is {len(key)} bytes, over rewards.max_spec_bytes={limit}; a RewardSpec names evaluators "
                "and their params, its data goes in the rollouts",
                "spec_too_large",
                path="spec",
                limit=limit,
            )
        return key

    async def _bound_reward(self, spec: Mapping[str, Any], key: bytes, project: str) -> Reward:
        reward = self.bound.get(project, key)
        if reward is not None:
            return reward
        try:  # binding may import an evaluator's pack or start its pool: off the event loop, in the project's share
            reward = await asyncio.wrap_future(self.cpu.submit(project, self._bind, spec))
        except ServiceError:
            raise
        except Exception as exc:
            raise from_exception(exc) from None
        self.bound.put(project, key, reward)
        return reward

    def _bind(self, spec: Mapping[str, Any]) -> Reward:
        if not isinstance(spec, Mapping) or not spec:
            raise ServiceError("invalid_argument", "`spec` must be a RewardSpec mapping", "invalid_spec", path="spec")
        rewards = self.config.spec.rewards
        reward = from_mapping(server_spec(spec, self.config.spec), source="request")
        caps = Caps(
            timeout=rewards.upstream_timeout,
            retries=rewards.upstream_retries,
            concurrency=rewards.upstream_concurrency,
            record_timeout=rewards.record_timeout,
            code_limits=self.config.spec.sandbox.caps(),
        )
        return capped(reward, caps)

    def _cache_for(self, project: str) -> ScoreCache:
        """The cache a project's calls use: its own view, unless the operator shares scores server-wide."""
        if self.config.spec.rewards.shared_cache_scope == "server":
            return self.cache
        cache = self._project_caches.get(project)
        if cache is None:
            cache = self._project_caches[project] = ProjectCache(self.cache, project)
        return cache

    def _score_inline(
        self, reward: Reward, rollouts: Sequence[Mapping[str, Any]], project: str
    ) -> list[RewardResult] | Looked | None:
        """What the event loop does of a call before (or instead of) a thread: records and cache look-ups.

        Only for a batch of at most ``INLINE_ROLLOUTS`` rollouts, and only when the score cache is in memory
        alone (the shared tier's look-ups are database queries, never run on the loop). Returns the results
        when every score was cached (no thread hop at all), the looked-up batch when evaluators must still run
        (the thread finishes it), or None when this call is scored wholly on a thread.
        """
        if len(rollouts) > INLINE_ROLLOUTS or self.cache.shared is not None:
            return None
        records = records_of(rollouts, reward.spec.spec.reference_field)
        cache = self._cache_for(project) if reward.spec.spec.cache.enabled else None
        looked = Looked(records, cache, reward.look_up(records, cache=cache, timed=True))
        if not looked.scores.done:
            return looked
        return self._finish_sync(reward, looked, project, None)

    def _score_sync(
        self, reward: Reward, rollouts: Sequence[Mapping[str, Any]], project: str, cancelled: threading.Event
    ) -> list[RewardResult]:
        records = records_of(rollouts, reward.spec.spec.reference_field)
        cache: ScoreCache | None = self._cache_for(project) if reward.spec.spec.cache.enabled else None
        looked = Looked(records, cache, reward.look_up(records, cache=cache, timed=True))
        return self._finish_sync(reward, looked, project, cancelled)

    def _finish_sync(
        self, reward: Reward, looked: Looked, project: str, cancelled: threading.Event | None
    ) -> list[RewardResult]:
        """Run what the look-ups left, compose, count the rollouts (once per call) and redact for the tenant."""
        records = looked.records
        # Code components go to the sandbox pool, other components after the first to the component pool, the
        # first runs on this thread, each within the project's share of its pool (see evalsi.engine.Pools).
        if looked.scores.done:
            pools = Pools(observe=self._observe)
        else:
            pools = Pools(self.components.for_project(project), self.sandboxes.for_project(project), self._observe)
        try:
            columns = finish_components(looked.scores, looked.cache, pools, cancelled)
            results = self.verdicts.compose(reward, columns) if looked.scores.done else reward.compose(columns)
        except ScoringCancelled:
            raise
        except RewardBatchError as exc:
            self.metrics.child(self.metrics.rollouts, project, "failed").inc(len(records))
            raise RewardBatchError(exc.index, exc.component, redact(exc.cause) or "") from None
        except Exception:
            self.metrics.child(self.metrics.rollouts, project, "failed").inc(len(records))
            raise
        for status, count in Counter(result.status for result in results).items():
            self.metrics.child(self.metrics.rollouts, project, status).inc(count)
        if any(score.status == "error" for column in columns for score in column):
            return [_redacted(result) for result in results]
        return results

    def _observe(self, job: ComponentJob, scores: list[Score], seconds: float) -> None:
        self.metrics.child(self.metrics.component_seconds, job.evaluator.name).observe(seconds)
        errors = sum(1 for s in scores if s.status == "error")
        if errors:
            self.metrics.child(self.metrics.component_errors, job.evaluator.name).inc(errors)

    def close(self) -> None:
        """Stop the pools and close bound rewards."""
        self.probes.close()
        self.cpu.shutdown()
        self.components.shutdown()
        self.sandboxes.shutdown()
        self.bound.clear()


@dataclass(frozen=True, slots=True)
class Looked:
    """A call's records after their cache look-ups, with the cache they were looked up in."""

    records: list[Record]
    cache: ScoreCache | None
    scores: LookedUp


def _service_error(exc: BaseException, rollouts: Sequence[Mapping[str, Any]]) -> BaseException:
    """The error a failed call answers (cancellation and other non-``Exception`` exceptions pass unchanged)."""
    if not isinstance(exc, Exception) or isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, RecursionError | TypeError):
        # rollouts are checked only here, where depth broke something: a walk per call costs every call
        try:
            check_rollouts_depth(rollouts)
        except ServiceError as error:
            return error
    return from_exception(exc)


def _redacted(result: RewardResult) -> RewardResult:
    """``result`` fit for a tenant: error reasons without host paths or the server's exception class names."""
    for score in result.components.values():
        if score.status == "error":
            break
    else:  # the common case, checked without a generator: nothing to redact
        return result
    components = {
        name: Score(s.value, s.status, redact(s.reason), s.details) if s.status == "error" else s
        for name, s in result.components.items()
    }
    return RewardResult(result.total, result.status, components)


def _release_when_done(work: Future[Any], release: Callable[[], None]) -> None:
    """Give the call's capacity back now if its work is over, else (on this loop) once its thread finishes."""
    if work.done():
        release()
        return
    loop = asyncio.get_running_loop()

    def finished(_: Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is gone
            loop.call_soon_threadsafe(release)

    work.add_done_callback(finished)


def require(principal: Principal, permission: str, why: str = "") -> None:
    """Refuse with ``permission_denied`` naming the permission the token lacks."""
    if not principal.allows(permission):
        reason = f" ({why})" if why else ""
        raise ServiceError(
            "permission_denied",
            f"the token for project {principal.project!r} lacks the {permission} permission{reason}",
            permission=permission,
        )
