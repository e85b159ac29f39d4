"""``llm-judge``: a generative judge behind an OpenAI-compatible endpoint scores each rollout.

The judge reads the config's template filled from the record, answers, and its reply is read by the config's
``verdict`` rule. Scores are cached by the engine like any component's: the cache key holds the whole judge
config and exactly the record fields the template uses, so a repeated rollout costs no judge call.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future
from typing import Any

from pydantic import field_validator

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._operator import ServerResource
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.evaluators.judge._client import MAX_REPLY_CHARS, ChatEndpoint, JudgeCallError, JudgeClient
from evalsi.evaluators.judge._config import JsonVerdict, JudgeConfig, resolve_judge
from evalsi.evaluators.judge._template import (
    DEFAULT_TEMPLATE,
    DEFAULT_TEMPLATE_WITH_REFERENCE,
    MissingField,
    record_fields,
    render,
)
from evalsi.evaluators.judge._verdict import VerdictError, format_hint, parse_verdict
from evalsi.records import Record

log = logging.getLogger(__name__)


class LLMJudgeParams(Params):
    """The judge to ask."""

    judge: JudgeConfig
    """JudgeConfig fields (model, base_url, api_key_env, template, rubric, verdict, ...); on an evalsi server,
    the name of a judge configured there. Set it as the component's ``judge`` or as a param."""

    @field_validator("judge", mode="before")
    @classmethod
    def _resolve_name(cls, value: Any) -> Any:
        return resolve_judge(value)


def request_body(config: JudgeConfig, record: Record) -> dict[str, Any]:
    """The chat-completions body for one record.

    Raises:
        MissingField: The template needs a field the record lacks.

    """
    template = config.template
    if template is None:
        template = DEFAULT_TEMPLATE if record.reference is None else DEFAULT_TEMPLATE_WITH_REFERENCE
    user = render(template, record, config.rubric, format_hint(config.verdict))
    if isinstance(config.verdict, JsonVerdict) and config.verdict.json_mode:
        return chat_body(config, user, response_format={"type": "json_object"})
    return chat_body(config, user)


def chat_body(config: JudgeConfig, user: str, **fields: Any) -> dict[str, Any]:
    """The chat-completions body asking the judge ``user`` (after the config's system prompt, when it has one).

    Args:
        config: The judge: model, system prompt, sampling, and the ``extra_body`` sent with every request.
        user: The user message, the rendered question.
        fields: Further fields of the request (``extra_body`` wins over them).

    Returns:
        The request body.

    """
    messages = [{"role": "system", "content": config.system}] if config.system else []
    messages.append({"role": "user", "content": user})
    body: dict[str, Any] = {"model": config.model, "messages": messages, "temperature": config.temperature}
    if config.max_tokens is not None:
        body["max_tokens"] = config.max_tokens
    body.update(fields)
    body.update(config.extra_body)
    return body


class JudgeClients:
    """One shared :class:`JudgeClient` per judge endpoint, the least recently used closed past ``max_clients``.

    Every judge evaluator (``llm-judge``, ``pairwise-judge``) holds one, so an endpoint's concurrency bound,
    retries and keep-alive connections are the same whichever kind of judge asks.
    """

    max_clients = 64
    """Endpoints kept open at once; the least recently used one is closed (once idle) past this."""

    def __init__(self) -> None:
        self._clients: OrderedDict[ChatEndpoint, JudgeClient] = OrderedDict()
        self._lock = threading.Lock()

    def _client(self, config: JudgeConfig) -> JudgeClient:
        endpoint = ChatEndpoint(
            base_url=config.base_url,
            api_key_env=config.api_key_env,
            timeout=config.timeout,
            retries=config.retries,
            backoff=config.backoff,
            max_concurrency=config.max_concurrency,
        )
        with self._lock:
            client = self._clients.get(endpoint)
            if client is None:
                client = self._clients[endpoint] = JudgeClient(endpoint)
            self._clients.move_to_end(endpoint)
            retired = self._clients.popitem(last=False)[1] if len(self._clients) > self.max_clients else None
        if retired is not None:
            retired.retire()
        return client

    def close(self) -> None:
        """Close every client and its threads; a later call opens new ones."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            client.close()


@register
class LLMJudge(JudgeClients, Evaluator[LLMJudgeParams]):
    """The judge's verdict as a score; an unreadable verdict is an error with the reply in the details."""

    name = "llm-judge"
    summary = "A generative judge (any OpenAI-compatible endpoint) scores the completion by a rubric."
    params_model = LLMJudgeParams
    reads = ("prompt", "completion", "reference", "metadata")
    pack = "judge"
    server_resource = ServerResource("judges", "judge", nested=True)

    def cache_fields(self, params: LLMJudgeParams) -> tuple[str, ...]:
        """Only the fields the template shows the judge (the default template: prompt, completion, reference).

        Args:
            params: The component's validated params.

        """
        template = params.judge.template
        return ("prompt", "completion", "reference") if template is None else record_fields(template)

    def score_batch(self, records: Sequence[Record], params: LLMJudgeParams, ctx: ScoreContext) -> list[Score]:
        """Ask the judge about every record at once (bounded by ``max_concurrency``) and read the verdicts.

        Args:
            records: The records to judge.
            params: The component's validated params.
            ctx: Per-call context (cancellation, deadlines, the pools to use).

        """
        config = params.judge
        client = self._client(config)
        out: list[Score | Future[str]] = []
        for record in records:
            try:
                body = request_body(config, record)
            except MissingField as exc:
                out.append(Score.skipped(str(exc)) if exc.skip else Score.error(str(exc)))
                continue
            out.append(client.submit(body))
        if ctx.cancelled is not None:
            drop_when_cancelled([item for item in out if not isinstance(item, Score)], ctx.cancelled)
        return [item if isinstance(item, Score) else _answered(item, config) for item in out]

    def calls(self, params: LLMJudgeParams) -> int:
        """HTTP requests made to the judge endpoint of ``params`` so far (retries included).

        Args:
            params: Params naming the endpoint.

        """
        return self._client(params.judge).calls


def drop_when_cancelled(futures: list[Future[str]], cancelled: threading.Event) -> None:
    """Wait for the requests; if the caller goes away first, stop them (those not yet sent never go)."""
    while not all(f.done() for f in futures):
        if cancelled.wait(0.05):
            # Newest first: the queued requests are dropped before the one in flight is stopped, or stopping it
            # would free its slot for the next queued request, sent before its own cancel arrived.
            for future in reversed(futures):
                future.cancel()  # a request already sent is stopped; the others never go
            return


def _answered(future: Future[str], config: JudgeConfig) -> Score:
    if future.cancelled():
        return Score.error("not judged: the call was cancelled")
    return _verdict_score(future, config)


def _verdict_score(future: Future[str], config: JudgeConfig) -> Score:
    where = f"judge {config.model!r} at {config.base_url}"
    try:
        text = future.result()  # bounded: each attempt has the config's timeout, and attempts are finite
    except JudgeCallError as exc:
        return Score.error(f"{where}: {exc}")
    except CancelledError:
        return Score.error(f"{where}: the llm-judge evaluator was closed before the call ran")
    except Exception:  # a failed sample is data; its text may come from the remote, so it is only logged
        log.exception("%s: the call failed unexpectedly", where)
        return Score.error(f"{where}: the call failed unexpectedly (see the log)")
    cut = len(text) > MAX_REPLY_CHARS
    raw = "…" + text[-(MAX_REPLY_CHARS - 1) :] if cut else text
    try:
        value, read = parse_verdict(text, config.verdict)
    except VerdictError as exc:
        return Score.error(f"unparseable verdict from {where}: {exc}", details={"raw": raw})
    if cut:  # keep cached details small: the parsed JSON of a huge reply is dropped too
        read = {"verdict": read.get("verdict")}
    return Score.ok(value, details={**read, "raw": raw})
