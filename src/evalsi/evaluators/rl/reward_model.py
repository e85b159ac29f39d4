"""``reward-model``: a served reward model scores each rollout, over OpenRLHF's protocol or vLLM's ``/pooling``.

Rollouts requested together (within ``wait_ms``, up to ``max_batch``) go to the server in one HTTP call, also
across concurrent batches, rewards and threads (see ``_rm_batcher``). What is sent is the prompt and the
completion, rendered as ``_rm_protocol`` describes. A call that fails after its retries, or a reply outside the
protocol, is an ``error`` score for the rollouts it carried, so the spec's ``onError`` decides; never a 0.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import Field, model_validator

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._operator import OPERATOR_ONLY, ServerResource
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.evaluators.rl._rm_batcher import BatcherHub, CallError, Endpoint
from evalsi.evaluators.rl._rm_protocol import Protocol, rm_input
from evalsi.records import Record

Normalise = Literal["none", "sigmoid", "affine"]


class RewardModelParams(Params):
    """Where the reward model is served, how calls are batched and retried, and how its score is mapped."""

    url: str = Field(pattern=r"^https?://", json_schema_extra=OPERATOR_ONLY)
    """The full URL to POST to: OpenRLHF's reward server (e.g. ``http://host:5000/get_reward``) or vLLM's
    pooling endpoint (e.g. ``http://host:8000/pooling``)."""
    protocol: Protocol = "openrlhf"
    """``openrlhf``: ``{"query","prompts","labels"}`` → ``{"rewards"}``. ``vllm-pooling``: ``{"model","input"}``
    → ``{"data": [{"index","data"}]}``."""
    model: str | None = None
    """For ``vllm-pooling``: the served model name sent as ``model`` (the server's default when unset). On an evalsi
    server: the name of a reward model configured there, which supplies ``url`` and the other upstream params."""
    wait_ms: float = Field(default=5.0, ge=0, le=10_000)
    """How long the first pending rollout waits for others to share its call."""
    max_batch: int = Field(default=64, ge=1, le=65_536)
    """Most rollouts in one call; a full batch leaves without waiting."""
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    """Most calls in flight to this endpoint at once (shared by every caller in this process)."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds per HTTP attempt."""
    retries: int = Field(default=3, ge=0, le=20)
    """Further attempts after a timeout, a connection failure, or 408, 409, 425, 429, 500, 502, 503, 504."""
    backoff: float = Field(default=0.5, ge=0)
    """Seconds before the first retry, doubling each time (a ``Retry-After`` header takes precedence)."""
    api_key_env: str | None = Field(default=None, json_schema_extra=OPERATOR_ONLY)
    """An environment variable holding a bearer token for the server (none sent when unset or empty)."""
    normalise: Normalise = "none"
    """Map the raw score ``r``: ``none`` (as is), ``affine`` (``scale·r + shift``), ``sigmoid``
    (``1 / (1 + e^-(scale·r + shift))``, into (0, 1))."""
    scale: float = 1.0
    """Multiplies the raw score (``affine`` and ``sigmoid``)."""
    shift: float = 0.0
    """Added after ``scale`` (``affine`` and ``sigmoid``)."""
    label_index: int | None = None
    """For ``vllm-pooling`` outputs with several values per input (a classifier): which one is the reward."""
    chat_as_messages: bool = True
    """For ``vllm-pooling`` chat rollouts: send ``messages`` (one conversation per call, the server applies the
    model's chat template). False renders them as ChatML text, which batches."""
    extra_body: dict[str, Any] = Field(default_factory=dict, json_schema_extra=OPERATOR_ONLY)
    """Extra request fields, e.g. ``{"use_activation": false}`` or ``{"truncate_prompt_tokens": 4096}``."""

    @model_validator(mode="after")
    def _consistent(self) -> RewardModelParams:
        if self.normalise == "none" and (self.scale != 1.0 or self.shift != 0.0):
            raise ValueError("scale and shift apply only with normalise: affine or sigmoid")
        if self.protocol == "openrlhf" and (self.model is not None or self.label_index is not None):
            raise ValueError("model and label_index apply only to protocol: vllm-pooling")
        return self

    def endpoint(self) -> Endpoint:
        """The batcher key: everything that shapes the calls (not the normalisation)."""
        return Endpoint(
            url=self.url,
            protocol=self.protocol,
            model=self.model,
            api_key_env=self.api_key_env,
            timeout=self.timeout,
            retries=self.retries,
            backoff=self.backoff,
            wait_ms=self.wait_ms,
            max_batch=self.max_batch,
            max_concurrency=self.max_concurrency,
            label_index=self.label_index,
            extra_body=orjson.dumps(self.extra_body, option=orjson.OPT_SORT_KEYS).decode(),
        )


def normalised(raw: float, params: RewardModelParams) -> float:
    """Apply the params' normalisation to a raw reward-model score."""
    if params.normalise == "none":
        return raw
    z = params.scale * raw + params.shift
    if params.normalise == "affine":
        return z
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)  # the stable form for negative z: no overflow in exp(-z)
    return e / (1.0 + e)


def _wait(futures: list[concurrent.futures.Future[float]], budget: float, cancelled: threading.Event | None) -> None:
    """Wait for the scores; if the caller goes away first, stop waiting and drop the rollouts not yet sent."""
    if cancelled is None:
        concurrent.futures.wait(futures, timeout=budget)
        return
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        _, pending = concurrent.futures.wait(futures, timeout=min(0.05, max(0.0, deadline - time.monotonic())))
        if not pending:
            return
        if cancelled.is_set():
            for future in pending:
                future.cancel()  # the batcher skips it; a call already carrying it still finishes
            return


@register
class RewardModel(Evaluator[RewardModelParams]):
    """The reward model's score for prompt + completion, optionally normalised; raw score in ``details``."""

    name = "reward-model"
    summary = "A served reward model (OpenRLHF protocol or vLLM /pooling); concurrent requests are batched."
    params_model = RewardModelParams
    reads = ("prompt", "completion", "reference")
    pack = "rl"
    server_resource = ServerResource("reward_models", "model")

    def __init__(self) -> None:
        self._hub = BatcherHub()
        self._closed_lock = threading.Lock()

    def cache_fields(self, params: RewardModelParams) -> tuple[str, ...]:
        """The reference is sent only as OpenRLHF's label, so only that protocol's scores depend on it."""
        return self.reads if params.protocol == "openrlhf" else ("prompt", "completion")

    def score_batch(self, records: Sequence[Record], params: RewardModelParams, ctx: ScoreContext) -> list[Score]:
        """Submit every record to the shared batcher and wait for their scores."""
        endpoint = params.endpoint()
        inputs = [rm_input(r, params.protocol, params.chat_as_messages) for r in records]
        futures = self._hub.submit(endpoint, inputs)
        # Every call is bounded by its timeout and retries; the margin covers queueing behind other calls.
        attempts = params.retries + 1
        budget = attempts * (params.timeout + params.backoff * 2**params.retries + 30.0) * 4
        _wait(futures, budget, ctx.cancelled)
        return [self._score(future, params, budget) for future in futures]

    @staticmethod
    def _score(future: concurrent.futures.Future[float], params: RewardModelParams, budget: float) -> Score:
        if future.cancelled():
            return Score.error("not scored: the call was cancelled")
        if not future.done():
            future.cancel()
            return Score.error(f"reward model at {params.url}: no score within {budget:g} s")
        exc = future.exception()
        if exc is not None:
            reason = str(exc) if isinstance(exc, CallError) else f"{type(exc).__name__}: {exc}"
            return Score.error(reason)
        raw = future.result()
        return Score.ok(normalised(raw, params), details={"raw": raw})

    def calls(self, params: RewardModelParams) -> int:
        """HTTP requests this process made to the endpoint of ``params`` (retries included)."""
        return self._hub.calls(params.endpoint())

    def close(self) -> None:
        """Stop the background loop and close the HTTP clients; a later call starts them again."""
        with self._closed_lock:
            self._hub.close()
