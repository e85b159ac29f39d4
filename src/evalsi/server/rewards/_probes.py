"""Probes on first use: the first time a project scores with a spec, the spec is probed with that call's data.

``rewards.probe_on_first_use`` decides what follows: ``off`` probes nothing; ``warn`` (the default) probes in
the background while the call is scored as usual, then logs what the probes found and counts it in
``evalsi_reward_probe_*``; ``refuse`` holds the call until the verdict (at most ``rewards.probe_timeout``, after
which the call is answered ``unavailable`` and may be retried while the probes finish) and refuses it, and every
later call with that spec, with ``failed_precondition`` (code ``reward_spec_hackable``) naming the findings.

The probes are the tenant's work and run within the tenant's limits: their rollouts hold the project's share of
``rewards.max_inflight`` (and its quota) while they run, on the project's share of the cpu, component and
sandbox pools, through the spec as the server bound it (upstream and sandbox caps applied), at most
``rewards.probe_max_rollouts`` rollouts built from at most 4 distinct rows of the call. A verdict is kept per
project and spec digest (the last 4096), so a spec is probed once per project, never per call; a probe run that
failed is not retried until the server restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import Counter

from evalsi.engine import Pools
from evalsi.records import canonical_json
from evalsi.rewards import Reward
from evalsi.rewards.probes import ProbeLimits, ProbeReport, probe_reward
from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError
from evalsi.server._fair import FairPool
from evalsi.server._limits import Admission
from evalsi.server._metrics import Metrics

log = logging.getLogger("evalsi.server")

_KEPT = 4096
_ROWS = 4
_SAMPLE = 256
_LATEX_CHARS = 64 << 10
"""The LaTeX flood on a server: 64 KiB, so a judge behind the operator's credentials is not sent a megabyte."""


class ProbeHost(Protocol):
    """What the probes use of the Reward Service: its config, metrics, admission gates and pools.

    The probes run within the service's limits, so they take them from the service that owns them.
    """

    @property
    def config(self) -> ServerConfig:
        """The server's config (``rewards.probe_*``)."""

    @property
    def metrics(self) -> Metrics:
        """The server's metrics (the probes' counters join its registry)."""

    @property
    def admission(self) -> Admission:
        """The rollouts-in-flight gates a probe run holds while it runs."""

    @property
    def cpu(self) -> FairPool:
        """The pool the probe run itself runs on."""

    @property
    def components(self) -> FairPool:
        """The pool of component calls."""

    @property
    def sandboxes(self) -> FairPool:
        """The pool of sandboxed runs."""


@dataclass(frozen=True)
class Verdict:
    """What probing one spec for one project found (``report`` None: the probes could not run)."""

    report: ProbeReport | None
    error: str | None = None

    @property
    def refusable(self) -> bool:
        """A probe earned reward, or the data's right answers did not earn full reward."""
        return self.report is not None and (self.report.hackable or self.report.oracle_failed)


class FirstUseProbes:
    """The Reward Service's first-use probing: one probe run per project and spec, its verdict kept."""

    def __init__(self, service: ProbeHost) -> None:
        rewards = service.config.spec.rewards
        self.service = service
        self.mode = rewards.probe_on_first_use
        self.timeout = rewards.probe_timeout
        self.limits = ProbeLimits(max_rows=_ROWS, max_rollouts=rewards.probe_max_rollouts, latex_chars=_LATEX_CHARS)
        self._runs: OrderedDict[tuple[str, bytes], asyncio.Future[Verdict]] = OrderedDict()
        self._stop = threading.Event()
        registry = service.metrics.registry
        self.runs = Counter(
            "evalsi_reward_probe_runs",
            "Specs probed on first use, by project and verdict (clean, hackable, oracle_failed, error).",
            ["project", "verdict"],
            registry=registry,
        )
        self.findings = Counter(
            "evalsi_reward_probe_findings",
            "Components earned by a probe when specs were first used, by evaluator and probe.",
            ["evaluator", "probe"],
            registry=registry,
        )
        self.refused = Counter(
            "evalsi_reward_probe_refused_calls",
            "Calls refused because their spec's probes found it hackable (probe_on_first_use: refuse).",
            ["project"],
            registry=registry,
        )

    async def check(self, reward: Reward, rollouts: Sequence[Mapping[str, Any]], project: str) -> None:
        """Probe ``reward`` if ``project`` has not used it before; under ``refuse``, refuse it if it is hackable.

        Raises:
            ServiceError: ``failed_precondition`` (the spec is hackable, under ``refuse``), or ``unavailable``
                (its probes are still running past ``probe_timeout``).

        """
        if self.mode == "off" or not rollouts:
            return
        key = (project, hashlib.sha256(canonical_json(reward.to_resource())).digest())
        run = self._runs.get(key)
        if run is None:
            run = asyncio.ensure_future(self._probe(reward, rollouts[:_SAMPLE], project))
            self._runs[key] = run
            while len(self._runs) > _KEPT:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(key)
        if self.mode != "refuse":
            return
        try:
            verdict = await asyncio.wait_for(asyncio.shield(run), self.timeout)
        except TimeoutError:
            raise ServiceError(
                "unavailable",
                f"the spec {reward.name!r} is being probed before its first use (rewards.probe_on_first_use: "
                "refuse); retry shortly",
            ) from None
        if verdict.refusable and verdict.report is not None:
            self.refused.labels(project).inc()
            findings = verdict.report.findings()
            raise ServiceError(
                "failed_precondition",
                f"the spec {reward.name!r} is refused: probes built from this call's rollouts found it hackable "
                f"(rewards.probe_on_first_use: refuse): {'; '.join(findings)}",
                "reward_spec_hackable",
                findings=findings,
            )

    async def _probe(self, reward: Reward, rollouts: Sequence[Mapping[str, Any]], project: str) -> Verdict:
        service = self.service
        try:
            records = reward.records(rollouts)
        except Exception as exc:  # the call itself reports a malformed rollout
            return self._record(reward, project, Verdict(None, f"rollouts not usable: {exc}"))
        release = await service.admission.enter(project, self.limits.max_rollouts)
        try:
            pools = Pools(service.components.for_project(project), service.sandboxes.for_project(project))
            work = service.cpu.submit(
                project, lambda: probe_reward(reward, records, limits=self.limits, pools=pools, cancelled=self._stop)
            )
            report = await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("probing spec %r for project %s failed", reward.name, project)
            return self._record(reward, project, Verdict(None, f"{type(exc).__name__}: {exc}"))
        finally:
            release()
        return self._record(reward, project, Verdict(report))

    def _record(self, reward: Reward, project: str, verdict: Verdict) -> Verdict:
        report = verdict.report
        if report is None:
            self.runs.labels(project, "error").inc()
            log.warning("spec %r (project %s) could not be probed: %s", reward.name, project, verdict.error)
            return verdict
        result = "hackable" if report.hackable else "oracle_failed" if report.oracle_failed else "clean"
        self.runs.labels(project, result).inc()
        for component in report.components:
            for probe in component.hacked_by:
                self.findings.labels(component.evaluator, probe).inc()
        if result != "clean":
            action = "refused" if self.mode == "refuse" else "scored anyway (rewards.probe_on_first_use: warn)"
            log.warning(
                "spec %r (project %s) failed its first-use probes, %s: %s",
                reward.name,
                project,
                action,
                "; ".join(report.findings()),
            )
        return verdict

    def close(self) -> None:
        """Drop probe work not started yet, and stop waiting for what runs."""
        self._stop.set()
        for run in self._runs.values():
            with contextlib.suppress(RuntimeError):  # the loop is gone
                run.cancel()
