"""Replies for evaluation jobs, generated with the operator's named targets on one event loop of the server.

Generation is HTTP calls, no tenant code, so it runs in the server process: one daemon thread runs an event loop
on which each job's rows are sent through the run engine's :class:`~evalsi.runs.OpenAITarget` (its retry
transport, its parsing). Requests open to a target are bounded across jobs by the target's ``max_concurrency``,
and one project holds at most ``rewards.project_share`` of them, so one project's large job cannot starve
another's. A job's generation is a future: cancelling it stops the requests at once. Failures reach the tenant
as the status or the kind of failure only, never the endpoint's address or what it answered. What a target is
sent of a row is rebuilt from an allow-list (:mod:`._messages`); a job's ``stop`` sequences are bounded by
the target's ``max_stop`` and ``max_stop_chars``; the target's budgets are kept by :mod:`._budget`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from evalsi.runs import Generation, GenerationError, OpenAITarget
from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError
from evalsi.server._fair import share_of
from evalsi.server._trust import check_int64
from evalsi.server.evaluation._config import TargetConfig
from evalsi.server.evaluation.jobs._messages import Refused, prompt_messages
from evalsi.specs import SamplingSpec

PARAMS_PATH = "evaluationJob.completionParams"
SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "seed", "stop")
"""What a job may set: sampling only. Everything else a request could send upstream is the operator's."""
_SPELLINGS = {"topP": "top_p", "maxTokens": "max_tokens"}
_OPERATOR_ONLY = frozenset(
    {"base_url", "baseUrl", "base_urls", "baseUrls", "url", "api_key", "apiKey", "api_key_env", "apiKeyEnv",
     "extra_body", "extraBody", "extra", "headers", "extra_headers", "extraHeaders", "model", "timeout",
     "retries", "max_retries"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Failed:
    """A row whose reply could not be generated, and why (fit for the tenant)."""

    reason: str
    sent: bool = True
    """Whether a request reached the target (a row refused before it, or past a budget, was never sent)."""


Outcome = Generation | Failed


def check_params(raw: Mapping[str, Any], target: TargetConfig) -> dict[str, Any]:
    """A job's ``completionParams`` as request fields: only sampling fields, ``max_tokens`` clamped.

    A job that sets no ``max_tokens`` is sent the target's ceiling, so every reply is bounded.

    Raises:
        ServiceError: ``permission_denied`` for a field only the operator sets (a URL, a key, headers, extra
            request fields), ``invalid_argument`` for any other unknown field or a bad value; both name it.

    """
    fields: dict[str, Any] = {}
    valid = ", ".join(SAMPLING_FIELDS)
    for key, value in raw.items():
        name = _SPELLINGS.get(key, key)
        where = f"{PARAMS_PATH}.{key}"
        if key in _OPERATOR_ONLY:
            raise ServiceError(
                "permission_denied",
                f"{where}: set by the server's operator on the target, never by a job; a job may set {valid}",
                path=where,
            )
        if name not in SAMPLING_FIELDS:
            raise ServiceError("invalid_argument", f"{where}: not a completion param (valid: {valid})", path=where)
        fields[name] = _whole(value, where) if name in ("max_tokens", "seed") else value
    if isinstance(fields.get("stop"), str):
        fields["stop"] = [fields["stop"]]
    _check_stop(fields.get("stop"), target)
    try:
        sampling = SamplingSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join([PARAMS_PATH, *(str(part) for part in first["loc"])])
        raise ServiceError("invalid_argument", f"{where}: {first['msg']}", path=where) from None
    out = sampling.request_fields()
    out["max_tokens"] = min(int(out.get("max_tokens") or target.max_tokens), target.max_tokens)
    return out


def _check_stop(stop: Any, target: TargetConfig) -> None:
    """At most ``max_stop`` stop sequences of at most ``max_stop_chars`` characters each (the target's bounds)."""
    if not isinstance(stop, list):
        return  # absent, or a wrong type SamplingSpec names
    where = f"{PARAMS_PATH}.stop"
    if len(stop) > target.max_stop:
        raise ServiceError(
            "invalid_argument",
            f"{where}: {len(stop)} stop sequences; this target takes at most {target.max_stop} (max_stop)",
            path=where,
        )
    for index, item in enumerate(stop):
        if isinstance(item, str) and len(item) > target.max_stop_chars:
            raise ServiceError(
                "invalid_argument",
                f"{where}[{index}]: {len(item)} characters; a stop sequence has at most {target.max_stop_chars} "
                "(max_stop_chars)",
                path=f"{where}[{index}]",
            )


def _whole(value: Any, where: str) -> Any:
    """JSON numbers arrive as floats (``google.protobuf.Struct``): ``256.0`` is 256, ``2.5`` is refused."""
    if isinstance(value, float) and value.is_integer():
        return check_int64(int(value), where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServiceError("invalid_argument", f"{where}: must be a whole number, got {value!r}", path=where)
    return check_int64(value, where)


def with_reply(row: dict[str, Any], generation: Generation) -> dict[str, Any]:
    """The row with the generated reply as its last message."""
    reply = {"role": "assistant", "content": generation.text}
    return {**row, "messages": [*(row.get("messages") or []), reply]}


def generation_record(target: str, generation: Generation) -> dict[str, Any]:
    """What an output row records of its generated reply: the target, why it stopped, tokens, seconds."""
    record: dict[str, Any] = {"target": target, "finish_reason": generation.finish_reason,
                              "latency_s": round(generation.latency, 6)}  # fmt: skip
    if generation.tokens is not None:
        record["completion_tokens"] = generation.tokens
    return record


class Generators:
    """The named targets, their shared request slots, and the event loop generating on them."""

    def __init__(self, config: ServerConfig) -> None:
        self.targets: dict[str, TargetConfig] = dict(config.spec.targets)
        self.project_share = config.spec.rewards.project_share
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._shares: dict[tuple[str, str], asyncio.Semaphore] = {}

    def target(self, name: str, path: str = "evaluationJob.target") -> TargetConfig:
        """The target called ``name``.

        Raises:
            ServiceError: ``invalid_argument`` naming it and the valid names.

        """
        found = self.targets.get(name)
        if found is None:
            valid = ", ".join(sorted(self.targets)) or "none are configured"
            raise ServiceError(
                "invalid_argument", f"{path}: no target named {name!r} on this server (valid: {valid})", path=path
            )
        return found

    def start(
        self, project: str, name: str, params: Mapping[str, Any], prompts: Sequence[list[dict[str, Any]]]
    ) -> concurrent.futures.Future[list[Outcome]]:
        """Generate one reply per prompt (chat messages) on the loop; the future's ``cancel()`` stops them."""
        loop = self._running_loop()
        return asyncio.run_coroutine_threadsafe(self._generate(project, name, dict(params), list(prompts)), loop)

    async def _generate(
        self, project: str, name: str, params: dict[str, Any], prompts: list[list[dict[str, Any]]]
    ) -> list[Outcome]:
        config = self.target(name)
        slots = self._slots.setdefault(name, asyncio.Semaphore(config.max_concurrency))
        share = self._shares.setdefault(
            (name, project), asyncio.Semaphore(share_of(config.max_concurrency, self.project_share))
        )
        try:
            target = OpenAITarget(config.target_spec(), SamplingSpec.model_validate(params))
        except GenerationError:
            raise ServiceError(
                "failed_precondition",
                f"target {name!r} cannot be used on this server now: its API key is not set (tell the operator)",
            ) from None
        try:
            return await asyncio.gather(*(self._one(name, config, target, slots, share, p) for p in prompts))
        finally:
            await target.aclose()

    @staticmethod
    async def _one(
        name: str,
        config: TargetConfig,
        target: OpenAITarget,
        slots: asyncio.Semaphore,
        share: asyncio.Semaphore,
        prompt: list[dict[str, Any]],
    ) -> Outcome:
        try:
            messages = prompt_messages(prompt, name, config)  # rebuilt: never the row's messages as stored
        except Refused as exc:
            return Failed(exc.reason, sent=False)
        async with share, slots:  # the project's share first: waiting for it holds none of the target's slots
            try:
                generations = await target.generate(messages, 1)
            except GenerationError as exc:
                return Failed(exc.public)
        return generations[0]

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="evalsi-job-generation", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def close(self) -> None:
        """Stop the loop (the jobs' futures were cancelled by then)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            if not thread.is_alive():
                loop.close()
